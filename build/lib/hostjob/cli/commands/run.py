"""``hostjob run``: create, start, wait for and delete a container.

``hostjob run [flags] ID`` runs a bundle (``--bundle``, default the current
directory), as ``runc run`` does.
"""

from __future__ import annotations

from hostjob import config
from hostjob.cli.args import FLAG, Command, Option
from hostjob.cli.commands.create import CREATE_OPTIONS
from hostjob.runtime.container import CreateOptions
from hostjob.runtime.run import run as run_container
from hostjob.runtime.store import validate_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "run",
    "Create and run a container from a bundle; exit with its program's status.",
    options=(
        *CREATE_OPTIONS,
        Option("detach,d", FLAG, "return once the program runs"),
        Option("keep", FLAG, "do not delete the container after it exits"),
        Option("no-subreaper", FLAG, "do not adopt the job's orphaned processes"),
    ),
    positionals=("container_id",),
)


def run(args: Args, ctx: Context) -> int:
    container_id = validate_id(args.container_id)
    job = config.load_bundle(args.bundle, container_id)
    return run_container(
        container_id,
        job,
        root=ctx.root,
        options=CreateOptions(
            pid_file=args.pid_file,
            console_socket=args.console_socket,
            preserve_fds=args.preserve_fds,
            systemd_cgroup=ctx.systemd_cgroup,
        ),
        detach=args.detach,
        keep=args.keep,
        subreaper=not args.no_subreaper,
    )
