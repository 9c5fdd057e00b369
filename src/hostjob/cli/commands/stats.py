"""``hostjob stats``: what an operator of host daemons wants to see about their jobs.

Without IDs, every running container; on a terminal a live table, refreshed every
``--interval`` (1 s), until Ctrl-C; ``--no-stream``, ``--format json`` or output
that is not a terminal print once. ``--json ID`` is one container's object (the
form before the table had rows)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from hostjob.boot import jsonio
from hostjob.cli.args import FLAG, VALUE, Command, Option
from hostjob.errors import ContainerNotFound, ContainerNotRunning, InvalidArgument, one_line
from hostjob.runtime.container import Container
from hostjob.runtime.status import Status
from hostjob.runtime.verbs.events import Sample, summaries, summarize, summary
from hostjob.units import human_size, parse_duration

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "stats",
    "Show jobs' CPU %, memory (and peak), processes, IO, OOM kills and uptime: every"
    " running container, or the ones named.",
    options=(
        Option("format", VALUE, "table or json (an array)", default="table"),
        Option("no-stream", FLAG, "print once, also on a terminal"),
        Option("json", FLAG, "one container's figures as a JSON object"),
        Option(
            "interval", VALUE, "CPU sampling time and refresh period (default 1s)", default="1s"
        ),
    ),
    rest="container_ids",
)
COLUMNS = (
    "CONTAINER", "STATUS", "CPU %", "CPU TIME", "MEMORY / LIMIT", "MEMORY PEAK", "PIDS",
    "IO READ / WRITE", "OOM KILLS", "UPTIME",
)  # fmt: skip
_CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


def _binary(size: int | None) -> str:
    return human_size(size, binary=True)  # memory and I/O: powers of 1024, as docker stats


def uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours}h{minutes}m"
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def row(info: dict[str, Any]) -> tuple[str, ...]:
    memory, pids, io = info["memory"], info["pids"], info["io"]
    limit = _binary(memory["limit"]) if memory["limit"] is not None else "no limit"
    pids_limit = str(pids["limit"]) if pids["limit"] is not None else "no limit"
    cpu = info["cpuPercent"]
    return (
        info["id"],
        info["status"],
        f"{cpu:.1f}%" if cpu is not None else "-",
        f"{info['cpuSeconds']:.2f}s",
        f"{_binary(memory['usage'])} / {limit}",
        _binary(memory["peak"]),
        f"{pids['current']} / {pids_limit}",
        f"{_binary(io['read'])} / {_binary(io['write'])}",
        str(info["oomKills"]),
        uptime(info["uptimeSeconds"]),
    )


def table(infos: list[dict[str, Any]]) -> str:
    # Escaped as an error line is, every cell: none may drive the terminal.
    rows = [COLUMNS, *(tuple(map(one_line, row(info))) for info in infos)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip()
        for r in rows
    )


def _containers(ids: list[str], root: str) -> list[Container]:
    if ids:
        return [Container.load(container_id, root=root) for container_id in ids]
    return [
        c
        for c in Container.load_all(root=root)
        if c.record is not None and c.status() in (Status.RUNNING, Status.PAUSED)
    ]


def run(args: Args, ctx: Context) -> int:
    if args.format not in ("table", "json"):
        raise InvalidArgument(f"invalid format option: {args.format}")
    interval = parse_duration(args.interval)
    ids: list[str] = args.container_ids
    if args.json:
        if len(ids) != 1:
            raise InvalidArgument("--json shows one container; for several: --format json")
        print(jsonio.dumps(summary(Container.load(ids[0], root=ctx.root), interval), 2))
        return 0
    containers = _containers(ids, ctx.root)
    for container in containers if ids else ():  # one named is stopped: say so
        if container.status() == Status.STOPPED and not container.cgroup().exists():
            raise ContainerNotRunning(container.id)
    if args.format == "json" or args.no_stream or not sys.stdout.isatty():
        infos = summaries(containers, interval)
        print(jsonio.dumps(infos, 2) if args.format == "json" else table(infos))
        return 0
    _live(ids, ctx.root, max(interval, 0.1))
    return 0


def _live(ids: list[str], root: str, interval: float) -> None:
    """The live table: each frame's CPU % is measured since the last frame."""
    previous: dict[str, Sample] = {}
    try:
        while True:
            infos = []
            current: dict[str, Sample] = {}
            for container in _containers(ids, root):
                try:
                    sample = Sample(container)
                except (ContainerNotRunning, ContainerNotFound):
                    continue
                current[container.id] = sample
                infos.append(summarize(container, previous.get(container.id), sample))
            previous = current
            sys.stdout.write(_CLEAR + table(infos) + "\n")
            sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return
