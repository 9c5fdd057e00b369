"""cgroup v1 hugetlb: ``hugetlb.<size>.limit_in_bytes`` (and reservations); usage stats."""

from __future__ import annotations

import errno

from hostjob.cgroups import resources as _res
from hostjob.cgroups._fs import Dir, parse_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import HugepageLimit


def apply(d: Dir, limits: list[HugepageLimit]) -> None:
    for h in limits:
        value = str(h.limit or 0)
        d.write(f"hugetlb.{h.page_size}.limit_in_bytes", value)
        code = d.try_write(f"hugetlb.{h.page_size}.rsvd.limit_in_bytes", value)
        if code and code != errno.ENOENT:
            d.write(f"hugetlb.{h.page_size}.rsvd.limit_in_bytes", value)


def stats(d: Dir, out: dict[str, Any]) -> None:
    for size in _res.hugepage_sizes():
        usage = d.read_optional(f"hugetlb.{size}.usage_in_bytes")
        if usage is None:
            continue
        out["hugetlb"][size] = {
            "usage": parse_int(usage, f"hugetlb.{size}.usage_in_bytes"),
            "max": d.read_int(f"hugetlb.{size}.max_usage_in_bytes"),
            "failcnt": d.read_int(f"hugetlb.{size}.failcnt"),
        }
