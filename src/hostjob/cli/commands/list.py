"""``hostjob list``: the containers under the state root."""

from __future__ import annotations

from hostjob import jsonio
from hostjob.cli.args import FLAG, VALUE, Command, Option
from hostjob.errors import InvalidArgument
from hostjob.runtime.container import Container
from hostjob.runtime.state_dir import StateStore

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

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
            print(other.get("id", ""))
        return 0
    states = [c.state() for c in containers]
    if args.format == "json":
        print(jsonio.dumps([s.to_json() for s in states] + [other for _r, other in delegated]))
        return 0
    rows = [("ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER", "MODE", "MOUNT POINT")]
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
            "",
        )
        for runtime, other in delegated
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0
