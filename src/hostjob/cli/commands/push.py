"""``hostjob push``: an image (from the store, or an archive) to a registry."""

from __future__ import annotations

from hostjob.cli.args import Command
from hostjob.cli.render import STORE_OPTION, registry_flags, registry_options

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "push",
    "Push an image (a store name or ID, or oci:/oci-archive:/docker-archive:) to a registry"
    " at [docker://]host[:port]/name[:tag]; print its manifest digest.",
    options=(STORE_OPTION, *registry_options("manifest digest")),
    positionals=("image", "destination"),
)


def run(args: Args, ctx: Context) -> int:
    from hostjob.images import progress
    from hostjob.images.push import push

    render = progress.renderer(quiet=args.quiet)
    try:
        result = push(
            args.image,
            args.destination,
            store_root=args.store or None,
            progress=render,
            **registry_flags(args),
        )
    finally:
        progress.close(render)
    print(result.digest)
    return 0
