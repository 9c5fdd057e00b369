"""``hostjob exec``: run another process in a container's job."""

from __future__ import annotations

from hostjob.cli.args import FLAG, INT, LIST, VALUE, Command, Option
from hostjob.errors import InvalidArgument
from hostjob.runtime.container import Container
from hostjob.runtime.verbs.execute import ExecOptions, process_for_exec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context

COMMAND = Command(
    "exec",
    "Run a process in a running container: `exec ID CMD...` or `exec --process FILE ID`.",
    options=(
        Option("process,p", VALUE, "a runtime-spec process JSON (- for stdin)", metavar="path"),
        Option("env,e", LIST, "add KEY=VALUE to the environment (repeatable)"),
        Option("cwd", VALUE, "working directory"),
        Option("user,u", VALUE, "uid[:gid] or a user name (default: the container's user)"),
        Option("additional-gids,g", LIST, "additional group id (repeatable)"),
        Option("tty,t", FLAG, "allocate a pseudo-TTY"),
        Option("console-socket", VALUE, "unix socket that receives the pty master", metavar="path"),
        Option("detach,d", FLAG, "return once the process runs"),
        Option("pidfd-socket", VALUE, "unix socket that receives a pidfd of the process"),
        Option("pid-file", VALUE, "write the process's pid here", metavar="path"),
        Option("preserve-fds", INT, "pass N extra fds (3..3+N-1)", default=0),
        Option("no-new-privs", FLAG, "set no_new_privs for the process"),
        Option("cap,c", LIST, "add a capability (repeatable)"),
        Option("process-label", VALUE, "accepted for runc compatibility (no SELinux)"),
        Option("apparmor", VALUE, "accepted for runc compatibility (no AppArmor)"),
        Option("ignore-paused", FLAG, "accepted for runc compatibility"),
        Option("cgroup", VALUE, "accepted for runc compatibility (the job's cgroup is used)"),
    ),
    positionals=("container_id",),
    rest="command",
)


def run(args: Args, ctx: Context) -> int:
    container = Container.load(args.container_id, root=ctx.root)
    if args.process:
        if args.command:
            raise InvalidArgument("exec takes either --process or a command, not both")
        from hostjob.runtime.bundle import load_process

        process = load_process(args.process)
    else:
        from hostjob.units import parse_id

        gids = []
        for text in args.additional_gids:
            gid = parse_id(text)
            if gid is None:
                raise InvalidArgument(f"invalid additional gid {text!r}")
            gids.append(gid)
        process = process_for_exec(
            container.config.process,
            args.command,
            env=args.env,
            cwd=args.cwd,
            user=args.user,
            additional_gids=gids if args.additional_gids else None,
            tty=args.tty,
            no_new_privileges=True if args.no_new_privs else None,
            capabilities=args.cap,
        )
    return container.exec(
        process,
        ExecOptions(
            detach=args.detach,
            pid_file=args.pid_file,
            console_socket=args.console_socket,
            pidfd_socket=args.pidfd_socket,
            preserve_fds=args.preserve_fds,
        ),
    )
