"""``hostjob logs``: a detached image container's output, from its log."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hostjob.cli.args import FLAG, VALUE, Command, Option
from hostjob.errors import InvalidArgument
from hostjob.runtime.container import Container
from hostjob.supervisor import logs
from hostjob.supervisor.crilog import STDERR
from hostjob.supervisor.logreader import Query

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "logs",
    "Print a `run -d IMAGE` container's output (its stdout to stdout, its stderr to stderr).",
    options=(
        Option("follow,f", FLAG, "keep printing what it writes, until it stops for good"),
        Option("tail", VALUE, "only the last N lines (default: all)"),
        Option("since", VALUE, "from then on: 10m ago, an RFC 3339 time or Unix seconds"),
        Option("timestamps,t", FLAG, "start each line with the time it was written"),
    ),
    positionals=("container_id",),
)


def run(args: Args, ctx: Context) -> int:
    from hostjob.units import parse_since

    tail = None
    if args.tail is not None and args.tail != "all":
        if not args.tail.isascii() or not args.tail.isdigit():
            raise InvalidArgument(f"--tail {args.tail!r}: a number of lines, or all")
        tail = int(args.tail)
    since = parse_since(args.since) if args.since else None
    container = Container.load(args.container_id, root=ctx.root)
    query = Query(tail=tail, since=since, timestamps=args.timestamps)
    for runs in logs.read(container, query, follow=args.follow):
        for stream, data in runs:
            _write_all(2 if stream is STDERR else 1, data)
    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
