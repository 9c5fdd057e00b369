"""cgroup v2 hugetlb: ``hugetlb.<size>.max`` (and ``.rsvd.max``); usage and failures."""

from __future__ import annotations

import errno

from hostjob.cgroups import resources as _res
from hostjob.cgroups._fs import Dir, keyed_value, parse_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import HugepageLimit


def apply(d: Dir, limits: list[HugepageLimit]) -> None:
    for h in limits:
        value = str(h.limit or 0)
        d.write(f"hugetlb.{h.page_size}.max", value)
        # Reservations count too (kernel 5.7+), as runc sets them.
        code = d.try_write(f"hugetlb.{h.page_size}.rsvd.max", value)
        if code and code != errno.ENOENT:
            d.write(f"hugetlb.{h.page_size}.rsvd.max", value)


def stats(d: Dir, out: dict[str, Any]) -> None:
    for size in _res.hugepage_sizes():
        current = d.read_optional(f"hugetlb.{size}.current")
        if current is None:
            continue
        out["hugetlb"][size] = {
            "usage": parse_int(current, f"hugetlb.{size}.current"),
            "max": 0,  # v2 keeps no peak
            "failcnt": keyed_value(d.read_optional(f"hugetlb.{size}.events"), "max"),
        }
