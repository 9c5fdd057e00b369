"""What the image commands print: sizes, ages, tables, JSON.

Imported by the commands that read the store (``images``, ``inspect``, ``rmi``,
``prune``), never by a runtime command: ``tests/unit/test_imports.py`` pins that.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from hostjob.boot import jsonio
from hostjob.errors import one_line
from hostjob.units import human_size, parse_rfc3339

if TYPE_CHECKING:
    from collections.abc import Sequence

    from hostjob.images.gc import Freed
    from hostjob.images.resolve import ImageDetails, ImageSummary


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
    """Columns padded to their widest cell, three spaces apart (as ``hostjob list``).
    Every cell is escaped as an error line is (``errors.one_line``): what an image or
    a registry put in it can neither drive the terminal nor start a row of its own."""
    if not rows:
        return ""
    rows = [[one_line(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def to_json(value: Any) -> str:
    """Two-space indented JSON."""
    return jsonio.dumps(value, 2)


def freed(result: Freed) -> str:
    """``freed 12.3 MB (3 blobs, 2 layers)`` for a prune/rmi result."""
    blobs, layers = result.blobs, result.layers
    return (
        f"freed {human_size(result.bytes)}"
        f" ({blobs} blob{'s' if blobs != 1 else ''}, {layers} layer{'s' if layers != 1 else ''})"
    )


def verified(record: dict[str, Any] | None) -> str:
    """The VERIFIED cell of ``images``: what vouched for the image when it came in
    (``signedBy`` and a GPG key's long ID, ``sigstoreSigned`` and the start of a key's
    fingerprint); ``no`` when the policy let it in unverified, ``no policy`` when
    there was none, ``-`` when it came in before hostjob asked."""
    if record is None:
        return "-"
    if record.get("policy") is None:
        return "no policy"
    parts = []
    for by in record.get("by") or []:
        if type(by) is not dict:
            continue
        key = str(by.get("key", ""))
        short = key[-16:] if by.get("requirement") == "signedBy" else key[:19]
        parts.append(f"{by.get('requirement', '?')} {short}")
    return ", ".join(parts) or "no"


def summary_json(row: ImageSummary) -> dict[str, Any]:
    """One image name as ``images --format json`` prints it (sizes in bytes)."""
    out: dict[str, Any] = {"name": row.name, "digest": row.digest, "tagged": row.tagged}
    out["verified"] = row.verified
    if row.error is not None:
        out["error"] = row.error
        return out
    out.update(
        id=row.id, created=row.created, platform=row.platform, size=row.size, layers=row.layers
    )
    return out


def details_json(image: ImageDetails) -> dict[str, Any]:
    """Everything about one image as ``inspect`` prints it."""
    return {
        "names": image.names,
        "id": image.id,
        "digest": image.digest,
        "index": image.index,
        "platform": image.platform,
        "created": image.created,
        "size": image.size,
        "verified": image.verified,
        "manifest": image.manifest.to_json(),
        "config": image.config.to_json(),
        "layers": [
            {
                "digest": layer.digest,
                "mediaType": layer.media_type,
                "size": layer.size,
                "diffID": layer.diff_id,
                "path": layer.path,
            }
            for layer in image.layers
        ],
    }
