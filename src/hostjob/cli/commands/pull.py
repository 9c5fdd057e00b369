"""``hostjob pull``: fetch an image from a registry (or an archive) into the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import Command
from hostjob.cli.image_flags import (
    PLATFORM,
    QUIET,
    REGISTRY,
    STORE,
    TRUST,
    UNPACK,
    open_store,
    registry_options,
    trust_options,
    unpack_limits,
)

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "pull",
    "Pull an image ([docker://]host/name[:tag|@digest], or oci:/oci-archive:/docker-archive:)"
    " into the store; print its name, then its ID.",
    options=(STORE, PLATFORM, *REGISTRY, *TRUST, QUIET, *UNPACK),
    positionals=("image",),
)


def run(args: Args, ctx: Context) -> int:
    from hostjob.images import progress

    registry, limits, trust = registry_options(args), unpack_limits(args), trust_options(args)
    store = open_store(args)
    render = progress.renderer(quiet=args.quiet)
    try:
        info = store.pull(
            args.image,
            platform=args.platform,
            registry=registry,
            limits=limits,
            trust=trust,
            progress=render,
        )
    finally:
        progress.close(render)
    if not args.quiet:
        print(info.name)
    print(info.id)
    return 0
