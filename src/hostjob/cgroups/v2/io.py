"""cgroup v2 io: weights (``io.bfq.weight`` or converted ``io.weight``), ``io.max``; io.stat."""

from __future__ import annotations

import errno

from hostjob.cgroups import resources as _res
from hostjob.cgroups._fs import Dir
from hostjob.cgroups.stats import blkio_entry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import BlockIO, ThrottleDevice, WeightDevice


def _weight(d: Dir, prefix: str, weight: int) -> None:
    # BFQ takes blkio's own scale; without BFQ, io.weight takes the converted one.
    value = f"{prefix}{weight}"
    code = d.try_write("io.bfq.weight", value)
    if code == errno.ENOENT:
        d.write("io.weight", f"{prefix}{_res.blkio_weight_to_io_weight(weight)}")
    elif code:
        d.write("io.bfq.weight", value)


def _device(t: ThrottleDevice | WeightDevice) -> str:
    return f"{t.major or 0}:{t.minor or 0}"


def apply(d: Dir, b: BlockIO) -> None:
    if b.weight:
        _weight(d, "", b.weight)
    for wd in b.weight_device or ():
        if wd.weight:
            _weight(d, _device(wd) + " ", wd.weight)
    for devices, key in (
        (b.throttle_read_bps_device, "rbps"),
        (b.throttle_write_bps_device, "wbps"),
        (b.throttle_read_iops_device, "riops"),
        (b.throttle_write_iops_device, "wiops"),
    ):
        for t in devices or ():
            # Rate 0 lifts the limit on v1; "max" is how v2 says it.
            d.write("io.max", f"{_device(t)} {key}={t.rate or 'max'}")


_OPS = {
    "rbytes": ("ioServiceBytesRecursive", "Read"),
    "wbytes": ("ioServiceBytesRecursive", "Write"),
    "rios": ("ioServicedRecursive", "Read"),
    "wios": ("ioServicedRecursive", "Write"),
}


def stats(d: Dir, out: dict[str, Any]) -> None:
    text = d.read_optional("io.stat")
    if not text:
        return
    blkio = out["blkio"]
    for line in sorted(text.splitlines()):
        device, *items = line.split()
        major, _, minor = device.partition(":")
        if not (major.isdigit() and minor.isdigit()):
            continue
        for item in items:
            key, _, value = item.partition("=")
            table = _OPS.get(key)
            if table is not None and value.isdigit():
                blkio[table[0]].append(blkio_entry(int(major), int(minor), table[1], int(value)))
