"""``hostjob events``: the job's stats and OOM kills as JSON lines (runc's shape)."""

from __future__ import annotations

import sys

from hostjob.boot import jsonio
from hostjob.cli.args import FLAG, VALUE, Command, Option
from hostjob.runtime.container import Container
from hostjob.units import parse_duration

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "events",
    'Print {"type":"stats"|"oom","id","data"} lines: stats every --interval and each OOM'
    " kill as it happens, until the container stops; --stats prints one stats line.",
    options=(
        Option("interval", VALUE, "time between stats lines (default 5s)", default="5s"),
        Option("stats", FLAG, "print the stats once and exit"),
    ),
    positionals=("container_id",),
)


def run(args: Args, ctx: Context) -> int:
    container = Container.load(args.container_id, root=ctx.root)
    for event in container.events(parse_duration(args.interval), once=args.stats):
        sys.stdout.write(jsonio.dumps(event) + "\n")
        sys.stdout.flush()
    return 0
