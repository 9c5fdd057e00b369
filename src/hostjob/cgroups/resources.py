"""``linux.resources`` checks and runc's v1 <-> v2 conversions, shared by both managers.

runtime-spec describes limits in cgroup v1 terms (cpu shares, memory+swap, blkio
weight); on cgroup v2 they are converted exactly as runc converts them
(``libcontainer/cgroups/utils.go``). ``validate`` refuses what no kernel would take
with a message naming the field; ``requirements`` says which controller each set
field needs, so that a missing controller is an error naming both;
``ignored`` lists the fields a job container accepts but cannot honour here.
"""

from __future__ import annotations

import posix

from hostjob.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec.resources import Resources

SHARES_MIN = 2
SHARES_MAX = 262144
WEIGHT_MAX = 10000

_R = "linux.resources"


def cpu_shares_to_weight(shares: int) -> int:
    """cpu.shares [2, 262144] -> cpu.weight [1, 10000] (runc's linear map; 0 = unset)."""
    if shares == 0:
        return 0
    shares = min(max(shares, SHARES_MIN), SHARES_MAX)
    return 1 + ((shares - SHARES_MIN) * 9999) // 262142


def blkio_weight_to_io_weight(weight: int) -> int:
    """blkio.weight [10, 1000] -> io.weight [1, 10000] (runc's linear map; 0 = unset)."""
    if weight == 0:
        return 0
    weight = min(max(weight, 10), 1000)
    return 1 + (weight - 10) * 9999 // 990


def memory_swap_to_v2(swap: int, memory: int) -> int:
    """runtime-spec's memory+swap -> memory.swap.max (swap alone), as runc converts it.

    -1 means unlimited and 0 unset, in and out.
    """
    if memory == -1 and swap == 0:
        return -1  # "no memory limit" also lifts the swap limit, as on v1
    if swap in (-1, 0) or memory == -1:
        return swap
    if memory == 0:
        raise ConfigError("a swap limit needs a memory limit on cgroup v2", f"{_R}.memory.swap")
    if swap < memory:
        raise ConfigError(
            f"memory+swap limit {swap} is lower than the memory limit {memory}",
            f"{_R}.memory.swap",
        )
    return swap - memory


def num_to_str(value: int) -> str:
    """A v2 ``*.max``/``*.low`` value: -1 -> ``max``, 0 -> unset (empty)."""
    if value == 0:
        return ""
    if value == -1:
        return "max"
    return str(value)


_hugepage_sizes: list[str] | None = None


def hugepage_sizes(sysfs: str = "/sys/kernel/mm/hugepages") -> list[str]:
    """This host's huge page sizes in cgroup file notation (``2MB``, ``1GB``)."""
    global _hugepage_sizes
    if _hugepage_sizes is not None and sysfs == "/sys/kernel/mm/hugepages":
        return _hugepage_sizes
    sizes: list[tuple[int, str]] = []
    try:
        names = posix.listdir(sysfs)
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("hugepages-") and name.endswith("kB")):
            continue
        try:
            kb = int(name[len("hugepages-") : -2])
        except ValueError:
            continue
        sizes.append((kb, page_size_name(kb)))
    result = [name for _kb, name in sorted(sizes)]
    if sysfs == "/sys/kernel/mm/hugepages":
        _hugepage_sizes = result
    return result


def page_size_name(kb: int) -> str:
    # The kernel's own naming (mm/hugetlb_cgroup.c): 2048 kB -> "2MB", 1048576 kB -> "1GB".
    if kb >= 1 << 20:
        return f"{kb >> 20}GB"
    if kb >= 1 << 10:
        return f"{kb >> 10}MB"
    return f"{kb}KB"


def _check_limit(value: int | None, field: str) -> None:
    if value is not None and value < -1:
        raise ConfigError(
            f"{value} is not a limit (use -1 for unlimited, 0 for unset or a byte count)", field
        )


def validate(res: Resources, version: int) -> None:
    """Refuse values no kernel takes, naming the field (ConfigError)."""
    m = res.memory
    if m is not None:
        _check_limit(m.limit, f"{_R}.memory.limit")
        _check_limit(m.reservation, f"{_R}.memory.reservation")
        _check_limit(m.swap, f"{_R}.memory.swap")
        limit, swap = m.limit or 0, m.swap or 0
        if limit > 0 and swap > 0 and swap < limit:
            raise ConfigError(
                f"memory+swap limit {swap} is lower than the memory limit {limit}",
                f"{_R}.memory.swap",
            )
        if version == 1 and m.swappiness is not None and m.swappiness > 100:
            raise ConfigError(f"{m.swappiness} is out of range [0, 100]", f"{_R}.memory.swappiness")
    c = res.cpu
    if c is not None:
        if c.idle is not None and c.idle not in (0, 1):
            raise ConfigError(f"{c.idle} is not 0 or 1", f"{_R}.cpu.idle")
        if c.quota is not None and c.quota < -1:
            raise ConfigError(f"{c.quota} is not a quota (use -1 for unlimited)", f"{_R}.cpu.quota")
        if version == 2 and (c.realtime_runtime or c.realtime_period):
            raise ConfigError(
                "real-time CPU limits are not supported on cgroup v2", f"{_R}.cpu.realtimeRuntime"
            )
    if res.hugepage_limits:
        sizes = hugepage_sizes()
        for i, h in enumerate(res.hugepage_limits):
            if h.page_size not in sizes:
                raise ConfigError(
                    f"huge page size {h.page_size!r} is not supported by this host"
                    f" (it has {', '.join(sizes) or 'none'})",
                    f"{_R}.hugepageLimits[{i}].pageSize",
                )
    if res.unified:
        from hostjob.spec.resources import check_unified

        check_unified(res.unified)
        if version == 1:
            raise ConfigError(
                "cgroup v2 files cannot be set on this cgroup v1 host", f"{_R}.unified"
            )


def requirements(res: Resources, version: int) -> list[tuple[str, str]]:
    """(controller, field) for every set field; ``io`` is ``blkio`` on v1."""
    need: list[tuple[str, str]] = []
    m = res.memory
    if m is not None:
        fields: list[tuple[object, str]] = [
            (m.limit, "limit"),
            (m.reservation, "reservation"),
            (m.swap, "swap"),
        ]
        if version == 1:
            fields += [
                (m.kernel_tcp, "kernelTCP"),
                (m.disable_oom_killer, "disableOOMKiller"),
                (None if m.swappiness is None else 1, "swappiness"),
            ]
        for value, name in fields:
            if value:
                need.append(("memory", f"{_R}.memory.{name}"))
    c = res.cpu
    if c is not None:
        for value, name in (
            (c.shares, "shares"),
            (c.quota, "quota"),
            (c.period, "period"),
            (c.burst, "burst"),
            (c.realtime_runtime, "realtimeRuntime"),
            (c.realtime_period, "realtimePeriod"),
            (None if c.idle is None else 1, "idle"),
        ):
            if value:
                need.append(("cpu", f"{_R}.cpu.{name}"))
        if c.cpus:
            need.append(("cpuset", f"{_R}.cpu.cpus"))
        if c.mems:
            need.append(("cpuset", f"{_R}.cpu.mems"))
    if res.pids is not None and (res.pids.limit or 0) > 0:
        need.append(("pids", f"{_R}.pids.limit"))
    b = res.block_io
    if b is not None:
        io = "blkio" if version == 1 else "io"
        for value, name in (
            (b.weight, "weight"),
            (b.leaf_weight if version == 1 else None, "leafWeight"),
            (b.weight_device, "weightDevice"),
            (b.throttle_read_bps_device, "throttleReadBpsDevice"),
            (b.throttle_write_bps_device, "throttleWriteBpsDevice"),
            (b.throttle_read_iops_device, "throttleReadIOPSDevice"),
            (b.throttle_write_iops_device, "throttleWriteIOPSDevice"),
        ):
            if value:
                need.append((io, f"{_R}.blockIO.{name}"))
    if res.hugepage_limits:
        need.append(("hugetlb", f"{_R}.hugepageLimits"))
    if res.unified and version == 2:
        # Each file's controller must be enabled in the job's cgroup.
        for key in res.unified:
            need.append((key.partition(".")[0], f"{_R}.unified.{key}"))
    return need


def ignored(res: Resources, version: int) -> list[str]:
    """One warning line for each set field that has no effect on this host."""
    out: list[str] = []
    m = res.memory
    if m is not None:
        if m.kernel:
            out.append(
                f"{_R}.memory.kernel is ignored: kernel memory limits are deprecated"
                " and refused by current kernels"
            )
        if version == 2:
            if m.kernel_tcp:
                out.append(f"{_R}.memory.kernelTCP is ignored: cgroup v2 has no TCP limit")
            if m.swappiness is not None:
                out.append(f"{_R}.memory.swappiness is ignored: cgroup v2 has no swappiness")
            if m.disable_oom_killer:
                out.append(
                    f"{_R}.memory.disableOOMKiller is ignored: cgroup v2 cannot disable"
                    " the OOM killer"
                )
    b = res.block_io
    if (
        b is not None
        and version == 2
        and (b.leaf_weight or any(w.leaf_weight for w in b.weight_device or ()))
    ):
        out.append(f"{_R}.blockIO leaf weights are ignored: cgroup v2 has none")
    if res.network is not None and (res.network.class_id or res.network.priorities):
        out.append(f"{_R}.network is ignored: job containers share the host's network")
    if res.rdma:
        out.append(f"{_R}.rdma is ignored: hostjob does not manage the rdma controller")
    return out
