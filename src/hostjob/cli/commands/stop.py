"""``hostjob stop``: the stop signal, then SIGKILL to the whole job after a timeout."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.cli.args import INT, VALUE, Command, Option
from hostjob.errors import HostjobError, InvalidArgument
from hostjob.runtime.container import Container
from hostjob.supervisor.stop import stop

if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "stop",
    "Stop containers: their stop signal (the image's StopSignal, else TERM) to the init,"
    " SIGKILL to the whole job after the timeout; no restart after that.",
    options=(
        Option("time,t", INT, "seconds before SIGKILL (default: run's --stop-timeout, else 10)"),
        Option("signal,s", VALUE, "the signal to send first (default: the container's)"),
    ),
    positionals=("container_id",),
    rest="more",
)


def run(args: Args, ctx: Context) -> int:
    if args.time is not None and args.time < 0:
        raise InvalidArgument(f"-t {args.time}: not negative")
    signum = None
    if args.signal is not None:
        from hostjob.linux.signals import parse_signal

        signum = parse_signal(args.signal)
    failed: HostjobError | None = None
    for container_id in [args.container_id, *args.more]:
        try:
            stop(Container.load(container_id, root=ctx.root), args.time, signum)
        except HostjobError as err:
            failed = failed or err  # the others are still stopped; the first error is told
            continue
        print(container_id, flush=True)
    if failed is not None:
        raise failed
    return 0
