"""``hostjob generate systemd NAME``: a unit that runs the container at boot."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from hostjob.cli.args import Command
from hostjob.errors import InvalidArgument
from hostjob.runtime.container import Container
from hostjob.supervisor.units import unit_for

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "generate",
    "`generate systemd NAME`: print a systemd unit that runs the `run -d IMAGE` container"
    " NAME (same image and flags) in the foreground at boot.",
    positionals=("kind", "container_id"),
)


def _hostjob() -> list[str]:
    """How this hostjob was started, as absolute words a unit can run."""
    program = os.path.abspath(sys.argv[0])
    if os.path.basename(program) == "__main__.py":  # python -m hostjob
        return [sys.executable, "-m", "hostjob"]
    return [program]


def run(args: Args, ctx: Context) -> int:
    if args.kind != "systemd":
        raise InvalidArgument(f"generate {args.kind}: only `generate systemd NAME` is known")
    container = Container.load(args.container_id, root=ctx.root)
    sys.stdout.write(unit_for(container, _hostjob()))
    return 0
