"""``hostjob state``: the runtime-spec state document of a container."""

from __future__ import annotations

from hostjob.boot import jsonio
from hostjob.cli.args import Command
from hostjob.runtime.container import Container

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command("state", "Output the state of a container.", positionals=("container_id",))


def run(args: Args, ctx: Context) -> int:
    state = Container.load(args.container_id, root=ctx.root).state()
    print(jsonio.dumps(state.to_json(), 2))
    return 0
