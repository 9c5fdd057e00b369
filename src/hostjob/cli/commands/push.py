"""``hostjob push``: an image (from the store, or an archive) to a registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import Command
from hostjob.cli.image_flags import QUIET, REGISTRY, STORE, TRUST, registry_options, trust_options

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "push",
    "Push an image (a store name or ID, or oci:/oci-archive:/docker-archive:) to a registry"
    " at [docker://]host[:port]/name[:tag]; print its manifest digest.",
    options=(STORE, *REGISTRY, *TRUST, QUIET),
    positionals=("image", "destination"),
)


def run(args: Args, ctx: Context) -> int:
    from hostjob.images import progress
    from hostjob.images.push import push

    registry, trust = registry_options(args), trust_options(args)
    render = progress.renderer(quiet=args.quiet)
    try:
        result = push(
            args.image,
            args.destination,
            store_root=args.store or None,
            registry=registry,
            trust=trust,
            progress=render,
        )
    finally:
        progress.close(render)
    print(result.digest)
    return 0
