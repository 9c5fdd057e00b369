"""``windows.resources`` -> ``linux.resources``, as hcsshim maps them onto a job object.

* ``cpu.count``, ``cpu.maximum`` and ``cpu.shares`` are mutually exclusive (hcsshim's
  ``ConvertCPULimits``); 0 means unset.
* ``count`` is clamped to the host's CPUs and becomes a CFS quota of ``count /
  hostCPUs`` of the machine over the default 100 ms period, i.e. ``count`` CPUs.
* ``maximum`` is in hundredths of a percent of the whole machine (1-10000): a quota
  of ``maximum / 10000 * hostCPUs`` CPUs.
* ``shares`` (0-10000, hcsshim's processor weight) is a relative weight on the same
  scale as cgroup v2's ``cpu.weight``; it is expressed as the ``cpu.shares`` that
  runc's conversion turns back into exactly that weight (and that v1 uses as is).
* ``memory.limit`` is the memory limit.
* ``storage.iops`` / ``storage.bps`` throttle reads and writes on the block device
  that holds the container's writable layer (``io_device``).
"""

from __future__ import annotations

from hostjob.cgroups.resources import DEFAULT_CFS_PERIOD, cpu_weight_to_shares
from hostjob.errors import ConfigError
from hostjob.spec import runtime as wire


def _warn(msg: str) -> None:
    from hostjob import log  # json and re come with it: only when needed

    log.warning(msg)


# The kernel refuses a CFS quota below 1 ms.
MIN_QUOTA = 1000


def from_windows(
    res: wire.WindowsResources, host_cpus: int, io_device: tuple[int, int] | None
) -> wire.Resources:
    """The Linux resources that give a job container what ``windows.resources`` asks."""
    out = wire.Resources()
    host_cpus = max(host_cpus, 1)
    cpu = res.cpu
    if cpu is not None:
        count, maximum, shares = cpu.count or 0, cpu.maximum or 0, cpu.shares or 0
        if sum(1 for v in (count, maximum, shares) if v) > 1:
            raise ConfigError(
                f"cpu.count ({count}), cpu.maximum ({maximum}) and cpu.shares ({shares})"
                " are mutually exclusive",
                "windows.resources.cpu",
            )
        if count:
            if count > host_cpus:
                _warn(
                    f"windows.resources.cpu.count {count} is more than this host's"
                    f" {host_cpus} CPUs: using {host_cpus}"
                )
                count = host_cpus
            out.cpu = wire.CPU(quota=count * DEFAULT_CFS_PERIOD, period=DEFAULT_CFS_PERIOD)
        elif maximum:
            if maximum > 10000:
                raise ConfigError(
                    f"{maximum} is out of range [1, 10000] (hundredths of a percent)",
                    "windows.resources.cpu.maximum",
                )
            quota = maximum * host_cpus * DEFAULT_CFS_PERIOD // 10000
            out.cpu = wire.CPU(quota=max(quota, MIN_QUOTA), period=DEFAULT_CFS_PERIOD)
        elif shares:
            if shares > 10000:
                raise ConfigError(
                    f"{shares} is out of range [0, 10000]", "windows.resources.cpu.shares"
                )
            out.cpu = wire.CPU(shares=cpu_weight_to_shares(shares))
    if res.memory is not None and res.memory.limit:
        out.memory = wire.Memory(limit=res.memory.limit)
    storage = res.storage
    if storage is not None and (storage.iops or storage.bps):
        if io_device is None:
            _warn("windows.resources.storage is ignored: the writable layer is on no block device")
        else:
            major, minor = io_device
            block_io = wire.BlockIO()
            if storage.iops:
                block_io.throttle_read_iops_device = [
                    wire.ThrottleDevice(major=major, minor=minor, rate=storage.iops)
                ]
                block_io.throttle_write_iops_device = [
                    wire.ThrottleDevice(major=major, minor=minor, rate=storage.iops)
                ]
            if storage.bps:
                block_io.throttle_read_bps_device = [
                    wire.ThrottleDevice(major=major, minor=minor, rate=storage.bps)
                ]
                block_io.throttle_write_bps_device = [
                    wire.ThrottleDevice(major=major, minor=minor, rate=storage.bps)
                ]
            out.block_io = block_io
    if storage is not None and storage.sandbox_size:
        _warn("windows.resources.storage.sandboxSize is ignored on Linux")
    return out
