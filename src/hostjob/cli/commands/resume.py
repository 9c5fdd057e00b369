"""``hostjob resume``: thaw a paused job."""

from __future__ import annotations

from hostjob.cli.args import Command
from hostjob.runtime.container import Container

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "resume",
    "Thaw a paused container's job.",
    positionals=("container_id",),
)


def run(args: Args, ctx: Context) -> int:
    Container.load(args.container_id, root=ctx.root).resume()
    return 0
