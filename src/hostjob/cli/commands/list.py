"""``hostjob list``: the containers under the state root."""

from __future__ import annotations

from hostjob.boot import jsonio
from hostjob.cli.args import FLAG, VALUE, Command, Option
from hostjob.errors import InvalidArgument, one_line
from hostjob.runtime.container import Container
from hostjob.runtime.record import StateStore

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.cli.args import Args
    from hostjob.cli.main import Context
    from hostjob.spec.state import State

COMMAND = Command(
    "list",
    "List containers.",
    options=(
        Option("format,f", VALUE, "table or json", default="table"),
        Option("quiet,q", FLAG, "print only the IDs"),
    ),
)


def run(args: Args, ctx: Context) -> int:
    if args.format not in ("table", "json"):
        raise InvalidArgument(f"invalid format option: {args.format}")
    containers = Container.load_all(root=ctx.root)
    delegated: list[tuple[str, dict[str, Any]]] = []
    if StateStore(ctx.root).has_delegates():
        from hostjob.runtime.delegate import list_delegated

        delegated = list_delegated(ctx.root)  # containers that are not job containers
    if args.quiet:
        for container in containers:
            print(container.id)
        for _runtime, other in delegated:
            print(one_line(str(other.get("id", ""))))  # another runtime's word
        return 0
    states = [c.state() for c in containers]
    if args.format == "json":
        print(jsonio.dumps([s.to_json() for s in states] + [other for _r, other in delegated]))
        return 0
    # runc's columns first; then how a stopped process ended and a daemon's restarts.
    rows = [
        (
            *("ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER", "MODE", "MOUNT POINT"),
            *("EXIT", "FINISHED", "RESTARTS", "WATCHER"),
        )
    ]
    rows += [
        (
            s.id or "",
            str(s.pid or 0),
            s.status or "",
            s.bundle or "",
            s.created or "",
            c.store.owner(c.id),
            s.mount_mode or "",
            s.mount_point or "",
            *_ending(s),
        )
        for c, s in zip(containers, states, strict=True)
    ]
    rows += [
        (
            str(other.get("id", "")),
            str(other.get("pid", 0)),
            str(other.get("status", "")),
            str(other.get("bundle", "")),
            str(other.get("created", "")),
            str(other.get("owner", "")),
            runtime,  # the mode column: which runtime runs a container that is not a job
            *("", "", "", "", ""),
        )
        for runtime, other in delegated
    ]
    # Every cell escaped as an error line is: a mount point, a bundle, an owner's name
    # or another runtime's answer may hold a newline or an escape sequence.
    cells = [tuple(map(one_line, row)) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        print(
            "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def _ending(state: State) -> tuple[str, str, str, str]:
    """EXIT and FINISHED of a stopped container (``137 (SIGKILL, OOMKilled)``,
    ``unknown`` when its watcher was gone), RESTARTS and WATCHER of a ``run -d IMAGE``
    one (``gone`` only while it should be there: the container runs)."""
    exit_text = finished = ""
    if state.status == "stopped" and state.finished_at:
        finished = state.finished_at
        if state.exit_code is None:
            exit_text = "unknown"
        else:
            exit_text = str(state.exit_code)
            notes = [n for n in (state.exit_signal, "OOMKilled" if state.oom_killed else "") if n]
            if notes:
                exit_text += f" ({', '.join(notes)})"
    restarts = "" if state.restart_count is None else str(state.restart_count)
    watcher = state.watcher or ""
    if watcher == "gone" and state.status == "stopped":
        watcher = ""
    return exit_text, finished, restarts, watcher
