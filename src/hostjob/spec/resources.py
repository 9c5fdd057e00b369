"""The runtime-spec's cgroup resources (``linux.resources`` of config.json, and what
``update`` takes): one wire model per table, field names runtime-spec's own.

Nothing here applies them: ``hostjob.cgroups`` turns a ``Resources`` into cgroup files.
``check_unified`` is the one check of the wire shape the models cannot state (which
keys ``unified`` may name).
"""

from __future__ import annotations

from hostjob.errors import ConfigError
from hostjob.spec._decode import (
    Model,
    boolean,
    int64,
    json_object,
    list_of,
    model,
    string,
    string_map,
    uint16,
    uint32,
    uint64,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class DeviceCgroup(Model):
    __slots__ = ("access", "allow", "major", "minor", "type")
    allow: bool | None
    type: str | None
    major: int | None
    minor: int | None
    access: str | None
    FIELDS = (
        ("allow", "allow", boolean),
        ("type", "type", string),
        ("major", "major", int64),
        ("minor", "minor", int64),
        ("access", "access", string),
    )


class Memory(Model):
    __slots__ = (
        "check_before_update",
        "disable_oom_killer",
        "kernel",
        "kernel_tcp",
        "limit",
        "reservation",
        "swap",
        "swappiness",
        "use_hierarchy",
    )
    limit: int | None
    reservation: int | None
    swap: int | None
    kernel: int | None
    kernel_tcp: int | None
    swappiness: int | None
    disable_oom_killer: bool | None
    use_hierarchy: bool | None
    check_before_update: bool | None
    FIELDS = (
        ("limit", "limit", int64),
        ("reservation", "reservation", int64),
        ("swap", "swap", int64),
        ("kernel", "kernel", int64),
        ("kernelTCP", "kernel_tcp", int64),
        ("swappiness", "swappiness", uint64),
        ("disableOOMKiller", "disable_oom_killer", boolean),
        ("useHierarchy", "use_hierarchy", boolean),
        ("checkBeforeUpdate", "check_before_update", boolean),
    )


class CPU(Model):
    __slots__ = (
        "burst",
        "cpus",
        "idle",
        "mems",
        "period",
        "quota",
        "realtime_period",
        "realtime_runtime",
        "shares",
    )
    shares: int | None
    quota: int | None
    burst: int | None
    period: int | None
    realtime_runtime: int | None
    realtime_period: int | None
    cpus: str | None
    mems: str | None
    idle: int | None
    FIELDS = (
        ("shares", "shares", uint64),
        ("quota", "quota", int64),
        ("burst", "burst", uint64),
        ("period", "period", uint64),
        ("realtimeRuntime", "realtime_runtime", int64),
        ("realtimePeriod", "realtime_period", uint64),
        ("cpus", "cpus", string),
        ("mems", "mems", string),
        ("idle", "idle", int64),
    )


class Pids(Model):
    __slots__ = ("limit",)
    limit: int | None
    FIELDS = (("limit", "limit", int64),)


class WeightDevice(Model):
    __slots__ = ("leaf_weight", "major", "minor", "weight")
    major: int | None
    minor: int | None
    weight: int | None
    leaf_weight: int | None
    FIELDS = (
        ("major", "major", int64),
        ("minor", "minor", int64),
        ("weight", "weight", uint16),
        ("leafWeight", "leaf_weight", uint16),
    )


class ThrottleDevice(Model):
    __slots__ = ("major", "minor", "rate")
    major: int | None
    minor: int | None
    rate: int | None
    FIELDS = (("major", "major", int64), ("minor", "minor", int64), ("rate", "rate", uint64))


class BlockIO(Model):
    __slots__ = (
        "leaf_weight",
        "throttle_read_bps_device",
        "throttle_read_iops_device",
        "throttle_write_bps_device",
        "throttle_write_iops_device",
        "weight",
        "weight_device",
    )
    weight: int | None
    leaf_weight: int | None
    weight_device: list[WeightDevice] | None
    throttle_read_bps_device: list[ThrottleDevice] | None
    throttle_write_bps_device: list[ThrottleDevice] | None
    throttle_read_iops_device: list[ThrottleDevice] | None
    throttle_write_iops_device: list[ThrottleDevice] | None
    FIELDS = (
        ("weight", "weight", uint16),
        ("leafWeight", "leaf_weight", uint16),
        ("weightDevice", "weight_device", list_of(model(WeightDevice))),
        ("throttleReadBpsDevice", "throttle_read_bps_device", list_of(model(ThrottleDevice))),
        ("throttleWriteBpsDevice", "throttle_write_bps_device", list_of(model(ThrottleDevice))),
        ("throttleReadIOPSDevice", "throttle_read_iops_device", list_of(model(ThrottleDevice))),
        (
            "throttleWriteIOPSDevice",
            "throttle_write_iops_device",
            list_of(model(ThrottleDevice)),
        ),
    )


class HugepageLimit(Model):
    __slots__ = ("limit", "page_size")
    page_size: str | None
    limit: int | None
    FIELDS = (("pageSize", "page_size", string), ("limit", "limit", uint64))


class InterfacePriority(Model):
    __slots__ = ("name", "priority")
    name: str | None
    priority: int | None
    FIELDS = (("name", "name", string), ("priority", "priority", uint32))


class Network(Model):
    __slots__ = ("class_id", "priorities")
    class_id: int | None
    priorities: list[InterfacePriority] | None
    FIELDS = (
        ("classID", "class_id", uint32),
        ("priorities", "priorities", list_of(model(InterfacePriority))),
    )


class Resources(Model):
    __slots__ = (
        "block_io",
        "cpu",
        "devices",
        "hugepage_limits",
        "memory",
        "network",
        "pids",
        "rdma",
        "unified",
    )
    devices: list[DeviceCgroup] | None
    memory: Memory | None
    cpu: CPU | None
    pids: Pids | None
    block_io: BlockIO | None
    hugepage_limits: list[HugepageLimit] | None
    network: Network | None
    rdma: dict[str, Any] | None
    unified: dict[str, str] | None
    FIELDS = (
        ("devices", "devices", list_of(model(DeviceCgroup))),
        ("memory", "memory", model(Memory)),
        ("cpu", "cpu", model(CPU)),
        ("pids", "pids", model(Pids)),
        ("blockIO", "block_io", model(BlockIO)),
        ("hugepageLimits", "hugepage_limits", list_of(model(HugepageLimit))),
        ("network", "network", model(Network)),
        ("rdma", "rdma", json_object),
        ("unified", "unified", string_map),
    )


_CONTROLLER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def check_unified(unified: dict[str, str]) -> None:
    """``linux.resources.unified`` names controller files only (``memory.high``): never
    ``cgroup.*``, the cgroup's own interface (``cgroup.procs`` would pull any process
    into the job, ``cgroup.subtree_control`` reshape it), and never a path."""
    for key in unified:
        controller, dot, parameter = key.partition(".")
        if (
            not dot
            or not parameter
            or not controller
            or not _CONTROLLER_CHARS.issuperset(controller)
            or "/" in parameter
            or ".." in parameter
            or "\0" in parameter
        ):
            raise ConfigError(
                f"{key!r} is not a cgroup file name (CONTROLLER.PARAMETER)",
                "linux.resources.unified",
            )
        if controller == "cgroup":
            raise ConfigError(
                f"{key!r} is a cgroup core file, not a controller setting: unified takes"
                " controller files only",
                "linux.resources.unified",
            )
