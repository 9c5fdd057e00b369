"""``hostjob ps``: the processes of a container's job (``--format json``: their pids)."""

from __future__ import annotations

from hostjob.boot import jsonio
from hostjob.cli.args import VALUE, Command, Option
from hostjob.errors import InvalidArgument
from hostjob.runtime.container import Container

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "ps",
    "List the processes of the container's job: a ps(1) table (ps options after the ID,"
    " default -ef) or, with --format json, a JSON array of pids.",
    options=(Option("format,f", VALUE, "table or json", default="table"),),
    positionals=("container_id",),
    rest="ps_args",
)


def run(args: Args, ctx: Context) -> int:
    if args.format not in ("table", "json"):
        raise InvalidArgument(f"invalid format option: {args.format}")
    container = Container.load(args.container_id, root=ctx.root)
    if args.format == "json":
        print(jsonio.dumps(container.pids()))
        return 0
    print(container.ps(args.ps_args or ["-ef"]), end="")
    return 0
