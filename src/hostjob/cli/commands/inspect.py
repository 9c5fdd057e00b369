"""``hostjob inspect``: everything the store knows about one image, as JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import Command
from hostjob.cli.image_flags import STORE, open_store
from hostjob.cli.render import details_json, to_json

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "inspect",
    "Print an image's names, ID, digests, platform, manifest, config and layers (JSON).",
    options=(STORE,),
    positionals=("image",),
)


def run(args: Args, ctx: Context) -> int:
    print(to_json(details_json(open_store(args).inspect(args.image))))
    return 0
