"""cgroup v1 blkio: CFQ or BFQ weights, throttling; stats from the richest files present."""

from __future__ import annotations

from hostjob.cgroups._fs import Dir
from hostjob.cgroups.stats import blkio_entry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import BlockIO


def apply(d: Dir, b: BlockIO) -> None:
    # CFQ's files (blkio.weight) are gone since 5.0; BFQ has its own.
    weight = "blkio.weight" if d.has("blkio.weight") else "blkio.bfq.weight"
    if b.weight:
        d.write(weight, str(b.weight))
    if b.leaf_weight:
        d.write("blkio.leaf_weight", str(b.leaf_weight))
    for wd in b.weight_device or ():
        device = f"{wd.major or 0}:{wd.minor or 0}"
        if wd.weight:
            d.write(weight + "_device", f"{device} {wd.weight}")
        if wd.leaf_weight:
            d.write("blkio.leaf_weight_device", f"{device} {wd.leaf_weight}")
    for devices, name in (
        (b.throttle_read_bps_device, "blkio.throttle.read_bps_device"),
        (b.throttle_write_bps_device, "blkio.throttle.write_bps_device"),
        (b.throttle_read_iops_device, "blkio.throttle.read_iops_device"),
        (b.throttle_write_iops_device, "blkio.throttle.write_iops_device"),
    ):
        for t in devices or ():
            d.write(name, f"{t.major or 0}:{t.minor or 0} {t.rate or 0}")


# (stats key, file) groups in runc's order of preference: the first group whose
# first file exists is used.
_GROUPS = (
    (
        ("ioServiceBytesRecursive", "blkio.bfq.io_service_bytes_recursive"),
        ("ioServicedRecursive", "blkio.bfq.io_serviced_recursive"),
        ("ioQueueRecursive", "blkio.bfq.io_queued_recursive"),
        ("ioServiceTimeRecursive", "blkio.bfq.io_service_time_recursive"),
        ("ioWaitTimeRecursive", "blkio.bfq.io_wait_time_recursive"),
        ("ioMergedRecursive", "blkio.bfq.io_merged_recursive"),
        ("ioTimeRecursive", "blkio.bfq.time_recursive"),
        ("sectorsRecursive", "blkio.bfq.sectors_recursive"),
    ),
    (
        ("ioServiceBytesRecursive", "blkio.io_service_bytes_recursive"),
        ("ioServicedRecursive", "blkio.io_serviced_recursive"),
        ("ioQueueRecursive", "blkio.io_queued_recursive"),
        ("ioServiceTimeRecursive", "blkio.io_service_time_recursive"),
        ("ioWaitTimeRecursive", "blkio.io_wait_time_recursive"),
        ("ioMergedRecursive", "blkio.io_merged_recursive"),
        ("ioTimeRecursive", "blkio.time_recursive"),
        ("sectorsRecursive", "blkio.sectors_recursive"),
    ),
    (
        ("ioServiceBytesRecursive", "blkio.throttle.io_service_bytes_recursive"),
        ("ioServicedRecursive", "blkio.throttle.io_serviced_recursive"),
    ),
    (
        ("ioServiceBytesRecursive", "blkio.throttle.io_service_bytes"),
        ("ioServicedRecursive", "blkio.throttle.io_serviced"),
    ),
)


def parse(text: str) -> list[dict[str, Any]]:
    """``8:0 Read 1024`` / ``8:0 1024`` lines; the ``Total`` lines are dropped."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[0] == "Total":
            continue
        major, _, minor = fields[0].partition(":")
        if not (major.isdigit() and minor.isdigit()):
            continue
        op = fields[1] if len(fields) == 3 else ""
        value = fields[-1]
        if op == "Total" or not value.isdigit():
            continue
        out.append(blkio_entry(int(major), int(minor), op, int(value)))
    return out


def stats(d: Dir, out: dict[str, Any]) -> None:
    blkio = out["blkio"]
    for group in _GROUPS:
        first = d.read_optional(group[0][1])
        if first is None:
            continue
        blkio[group[0][0]] = parse(first)
        for key, name in group[1:]:
            blkio[key] = parse(d.read_optional(name) or "")
        return
