"""``hostjob delete``: remove a container, its job, its mounts and its state."""

from __future__ import annotations

from hostjob.cli.args import FLAG, Command, Option
from hostjob.errors import ContainerNotFound
from hostjob.runtime.store import StateStore

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
    if args.force and not StateStore(ctx.root).exists(args.container_id):
        return 0  # runc: deleting what is not there, by force, succeeds (containerd does it)
    from hostjob.runtime.container import Container

    try:
        Container.load(args.container_id, root=ctx.root).delete(force=args.force)
    except ContainerNotFound:
        if args.force:
            return 0  # runc: deleting what is not there, by force, succeeds
        raise
    return 0
