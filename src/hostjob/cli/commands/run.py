"""``hostjob run``: create, start, wait for and delete a container.

Two forms, told apart by their arguments:

* ``hostjob run [--bundle DIR] ID`` runs a bundle, exactly as ``runc run`` does
  (the bundle defaults to the current directory);
* ``hostjob run [flags] IMAGE [ARG...]`` runs a job container of an image, as
  ``podman run`` does: pulled or imported into the store if needed, its overlay
  mounted, its config built from the image and the flags.

The bundle form is taken when ``--bundle`` is given, or when the one argument is
a valid container ID and ``./config.json`` exists (runc's default bundle).
"""

from __future__ import annotations

from hostjob.boot import paths
from hostjob.boot.env import popenv
from hostjob.cli.args import FLAG, INT, LIST, VALUE, Command, Option
from hostjob.cli.commands.create import CREATE_OPTIONS
from hostjob.cli.image_flags import (
    PLATFORM,
    QUIET,
    REGISTRY,
    STORE,
    TRUST,
    UNPACK,
    open_store,
    registry_options,
    trust_options,
    unpack_limits,
)
from hostjob.errors import InvalidArgument
from hostjob.runtime.state_root import validate_id
from hostjob.runtime.verbs.create import CreateOptions
from hostjob.runtime.verbs.run import run as run_container
from hostjob.supervisor.options import DAEMON_ONLY

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cli.args import Args
    from hostjob.cli.main import Context
    from hostjob.specconv.jobconfig import DaemonConfig

RUNC_OPTIONS = (
    *(o for o in CREATE_OPTIONS if o.dest != "bundle"),
    Option("bundle,b", VALUE, "bundle directory (the runc form: `run ID`)"),
    Option("detach,d", FLAG, "return once the program runs"),
    Option("keep", FLAG, "do not delete the container after it exits (bundle form)"),
    Option("no-subreaper", FLAG, "do not adopt the job's orphaned processes"),
)
IMAGE_OPTIONS = (
    Option("name", VALUE, "container ID (default: a random one)"),
    Option("rm", FLAG, "delete the container (mounts, writable layer, job) when it exits"),
    Option("tty,t", FLAG, "give the program a terminal"),
    Option("interactive,i", FLAG, "accepted for podman compatibility (stdin is always passed)"),
    Option("env,e", LIST, "KEY=VALUE (or KEY: the launcher's value); repeatable"),
    Option("env-file", LIST, "a file of KEY=VALUE lines; repeatable"),
    Option(
        "secret",
        LIST,
        "SRC:DST: the file SRC as DST in the container, readable by its user only (not"
        " in the environment); repeatable",
    ),
    Option(
        "user,u",
        VALUE,
        "uid[:gid], a user name, or auto: a uid and gid of the container's own (default:"
        " the image's User, else you)",
    ),
    Option("cwd,workdir,w", VALUE, "working directory (default: the image's WorkingDir)"),
    Option("entrypoint", VALUE, "the program: a path, or a JSON array of words"),
    Option("memory,m", VALUE, "memory limit (e.g. 512m)"),
    Option("cpus", VALUE, "CPU limit in CPUs (e.g. 1.5)"),
    Option("pids-limit", INT, "maximum number of processes"),
    Option("mount-point", VALUE, "where the image appears (host mode: bound on the host)"),
    Option("mount-mode", VALUE, "host (default) or bind (a private mount namespace)"),
    Option("volume,v", LIST, "SRC:DST[:ro]; repeatable"),
    Option("annotation", LIST, "KEY=VALUE annotation; repeatable"),
    Option("pull", VALUE, "always, missing (default) or never", default="missing"),
    STORE,
    PLATFORM,
    *REGISTRY,
    *TRUST,
    *UNPACK,
    QUIET,
    Option("restart", VALUE, "with -d: no (default), on-failure[:N] or always"),
    Option("log-max-size", VALUE, "with -d: rotate the log at this size (default 10m)"),
    Option("log-max-files", INT, "with -d: log files kept, the current one included (default 3)"),
    Option("stop-signal", VALUE, "with -d: what `stop` sends (default: the image's, else TERM)"),
    Option("stop-timeout", INT, "with -d: seconds `stop` waits before SIGKILL (default 10)"),
)
# Left out of the command line ``generate systemd`` writes (it adds --rm and --name
# itself; the unit is the watcher; credentials never go into a unit file).
_NOT_IN_UNIT = ("name", "rm", "quiet", "store", "creds", "interactive", *DAEMON_ONLY)
COMMAND = Command(
    "run",
    "Run a container: `run [--bundle DIR] ID` (a bundle, as runc does) or"
    " `run [flags] IMAGE [ARG...]` (a job container of an image, as podman does).",
    options=(*RUNC_OPTIONS, *IMAGE_OPTIONS),
    positionals=("target",),
    rest="args",
)

_IMAGE_ONLY = tuple(o.dest for o in IMAGE_OPTIONS if o.dest not in ("pull", "tls_verify"))


def _bundle_form(args: Args) -> bool:
    if args.bundle is not None:
        return True
    if args.args or any(getattr(args, dest) for dest in _IMAGE_ONLY):
        return False
    try:
        validate_id(args.target)
    except InvalidArgument:
        return False
    return paths.exists("config.json")


def _create_options(args: Args, ctx: Context) -> CreateOptions:
    return CreateOptions(
        pid_file=args.pid_file,
        console_socket=args.console_socket,
        pidfd_socket=args.pidfd_socket,
        preserve_fds=args.preserve_fds,
        systemd_cgroup=ctx.systemd_cgroup,
        auto_user_range=ctx.auto_user_range,
    )


def run(args: Args, ctx: Context) -> int:
    if _bundle_form(args):
        container_id = validate_id(args.target)
        from hostjob.runtime.bundle import load_bundle

        job = load_bundle(args.bundle or ".", container_id, defaults=ctx.defaults())
        return run_container(
            container_id,
            job,
            root=ctx.root,
            options=_create_options(args, ctx),
            detach=args.detach,
            keep=args.keep,
            subreaper=not args.no_subreaper,
        )
    return _run_image(args, ctx)


def _daemon_config(args: Args) -> DaemonConfig | None:
    from hostjob.supervisor.options import daemon_config

    return daemon_config(
        detach=args.detach,
        remove=args.rm,
        **{name: getattr(args, name) for name in DAEMON_ONLY},
    )


def _foreground_command(args: Args, store: str, image: str) -> list[str]:
    """The words after ``hostjob run`` that run the same container again (``generate
    systemd``): the flags as given (paths made absolute), the store, the image by
    its name in the store, the arguments."""
    words: list[str] = []
    for option in IMAGE_OPTIONS:
        if option.dest in _NOT_IN_UNIT:
            continue
        value = getattr(args, option.dest)
        flag = "--" + option.names[0]
        if option.kind == FLAG:
            if value != option.default:
                words.append(flag if value else f"{flag}=false")
        elif option.kind == LIST:
            for item in value:
                words += [flag, _absolute(option.dest, item)]
        elif value is not None and value != option.default:
            words += [flag, _absolute(option.dest, str(value))]
    return [*words, "--store", store, "-q", image, *args.args]


def _absolute(dest: str, value: str) -> str:
    """An ``--env-file``, ``--authfile``, ``--signature-policy``, ``--registries.d``, or
    a ``--volume`` or ``--secret`` source as an absolute path (a unit runs in /)."""
    if dest in ("env_file", "authfile", "signature_policy", "registries_d"):
        return paths.abspath(value)
    if dest in ("volume", "secret") and ":" in value:
        source, rest = value.split(":", 1)
        return f"{paths.abspath(source)}:{rest}"
    return value


def _run_image(args: Args, ctx: Context) -> int:
    from hostjob.images import progress
    from hostjob.images.run_image import run_image
    from hostjob.images.runspec import RunFlags
    from hostjob.units import parse_size

    if args.mount_mode not in (None, "host", "bind"):  # before anything is pulled
        raise InvalidArgument(f"--mount-mode {args.mount_mode!r}: expected host or bind")
    cpus = None
    if args.cpus is not None:
        try:
            cpus = float(args.cpus)
        except ValueError as err:
            raise InvalidArgument(f"--cpus {args.cpus!r} is not a number") from err
    flags = RunFlags(
        args=args.args,
        entrypoint=args.entrypoint,
        env=args.env,
        env_files=args.env_file,
        user=args.user,
        cwd=args.cwd,
        tty=args.tty,
        memory=parse_size(args.memory, "--memory") if args.memory else None,
        cpus=cpus,
        pids_limit=args.pids_limit,
        mount_point=args.mount_point,
        mount_mode=args.mount_mode,
        volumes=args.volume,
        annotations=args.annotation,
        secrets=args.secret,
    )
    flags.check()  # bad flags and names fail before anything is pulled
    if args.name:
        validate_id(args.name)
    daemon = _daemon_config(args)
    # --creds off the command line before the pull, and before the job is forked.
    registry, limits, trust = registry_options(args), unpack_limits(args), trust_options(args)
    # systemd's socket is hostjob run's (generate systemd: Type=notify), never the job's.
    notify_socket = popenv("NOTIFY_SOCKET")
    store = open_store(args)
    render = progress.renderer(quiet=args.quiet)
    try:
        image = store.get(
            args.target,
            pull=args.pull,
            platform=args.platform,
            registry=registry,
            limits=limits,
            trust=trust,
            progress=render,
        )
    finally:
        progress.close(render)
    if daemon is not None:
        daemon.command = _foreground_command(args, store.root, image.name or args.target)
    container_id, code = run_image(
        store,
        image,
        flags,
        root=ctx.root,
        name=args.name,
        options=_create_options(args, ctx),
        detach=args.detach,
        remove=args.rm,
        subreaper=not args.no_subreaper,
        daemon=daemon,
        notify_socket=None if args.detach else notify_socket,
    )
    if args.detach:
        print(container_id)
    return code
