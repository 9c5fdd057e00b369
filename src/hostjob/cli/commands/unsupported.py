"""``checkpoint`` and ``restore``: a job container's processes are host processes,
which hostjob cannot freeze into an image and bring back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import Command
from hostjob.errors import NotSupported

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "checkpoint|restore",
    "Not supported by job containers.",
    optional=("container_id",),
    rest="ignored",
    allow_unknown=True,
)


def run(args: Args, ctx: Context) -> int:
    raise NotSupported(
        "checkpoint/restore is not supported: a job container's processes are host"
        " processes, which cannot be checkpointed as a container"
    )
