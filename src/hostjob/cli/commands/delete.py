"""``hostjob delete``: remove a container, its job, its mounts and its state."""

from __future__ import annotations

from hostjob.cli.args import FLAG, Command, Option
from hostjob.errors import ContainerNotFound, StateCorrupt
from hostjob.runtime.state_dir import StateStore

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
    except StateCorrupt as err:
        if not args.force:
            raise
        # Nothing says what the container made. Remove what its ID alone names: the
        # default job cgroup /hostjob/<id> (killing what runs there) and the state
        # directory with any mount below it (an image's overlay); the ID is free again.
        from hostjob import cgroups, log

        store = StateStore(ctx.root)
        with store.lock(args.container_id):
            manager = cgroups.open_manager(cgroups.resolve_path("", args.container_id))
            manager.destroy()
            manager.remove_empty_parents(cgroups.CGROUP_PARENT)
            store.remove(args.container_id)
        log.warning(f"{err}: removed its default cgroup and its state directory only")
    return 0
