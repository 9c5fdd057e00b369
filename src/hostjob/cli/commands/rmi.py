"""``hostjob rmi``: remove images from the store, and whatever only they used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import FLAG, Command, Option
from hostjob.cli.image_flags import STORE, open_store
from hostjob.cli.render import freed
from hostjob.errors import InvalidArgument, one_line
from hostjob.images.errors import ImageNotFound

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "rmi",
    "Remove images (names, digests or ID prefixes; an ID removes every name it has) and free"
    " the blobs and layers nothing else uses. Every image is looked up before any is removed.",
    options=(
        STORE,
        Option("force,f", FLAG, "remove even images that containers use"),
    ),
    rest="images",
)


def run(args: Args, ctx: Context) -> int:
    if not args.images:
        raise InvalidArgument('"rmi" requires at least one <image>')
    store = open_store(args)
    for name in args.images:  # an unknown name fails before anything is removed
        store.lookup(name)
    for name in args.images:
        try:
            store.lookup(name)
        except ImageNotFound:  # an earlier argument (the same image's ID) removed it
            continue
        result = store.remove(name, force=args.force)
        for untagged in result.untagged:
            print(f"untagged {one_line(untagged)}")
        if all(row.digest != result.deleted for row in store.images()):
            print(f"deleted {one_line(result.deleted)}")  # no other name keeps the image
        print(freed(result.freed))
    return 0
