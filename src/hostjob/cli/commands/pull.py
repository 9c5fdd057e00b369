"""``hostjob pull``: fetch an image from a registry (or an archive) into the store."""

from __future__ import annotations

from hostjob.cli.args import VALUE, Command, Option
from hostjob.cli.render import (
    STORE_OPTION,
    UNPACK_OPTIONS,
    open_store,
    registry_flags,
    registry_options,
    unpack_flags,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "pull",
    "Pull an image ([docker://]host/name[:tag|@digest], or oci:/oci-archive:/docker-archive:)"
    " into the store; print its name, then its ID.",
    options=(
        STORE_OPTION,
        Option(
            "platform",
            VALUE,
            "the image to pick from an index (default: the host's)",
            metavar="os/arch[/variant]",
        ),
        *registry_options("image ID"),
        *UNPACK_OPTIONS,
    ),
    positionals=("image",),
)


def run(args: Args, ctx: Context) -> int:
    from hostjob.images import progress

    store = open_store(args)
    render = progress.renderer(quiet=args.quiet)
    try:
        info = store.pull(
            args.image,
            platform=args.platform,
            progress=render,
            **registry_flags(args),
            **unpack_flags(args),
        )
    finally:
        progress.close(render)
    if not args.quiet:
        print(info.name)
    print(info.id)
    return 0
