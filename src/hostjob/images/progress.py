"""Typed progress events, and the renderers the CLI uses for them.

The library emits events through a ``progress`` callback (any callable taking one
``Event``); it never prints. ``renderer(quiet=..., stream=...)`` picks rich progress
bars on a terminal (rich is imported only then), one plain line per step elsewhere,
or nothing.
"""

from __future__ import annotations

import _thread
import sys
import time

from hostjob.errors import one_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

    Progress = Callable[["Event"], None]

# Event kinds, in the order a pull goes through them.
RESOLVING = "resolving"  # finding the manifest for a reference (item: the reference)
RESOLVED = "resolved"  # the manifest digest is known (item: manifest digest)
DOWNLOADING = "downloading"  # blob bytes arrive (current/total bytes, speed)
VERIFYING = "verifying"  # blob fully read, digest being checked
UNPACKING = "unpacking"  # layer being unpacked (current/total compressed bytes read)
CACHED = "cached"  # blob or layer already in the store
UPLOADING = "uploading"  # a push: blob bytes leave (current/total bytes, speed)
EXISTS = "exists"  # a push: the registry has the blob already
DONE = "done"  # an item finished (item: layer digest, or the image name at the end)
KINDS = (RESOLVING, RESOLVED, DOWNLOADING, VERIFYING, UNPACKING, CACHED, UPLOADING, EXISTS, DONE)
METERED = (DOWNLOADING, UNPACKING, UPLOADING)  # kinds that come again and again


class Event:
    """One step of one item (an image or a layer blob)."""

    __slots__ = ("current", "item", "kind", "message", "speed", "total")

    def __init__(
        self,
        kind: str,
        item: str,
        current: int = 0,
        total: int | None = None,
        speed: float | None = None,
        message: str = "",
    ) -> None:
        self.kind = kind
        self.item = item
        self.current = current
        self.total = total
        self.speed = speed
        self.message = message

    def __repr__(self) -> str:
        return f"Event({self.kind!r}, {self.item!r}, {self.current}/{self.total})"

    def to_json(self) -> dict[str, Any]:
        return {s: getattr(self, s) for s in self.__slots__}


class Meter:
    """Emits throttled DOWNLOADING/UNPACKING/UPLOADING events for one item, with a speed."""

    __slots__ = ("emit", "item", "kind", "last", "start", "total")

    def __init__(self, emit: Progress, kind: str, item: str, total: int | None) -> None:
        self.emit = emit
        self.kind = kind
        self.item = item
        self.total = total
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, current: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.1 and current != self.total:
            return
        self.last = now
        elapsed = now - self.start
        speed = current / elapsed if elapsed > 0 else None
        self.emit(Event(self.kind, self.item, current, self.total, speed))


def short(item: str) -> str:
    """``sha256:0123456789ab`` for a digest; anything else as it is."""
    algorithm, sep, rest = item.partition(":")
    if sep and algorithm in ("sha256", "sha512") and len(rest) > 12:
        return rest[:12]
    return item


def _is_digest(item: str) -> bool:
    return short(item) != item


def _human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class PlainRenderer:
    """One line per step (``downloading`` only when it starts), for logs and pipes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.seen: set[tuple[str, str]] = set()
        self.lock = _thread.allocate_lock()  # threading.Lock, without importing threading

    def __call__(self, event: Event) -> None:
        key = (event.kind, event.item)
        if event.kind in METERED and key in self.seen:
            return
        with self.lock:
            self.seen.add(key)
            text = f"{event.kind} {one_line(short(event.item))}"
            if event.kind in METERED and event.total:
                text += f" ({_human(event.total)})"
            if event.message:
                text += f": {one_line(event.message)}"
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        pass


class RichRenderer:
    """Per-layer progress bars on a terminal."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TransferSpeedColumn,
        )

        self.progress = Progress(
            TextColumn("{task.fields[item]:>12}"),
            TextColumn("{task.description:<11}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=Console(file=stream),
            transient=False,
        )
        self.tasks: dict[str, Any] = {}
        self.lock = _thread.allocate_lock()  # threading.Lock, without importing threading
        self.progress.start()

    def __call__(self, event: Event) -> None:
        with self.lock:
            if event.kind in (RESOLVING, RESOLVED) or (
                event.kind == DONE and not _is_digest(event.item)
            ):
                self.progress.console.print(
                    f"{event.kind} {one_line(short(event.item))}", markup=False, highlight=False
                )
                return
            task = self.tasks.get(event.item)
            if task is None:
                item = one_line(short(event.item)).replace("[", "\\[")  # no rich markup
                task = self.progress.add_task(event.kind, item=item, total=event.total)
                self.tasks[event.item] = task
            completed = event.current
            if event.kind in (CACHED, EXISTS, DONE) and event.total is not None:
                completed = event.total
            self.progress.update(
                task,
                description=event.kind,
                completed=completed,
                total=event.total if event.total is not None else None,
            )

    def close(self) -> None:
        self.progress.stop()


def renderer(quiet: bool = False, stream: TextIO | None = None) -> Callable[[Event], None]:
    """The progress callback for the CLI: rich bars on a tty, plain lines otherwise."""
    out = stream if stream is not None else sys.stderr
    if quiet:
        return _quiet
    if out.isatty():
        try:
            return RichRenderer(out)
        except ImportError:
            pass
    return PlainRenderer(out)


def _quiet(event: Event) -> None:
    pass


def close(render: Callable[[Event], None]) -> None:
    """Stop a renderer made by ``renderer()`` (rich needs its live display stopped)."""
    stop = getattr(render, "close", None)
    if stop is not None:
        stop()
