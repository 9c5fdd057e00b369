"""``hostjob delete``: remove a container, its job, its mounts and its state."""

from __future__ import annotations

from hostjob.cli.args import FLAG, Command, Option
from hostjob.runtime import state_root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "delete",
    "Delete a created or stopped container (--force: any container).",
    options=(Option("force,f", FLAG, "kill the container first if it runs"),),
    positionals=("container_id",),
)


def run(args: Args, ctx: Context) -> int:
    if args.force and not state_root.exists(ctx.root, args.container_id):
        return 0  # nothing there: done, without loading the container library
    from hostjob.runtime.container import Container

    Container.delete_by_id(args.container_id, root=ctx.root, force=args.force)
    return 0
