"""What the image commands share: the ``--store`` option, sizes, ages, tables, JSON.

Imported by the image commands only (``pull``, ``images``, ``rmi``, ``prune``,
``import``, ``inspect``, ``pack``), never by a runtime command:
``tests/unit/test_imports.py`` pins that.
"""

from __future__ import annotations

import time

from hostjob import jsonio
from hostjob.cli.args import VALUE, Option
from hostjob.units import human_size, parse_rfc3339

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from hostjob.cli.args import Args
    from hostjob.images.store import Store

STORE_OPTION = Option(
    "store",
    VALUE,
    "image store directory (default $HOSTJOB_STORE, else /var/lib/hostjob)",
    metavar="dir",
)


def open_store(args: Args) -> Store:
    """The store ``--store`` names (else ``$HOSTJOB_STORE``, else ``/var/lib/hostjob``)."""
    from hostjob.images.store import Store

    return Store(args.store or None)


def short_id(digest: str | None) -> str:
    """The first 12 hex digits of a digest (docker's short image ID)."""
    if not digest:
        return "-"
    return digest.partition(":")[2][:12] or digest[:12]


def ago(created: str | None, now: float | None = None) -> str:
    """``3 days ago`` for an RFC 3339 time; ``-`` when there is none."""
    when = parse_rfc3339(created)
    if when is None:
        return "-"
    delta = (time.time() if now is None else now) - when
    if delta < 0:
        return "in the future"
    if delta < 60:
        return "seconds ago"
    for size, unit in (
        (365 * 86400, "year"),
        (30 * 86400, "month"),
        (7 * 86400, "week"),
        (86400, "day"),
        (3600, "hour"),
        (60, "minute"),
    ):
        if delta >= size:
            count = int(delta // size)
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "seconds ago"


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, three spaces apart (as ``hostjob list``)."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def to_json(value: Any) -> str:
    """Two-space indented JSON."""
    return jsonio.dumps(value, 2)


def freed(result: dict[str, Any]) -> str:
    """``freed 12.3 MB (3 blobs, 2 layers)`` for a prune/rmi result."""
    blobs, layers = result.get("blobs", 0), result.get("layers", 0)
    return (
        f"freed {human_size(result.get('bytes', 0))}"
        f" ({blobs} blob{'s' if blobs != 1 else ''}, {layers} layer{'s' if layers != 1 else ''})"
    )
