"""``hostjob features``: the runtime-spec features document."""

from __future__ import annotations

from hostjob.boot import jsonio
from hostjob.cli.args import Command
from hostjob.spec.features import features

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command("features", "Show the runtime-spec features document.")


def run(args: Args, ctx: Context) -> int:
    print(jsonio.dumps(features(), 2))
    return 0
