"""``hostjob inspect``: everything the store knows about one image, as JSON."""

from __future__ import annotations

from hostjob.cli.args import Command
from hostjob.cli.render import STORE_OPTION, details_json, open_store, to_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "inspect",
    "Print an image's names, ID, digests, platform, manifest, config and layers (JSON).",
    options=(STORE_OPTION,),
    positionals=("image",),
)


def run(args: Args, ctx: Context) -> int:
    print(to_json(details_json(open_store(args).inspect(args.image))))
    return 0
