"""``hostjob pause``: freeze every process of the container's job."""

from __future__ import annotations

from hostjob.cli.args import Command
from hostjob.runtime.container import Container

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "pause",
    "Freeze every process of the container's job (status paused).",
    positionals=("container_id",),
)


def run(args: Args, ctx: Context) -> int:
    Container.load(args.container_id, root=ctx.root).pause()
    return 0
