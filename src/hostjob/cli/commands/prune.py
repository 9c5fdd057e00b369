"""``hostjob prune``: remove every blob and layer no image or container uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import Command
from hostjob.cli.image_flags import STORE, open_store
from hostjob.cli.render import freed

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "prune",
    "Remove every blob and unpacked layer that no image name or container uses; print what"
    " was freed.",
    options=(STORE,),
)


def run(args: Args, ctx: Context) -> int:
    print(freed(open_store(args).prune()))
    return 0
