"""``hostjob create``: set up a container whose process waits for ``start``."""

from __future__ import annotations

from hostjob.cli.args import FLAG, INT, VALUE, Command, Option
from hostjob.errors import NotAJobContainer
from hostjob.runtime.container import Container
from hostjob.runtime.verbs.create import CreateOptions

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

# The flags runc's create takes (and its clients pass).
CREATE_OPTIONS = (
    Option("bundle,b", VALUE, "path to the bundle directory", default="."),
    Option("console-socket", VALUE, "unix socket that receives the pty master", metavar="path"),
    Option("pid-file", VALUE, "write the process's pid here", metavar="path"),
    Option("preserve-fds", INT, "pass N extra fds (3..3+N-1) to the process", default=0),
    Option(
        "pidfd-socket", VALUE, "unix socket that receives a pidfd of the process", metavar="path"
    ),
    Option("no-pivot", FLAG, "accepted for runc compatibility (no pivot_root happens)"),
    Option("no-new-keyring", FLAG, "accepted for runc compatibility (no keyring is made)"),
)

COMMAND = Command(
    "create",
    "Create a job container from a bundle; its process waits for `start`.",
    options=CREATE_OPTIONS,
    positionals=("container_id",),
)


def run(args: Args, ctx: Context) -> int:
    from hostjob.runtime import bundle
    from hostjob.runtime.state_root import validate_id

    validate_id(args.container_id)  # a bad ID is the first thing said, as ever
    document = bundle.read_config(args.bundle)  # read once, for both
    try:
        Container.create(
            args.container_id,
            args.bundle,
            root=ctx.root,
            options=CreateOptions(
                pid_file=args.pid_file,
                console_socket=args.console_socket,
                pidfd_socket=args.pidfd_socket,
                preserve_fds=args.preserve_fds,
                systemd_cgroup=ctx.systemd_cgroup,
                auto_user_range=ctx.auto_user_range,
            ),
            document=document,
            defaults=ctx.defaults(),
        )
    except NotAJobContainer:  # the library says so (its annotations): a real runtime's
        from hostjob.runtime import delegate

        return delegate.create(
            ctx.root,
            args.container_id,
            args.bundle,
            document,
            ctx.delegate_flags(),
            runtime_flags(args),
            ctx.default_pod_namespaces,
        )
    return 0


def runtime_flags(args: Args) -> list[str]:
    """The create flags (but ``--bundle``) for a real OCI runtime, as the client gave them."""
    flags = []
    if args.console_socket:
        flags += ["--console-socket", args.console_socket]
    if args.pid_file:
        flags += ["--pid-file", args.pid_file]
    if args.preserve_fds:
        flags += ["--preserve-fds", str(args.preserve_fds)]
    if args.pidfd_socket:
        flags += ["--pidfd-socket", args.pidfd_socket]
    if args.no_pivot:
        flags.append("--no-pivot")
    if args.no_new_keyring:
        flags.append("--no-new-keyring")
    return flags
