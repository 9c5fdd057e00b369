"""``hostjob kill``: signal a container's init, or with --all every job process."""

from __future__ import annotations

from hostjob.cli.args import FLAG, Command, Option
from hostjob.linux.signals import parse_signal
from hostjob.runtime.container import Container

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "kill",
    "Send a signal (default TERM; a number, KILL or SIGKILL) to the container.",
    options=(Option("all,a", FLAG, "signal every process of the job"),),
    positionals=("container_id",),
    optional=("signal",),
)


def run(args: Args, ctx: Context) -> int:
    container = Container.load(args.container_id, root=ctx.root)
    container.kill(parse_signal(args.signal or "TERM"), all_processes=args.all)
    return 0
