"""``hostjob``: global flags, a lazy command table, and the one error-to-exit mapping.

Each command lives in ``hostjob.cli.commands.<name>`` with a ``COMMAND``
(its interface, see ``hostjob.cli.args``) and ``run(args, ctx) -> int`` that
calls one library verb. Only the chosen command's module is imported.
"""

from __future__ import annotations

import posix
import sys

from hostjob import __version__, log
from hostjob.cli.args import FLAG, VALUE, Command, HelpRequested, Option, parse, usage
from hostjob.errors import HostjobError, NotAJobContainer, PermissionDenied

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from hostjob.cli.args import Args

# name -> (module under hostjob.cli.commands, one-line help, needs root)
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "create": ("create", "create a container", True),
    "start": ("start", "start a created container", True),
    "state": ("state", "output the state of a container", True),
    "kill": ("kill", "send a signal to the container's init (or every job process)", True),
    "delete": ("delete", "delete a container and everything it holds", True),
    "run": ("run", "create and run a container", True),
    "exec": ("exec", "run another process in a container's job", True),
    "list": ("list", "list containers", True),
    "ps": ("ps", "list the processes of a container's job", True),
    "pause": ("pause", "freeze every process of the job", True),
    "resume": ("resume", "thaw a paused job", True),
    "update": ("update", "change the job's limits live", True),
    "events": ("events", "stream the job's stats and OOM events (JSON lines)", True),
    "stats": ("stats", "usage and limits of every running job, or of the ones named", True),
    "logs": ("logs", "print a detached image container's output", True),
    "stop": ("stop", "stop containers: stop signal, then SIGKILL after a timeout", True),
    "generate": ("generate", "`generate systemd NAME`: a unit that runs NAME at boot", True),
    "pull": ("pull", "pull an image from a registry into the image store", True),
    "push": ("push", "push an image to a registry (a store image needs root)", False),
    "images": ("images", "list the images in the store", True),
    "inspect": ("inspect", "show an image's manifest, config and layers (JSON)", True),
    "import": ("import_", "import an oci:, oci-archive: or docker-archive: image", True),
    "rmi": ("rmi", "remove images and what only they use", True),
    "prune": ("prune", "remove blobs and layers no image or container uses", True),
    "pack": ("pack", "make a one-layer OCI image from a directory (no root needed)", False),
    "spec": ("spec", "write a job-container config.json template", False),
    "features": ("features", "show what this runtime supports", False),
    "node": ("node", "install hostjob on a cluster node (the installer image's command)", True),
    "checkpoint": ("unsupported", "not supported by job containers", False),
    "restore": ("unsupported", "not supported by job containers", False),
}

GLOBAL = Command(
    "hostjob",
    "hostjob runs job containers: OCI images whose processes run on the host, in a job.",
    options=(
        Option("root", VALUE, "state directory (default /run/hostjob)", default="/run/hostjob"),
        Option("log", VALUE, "log file (default: none)", default=""),
        Option("log-format", VALUE, "log format: text or json", default="text"),
        Option("debug", FLAG, "enable debug logging"),
        Option("systemd-cgroup", FLAG, "cgroupsPath is slice:prefix:name"),
        # The operator's defaults for this runtime name (docker's runtimeArgs, a wrapper
        # as containerd's BinaryName): a container's own annotation still wins.
        Option("default-mount-mode", VALUE, "host or bind, unless io.hostjob.mount-mode says"),
        Option(
            "default-rootfs-mount-point",
            VALUE,
            "the mount point, unless a container's config or annotations say",
            metavar="path",
        ),
        Option(
            "default-pod-namespaces",
            VALUE,
            "join: a pod's job containers join its network, IPC and UTS namespaces,"
            " as io.hostjob.pod-namespaces says for one pod",
        ),
        Option(
            "default-inherit-user",
            FLAG,
            "run as the launcher, unless io.hostjob.inherit-user says otherwise",
        ),
        Option("default-loader", VALUE, "image or host, unless io.hostjob.loader says"),
        Option(
            "allow-pod-annotations",
            VALUE,
            "what a Kubernetes pod's container may ask for that only the operator may"
            " otherwise: inherit-user, secrets, mount-point (comma-separated), or all",
            metavar="choices",
        ),
        Option(
            "auto-user-range",
            VALUE,
            "the uids --user auto gives containers (default $HOSTJOB_AUTO_USER_RANGE, else"
            " 2000000000-2000999999)",
            metavar="first-last",
        ),
        Option("rootless", VALUE, "accepted for runc compatibility", default="auto"),
        Option("criu", VALUE, "accepted for runc compatibility"),
        Option("version,v", FLAG, "print the version"),
    ),
    rest="command",
)


# Commands that name one container: one that is not a job container (the library says
# so as it loads it: NotAJobContainer) is handed to its real OCI runtime, the same words
# and all (hostjob.runtime.delegate.handover). Each loads its container before anything
# else (before it reads a file or stdin that the real runtime must get).
ROUTED = frozenset(
    ("start", "state", "kill", "delete", "exec", "ps", "events", "update", "pause", "resume")
)


class Context:
    """The global flags, as every command sees them."""

    __slots__ = (
        "allow_pod_annotations",
        "auto_user_range",
        "criu",
        "debug",
        "default_inherit_user",
        "default_loader",
        "default_mount_mode",
        "default_mount_point",
        "default_pod_namespaces",
        "log",
        "log_format",
        "root",
        "rootless",
        "systemd_cgroup",
    )

    def __init__(self, args: Args) -> None:
        self.root: str = args.root
        self.log: str = args.log
        self.log_format: str = args.log_format
        self.debug: bool = args.debug
        self.systemd_cgroup: bool = args.systemd_cgroup
        self.rootless: str = args.rootless
        self.criu: str | None = args.criu
        self.default_mount_mode: str | None = args.default_mount_mode
        self.default_mount_point: str | None = args.default_rootfs_mount_point
        self.default_inherit_user: bool = args.default_inherit_user
        self.default_loader: str | None = args.default_loader
        self.default_pod_namespaces: str | None = args.default_pod_namespaces
        self.auto_user_range: str | None = args.auto_user_range
        self.allow_pod_annotations: str | None = args.allow_pod_annotations

    def defaults(self) -> dict[str, str]:
        """The operator's defaults, by the annotation each stands for (as
        ``hostjob.specconv.convert.to_job_config`` takes them; its names, written out here so
        that the commands that never convert a config do not import it)."""
        found = {}
        if self.default_mount_mode:
            found["io.hostjob.mount-mode"] = self.default_mount_mode
        if self.default_mount_point:
            found["io.hostjob.rootfs-mount-point"] = self.default_mount_point
        if self.default_inherit_user:
            found["io.hostjob.inherit-user"] = "true"
        if self.default_loader:
            found["io.hostjob.loader"] = self.default_loader
        if self.allow_pod_annotations:
            found["--allow-pod-annotations"] = self.allow_pod_annotations
        if self.default_pod_namespaces:
            found["io.hostjob.pod-namespaces"] = self.default_pod_namespaces
        return found

    def delegate_flags(self) -> list[str]:
        """The global flags a real OCI runtime gets when hostjob hands it a container
        (all but ``--root``: it has a state root of its own)."""
        flags = []
        if self.log:
            flags += ["--log", self.log]
        if self.log_format != "text":
            flags += ["--log-format", self.log_format]
        if self.debug:
            flags.append("--debug")
        if self.systemd_cgroup:
            flags.append("--systemd-cgroup")
        if self.rootless != "auto":
            flags.append(f"--rootless={self.rootless}")
        if self.criu:
            flags += ["--criu", self.criu]
        return flags


def _top_usage() -> str:
    lines = [usage("hostjob", GLOBAL).replace("hostjob hostjob", "hostjob"), "", "commands:"]
    lines += [f"  {name:<12} {help_}" for name, (_m, help_, _r) in COMMANDS.items()]
    return "\n".join(lines)


def _normalise_rootless(argv: list[str]) -> list[str]:
    # runc's --rootless takes a value (true|false|auto) but is often given bare.
    out = list(argv)
    for i, word in enumerate(out):
        if word in ("--rootless", "-rootless") and (
            i + 1 >= len(out) or out[i + 1] not in ("true", "false", "auto")
        ):
            out[i] = "--rootless=true"
        if not word.startswith("-"):
            break
    return out


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    try:
        glob = parse(GLOBAL, _normalise_rootless(words), stop_at_positional=True)
    except HelpRequested:
        print(_top_usage())
        return 0
    except HostjobError as err:
        return _fail(err)
    if glob.version:
        from hostjob.spec import OCI_VERSION

        print(f"hostjob version {__version__}\nspec: {OCI_VERSION}")
        return 0
    if glob.log_format not in ("text", "json"):
        return _fail(HostjobError(f"invalid log-format: {glob.log_format}"), glob.debug)
    if glob.default_mount_mode not in (None, "host", "bind"):
        why = f"invalid --default-mount-mode: {glob.default_mount_mode!r} (host or bind)"
        return _fail(HostjobError(why), glob.debug)
    if glob.default_loader not in (None, "image", "host"):
        why = f"invalid --default-loader: {glob.default_loader!r} (image or host)"
        return _fail(HostjobError(why), glob.debug)
    if glob.allow_pod_annotations:
        from hostjob.specconv.trust import parse_allowed

        try:
            parse_allowed(glob.allow_pod_annotations)
        except HostjobError as err:
            return _fail(err, glob.debug)
    if glob.default_pod_namespaces not in (None, "join"):
        why = f"invalid --default-pod-namespaces: {glob.default_pod_namespaces!r} (join)"
        return _fail(HostjobError(why), glob.debug)
    log.configure(glob.log, glob.log_format, glob.debug)
    if not glob.command:
        print(_top_usage(), file=sys.stderr)
        return 1
    name, rest = glob.command[0], glob.command[1:]
    entry = COMMANDS.get(name)
    if entry is None:
        return _fail(HostjobError(f"no such command: {name}"), glob.debug)
    module_name, _help, needs_root = entry
    # __import__ rather than importlib.import_module: importlib drags in warnings.
    package = __import__(f"hostjob.cli.commands.{module_name}")
    module = getattr(package.cli.commands, module_name)
    command: Command = module.COMMAND
    try:
        args = parse(command, rest)
    except HelpRequested:
        print(usage("hostjob", command))
        return 0
    except HostjobError as err:
        return _fail(err, glob.debug)
    except Exception as err:
        return _internal_error(name, err, glob.debug)
    ctx = Context(glob)
    try:
        if needs_root and posix.geteuid() != 0:
            raise PermissionDenied(f"hostjob {name} needs root (euid 0): run it as root")
        try:
            code: int = module.run(args, ctx)
        except NotAJobContainer as err:
            if name not in ROUTED or err.runtime is None:
                raise
            from hostjob.runtime.delegate import handover

            flags = ctx.delegate_flags()
            return handover(ctx.root, args.container_id, err.runtime, name, rest, flags)
        return code
    except HostjobError as err:
        return _fail(err, glob.debug)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `hostjob images | head`: the reader left; nothing to say (as SIGPIPE would).
        _silence_stdout()
        return 128 + 13
    except OSError as err:
        if glob.debug:
            raise
        return _fail(HostjobError(_os_error_text(err)), glob.debug)
    except Exception as err:
        return _internal_error(name, err, glob.debug)


def _internal_error(name: str, err: Exception, debug: bool) -> int:
    """A bug: still one line and exit 1, never a bare traceback on a client's stderr
    (containerd and podman show it to the user). The line names the command and asks
    for a report; the traceback goes to the ``--log`` file, and with ``--debug`` to
    stderr before the line (the last line is what clients show)."""
    import traceback  # only here: a command that succeeds never loads it

    trace = "".join(traceback.format_exception(err)).rstrip()
    log.error(f"internal error in hostjob {name}:\n{trace}")
    if debug:
        sys.stderr.write(trace + "\n")
    return _fail(
        HostjobError(
            f"internal error in `hostjob {name}`: {type(err).__name__}: {err}"
            " (a bug in hostjob: please report it with this command's --debug output)"
        )
    )


def _silence_stdout() -> None:
    devnull = posix.open("/dev/null", posix.O_WRONLY)
    posix.dup2(devnull, sys.stdout.fileno())
    posix.close(devnull)


def _os_error_text(err: OSError) -> str:
    text = err.strerror or str(err)
    if err.filename:
        return f"{err.filename}: {text}"
    return text


def _fail(err: HostjobError, debug: bool = False) -> int:
    """Report ``err``: its one line on stderr and in the log, the exit code. With
    ``--debug`` also where it was raised and every cause below it (the errno and the
    call that failed), as debug records (stderr, or the ``--log`` file)."""
    message = str(err).replace("\n", " ")
    log.error(message)
    sys.stderr.write(f"{message}\n")
    if debug:
        for line in cause_chain(err):
            log.debug(line)
    return err.exit_code


def cause_chain(err: BaseException) -> list[str]:
    """``err``'s origin, then each exception that caused it (``raise ... from``, or
    raised while handling it), one line each, as ``--debug`` prints them."""
    lines = [f"{type(err).__name__} raised at {_origin(err)}"]
    seen = {id(err)}
    current: BaseException | None = err
    while current is not None:
        cause = current.__cause__
        if cause is None and not current.__suppress_context__:
            cause = current.__context__
        if cause is None or id(cause) in seen:
            break
        seen.add(id(cause))
        text = str(cause).replace("\n", " ")
        lines.append(f"caused by {type(cause).__name__}: {text} (at {_origin(cause)})")
        current = cause
    return lines


def _origin(err: BaseException) -> str:
    """``file:line in function`` of the innermost frame that raised ``err`` (the path
    from the ``hostjob`` package on)."""
    tb = err.__traceback__
    if tb is None:
        return "an unknown place"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    path = code.co_filename
    cut = path.rfind("/hostjob/")
    if cut >= 0:
        path = path[cut + 1 :]
    return f"{path}:{tb.tb_lineno} in {code.co_name}"


def command() -> NoReturn:
    """The ``hostjob`` command (bin/hostjob): ``main``, its output flushed, then out
    without the interpreter's shutdown, which would cost milliseconds a command and
    has nothing of a runtime command to clean up."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader of our output left early, as `| head` does
        code = code or 141
    posix._exit(code)


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
