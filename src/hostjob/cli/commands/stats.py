"""``hostjob stats``: what an operator of a host daemon wants to see about its job."""

from __future__ import annotations

from hostjob import jsonio
from hostjob.cli.args import FLAG, VALUE, Command, Option
from hostjob.runtime.container import Container
from hostjob.runtime.events import summary
from hostjob.units import human_size, parse_duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "stats",
    "Show the job's CPU %, memory (and peak), processes, IO, OOM kills and uptime.",
    options=(
        Option("json", FLAG, "print JSON instead of the table"),
        Option("interval", VALUE, "CPU sampling time (default 1s)", default="1s"),
    ),
    positionals=("container_id",),
)


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


def table(info: dict[str, Any]) -> str:
    memory, pids, io = info["memory"], info["pids"], info["io"]
    limit = f" / {_binary(memory['limit'])}" if memory["limit"] is not None else " / no limit"
    pids_limit = f" / {pids['limit']}" if pids["limit"] is not None else " / no limit"
    rows = [
        ("CONTAINER", info["id"]),
        ("STATUS", info["status"]),
        ("CPU %", f"{info['cpuPercent']:.1f}%" if info["cpuPercent"] is not None else "-"),
        ("CPU TIME", f"{info['cpuSeconds']:.2f}s"),
        ("MEMORY", _binary(memory["usage"]) + limit),
        ("MEMORY PEAK", _binary(memory["peak"])),
        ("PIDS", f"{pids['current']}{pids_limit}"),
        (
            "IO READ / WRITE",
            f"{_binary(io['read'])} / {_binary(io['write'])}",
        ),
        ("OOM KILLS", str(info["oomKills"])),
        ("UPTIME", uptime(info["uptimeSeconds"])),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def run(args: Args, ctx: Context) -> int:
    container = Container.load(args.container_id, root=ctx.root)
    info = summary(container, parse_duration(args.interval))
    print(jsonio.dumps(info, 2) if args.json else table(info))
    return 0
