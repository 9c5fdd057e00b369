"""The pids controller: ``pids.max`` (a limit <= 0 means no limit); current and limit stats.
The same files on cgroup v1 and v2, so one module serves both managers."""

from __future__ import annotations

from hostjob.cgroups._fs import MAX_U64, Dir, parse_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.spec.resources import Pids


def apply(d: Dir, p: Pids) -> None:
    if p.limit is not None:
        d.write("pids.max", str(p.limit) if p.limit > 0 else "max")


def stats(d: Dir, out: dict[str, Any]) -> None:
    current = d.read_optional("pids.current")
    if current is None:
        return
    pids = out["pids"]
    pids["current"] = parse_int(current, "pids.current")
    limit = parse_int(d.read_optional("pids.max") or "max", "pids.max")
    pids["limit"] = 0 if limit == MAX_U64 else limit  # runc: no limit reads as 0
