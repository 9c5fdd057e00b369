"""``hostjob import``: an OCI layout, OCI archive or ``docker save`` archive into the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import VALUE, Command, Option
from hostjob.cli.image_flags import (
    QUIET,
    STORE,
    TRUST,
    UNPACK,
    open_store,
    trust_options,
    unpack_limits,
)

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "import",
    "Import oci:DIR[:TAG], oci-archive:FILE[:TAG] or docker-archive:FILE[:REF] into the"
    " store; print its name, then its ID.",
    options=(
        STORE,
        Option("name", VALUE, "name the image (default: the name the archive records)"),
        QUIET,
        *UNPACK,
        *TRUST,
    ),
    positionals=("reference",),
)


def run(args: Args, ctx: Context) -> int:
    from hostjob.images import progress

    limits, trust = unpack_limits(args), trust_options(args)
    store = open_store(args)
    render = progress.renderer(quiet=args.quiet)
    try:
        info = store.import_archive(
            args.reference, name=args.name or None, limits=limits, trust=trust, progress=render
        )
    finally:
        progress.close(render)
    if not args.quiet:
        print(info.name)
    print(info.id)
    return 0
