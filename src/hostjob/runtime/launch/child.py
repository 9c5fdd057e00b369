"""The container process's half of a launch: its set-up from the fork to ``execve``.

This code runs in the forked child (runc's ``runc init``), as root until it switches to
the target user: it joins the job's cgroup first, so that everything it does is
accounted, then sets up its session, stdio, terminal, limits, bind mode's mount
namespace, working directory and identity, finds its program as the target user,
reports "ready" over a close-on-exec pipe and, for ``create``, blocks on the
``exec.fifo`` until ``start``. ``ChildSetup`` is everything it needs, decided by the
runtime before the fork (``hostjob.runtime.launch.spawn``).

Protocol on the report pipe (child -> runtime): ``READY`` when set up, then EOF at
exec; or ``ERROR`` + the message, and exit. Before ``READY``, ``LEARNED`` + 4 bytes of
length + an image loader's decision for the runtime to keep (``launch.recall``).
"""

from __future__ import annotations

import errno
import posix
import resource
import time

from hostjob.boot import paths
from hostjob.errors import StartError
from hostjob.runtime.launch import identity
from hostjob.runtime.launch import plan as launch_plan
from hostjob.runtime.launch.identity import reason as _reason
from hostjob.runtime.launch.program import (
    environment,
    exec_error,
    find_program_named,
    runs_as_it_is,
)
from hostjob.runtime.proc import close_fds_except, env_dict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hostjob.cgroups import Entry
    from hostjob.runtime.launch.plan import LaunchPlan
    from hostjob.specconv.jobconfig import Hook, JobConfig

READY = b"R"
ERROR = b"E"
LEARNED = b"L"


class ChildSetup:
    """Everything the child needs, prepared by the runtime before the fork."""

    __slots__ = (
        "console",
        "decisions",
        "decisions_dir",
        "enter_namespace",
        "entry",
        "extra_fds",
        "fifo",
        "hook_state",
        "join_pod",
        "listen_fds",
        "pidfd_kind",
        "pidfd_socket",
        "plan",
        "release_by_pipe",
        "start_hooks",
        "stdio",
    )

    def __init__(self, plan: LaunchPlan, entry: Entry) -> None:
        self.plan = plan
        self.entry = entry
        self.fifo: str | None = None  # create: block here until start
        # Or a pipe ``spawn`` makes, whose write end the creating process (``run``)
        # holds as the start (``Child.release``): no fifo, no record to read. Its EOF
        # without a byte ends the process.
        self.release_by_pipe = False
        self.console: str | int | None = None  # --console-socket path, or a socket fd (run -t)
        # --pidfd-socket: a pidfd of the process goes there, named as runc names it: the
        # init's "standard", an exec's "setns".
        self.pidfd_socket: str | None = None
        self.pidfd_kind = "standard"
        self.extra_fds = 0  # fds 3.. passed through (LISTEN_FDS + --preserve-fds)
        self.listen_fds = 0  # of which the first N are socket-activation fds
        self.start_hooks: list[Hook] = []
        self.hook_state: dict[str, Any] = {}
        # A pod's network, IPC and UTS namespaces to join (io.hostjob.pod-namespaces:
        # join), as root, before bind mode's mount namespace is made.
        self.join_pod: Callable[[], None] | None = None
        # Bind mode: set up or join the private mount namespace (runs as root, after
        # the cgroup join and before the identity switch); an exec joins the init's
        # pod namespaces with it.
        self.enter_namespace: Callable[[], None] | None = None
        # run -d IMAGE: stdout and stderr are these FIFOs (their watcher reads them),
        # stdin is /dev/null (see ``_connect_stdio``).
        self.stdio: tuple[str, str] | None = None
        # Where the image loader's decisions are kept (``launch.recall``), and the file
        # ``spawn`` read there for this process's request (None: none are kept).
        self.decisions_dir: str | None = None
        self.decisions: bytes | None = None

    def set_init_steps(self, job: JobConfig, hook_state: dict[str, Any]) -> None:
        """What the config asks of a job's init in the child (create's, a restart's):
        bind mode's mount namespace, the pod's namespaces, ``startContainer`` hooks."""
        if job.mount_mode == "bind":
            from hostjob.runtime.sandbox.namespace import enter_bind_namespace

            self.enter_namespace = enter_bind_namespace(job)
        if job.pod_namespaces:
            from hostjob.runtime.sandbox.join import join_pod

            self.join_pod = join_pod(job.pod_namespaces)
        self.start_hooks = job.hooks_for("startContainer")
        self.hook_state = hook_state


def child_main(
    setup: ChildSetup, report_fd: int, release_fd: int, in_unified: bool, placed_fd: int = -1
) -> None:
    """The child's set-up, step by step, ending in ``execve`` (or an exception, which
    ``spawn`` reports on the pipe before ``os._exit``). Every step names what it did
    when it fails (runc names the file or setting)."""
    # The job first: every later step, and every process the program starts, is in it.
    if placed_fd >= 0 and not posix.read(placed_fd, 1):  # placed from outside (systemd)
        raise StartError("the runtime could not put the container process into its job")
    setup.entry.join(unified=not in_unified)
    plan = setup.plan
    _keep_fds(setup, report_fd, release_fd, placed_fd)
    _start_session(setup)
    _set_limits(plan)
    if setup.enter_namespace is not None:
        _load_before_entry(setup)
    if setup.join_pod is not None:
        setup.join_pod()
    if setup.enter_namespace is not None:
        setup.enter_namespace()
    if plan.create_cwd and not paths.isdir(plan.cwd):
        _make_cwd(plan.cwd, plan.user.uid, plan.user.gid, plan.mount_point)
    fifo_fd = _open_fifo(setup.fifo)
    _become_user(plan)
    program, named = find_program_named(
        plan.args[0], plan.cwd, plan.path_value(), plan.mount_point, plan.image_path
    )
    args = plan.args
    if not runs_as_it_is(plan, program):
        from hostjob.runtime.launch import recall  # the image's loader, or an interpreter

        program, args, learned = recall.decide(plan, program, named, setup.decisions)
        if learned is not None:
            posix.write(report_fd, LEARNED + len(learned).to_bytes(4, "little") + learned)
    env = environment(plan, setup.listen_fds, setup.extra_fds)
    posix.write(report_fd, READY)
    _exec_once_started(setup, program, args, env, fifo_fd, release_fd)


# What the steps after a mount namespace's entry may import, the standard library's
# and hostjob's: in a bind-mode job a volume may cover the directory either is
# installed in (a pod's volume at /opt or /usr/local), and nothing found through the
# file system after the entry may be the runtime's own.
_AFTER_ENTRY = (
    "select",  # waiting for the start
    "fcntl",
    "hostjob.linux.signals",
    "hostjob.linux.fsutil",  # making the working directory
    "hostjob.linux.mountinfo",  # bind mode's private /dev
    "hostjob.linux.syscalls",
    "hostjob.specconv.jobconfig",
)


def _load_before_entry(setup: ChildSetup) -> None:
    """Import what the rest of the set-up may need, and bind libc, while the runtime's
    files are still the host's (``_AFTER_ENTRY``)."""
    for name in _AFTER_ENTRY:
        __import__(name)
    from hostjob.linux import syscalls

    syscalls.binding()  # _ctypes and libc, bound on first use
    if setup.start_hooks:
        from hostjob.runtime.launch import hooks  # noqa: F401
    if setup.plan.seccomp is not None:
        from hostjob.seccomp import bpf  # noqa: F401
    if setup.plan.image_loader:  # the program's loader is decided after the entry
        from hostjob.runtime.launch import libraries, loader, probe, recall, remember  # noqa: F401


def _keep_fds(setup: ChildSetup, report_fd: int, release_fd: int, placed_fd: int) -> None:
    """Close every fd but stdio, the runtime's pipes and the fds passed on; a watched
    container's stdio is connected here."""
    keep = {0, 1, 2, report_fd, release_fd, *range(3, 3 + setup.extra_fds)}
    keep.discard(placed_fd)
    if isinstance(setup.console, int):
        keep.add(setup.console)
    close_fds_except(keep)
    if setup.stdio is not None:
        _connect_stdio(*setup.stdio)


def _start_session(setup: ChildSetup) -> None:
    """A session of its own; with ``terminal``, the pty as its controlling terminal; with
    a pidfd socket (runc's ``--pidfd-socket``), the process's pidfd sent over it."""
    try:
        posix.setsid()
    except OSError as err:
        raise StartError(f"cannot start a new session (setsid): {err.strerror}") from err
    plan = setup.plan
    if plan.terminal:
        if setup.console is None:
            raise StartError("terminal is true but no console socket was given")
        from hostjob.runtime.launch import console

        try:
            console.setup_in_child(setup.console, plan.console_height, plan.console_width)
        except OSError as err:
            where = "" if isinstance(setup.console, int) else f" {setup.console}"
            raise StartError(
                f"cannot set up the terminal (console socket{where}): {_reason(err)}"
            ) from err
    if setup.pidfd_socket is not None:
        from hostjob.runtime.launch import console

        try:
            console.send_pidfd(setup.pidfd_socket, setup.pidfd_kind)
        except OSError as err:
            raise StartError(
                f"cannot send the process's pidfd (pidfd socket {setup.pidfd_socket}):"
                f" {_reason(err)}"
            ) from err


def _set_limits(plan: LaunchPlan) -> None:
    """``oomScoreAdj``, the rlimits, the scheduler and the I/O priority."""
    if plan.scheduler is not None or plan.io_priority is not None:
        from hostjob.runtime.launch import priority

        priority.apply(plan)
    if plan.oom_score_adj is not None:
        _write_setting(
            "/proc/self/oom_score_adj", str(plan.oom_score_adj), f"oomScoreAdj {plan.oom_score_adj}"
        )
    for number, soft, hard in plan.rlimits:
        try:
            resource.setrlimit(number, (soft, hard))
        except (OSError, ValueError) as err:
            reason = _reason(err) if isinstance(err, OSError) else str(err)
            raise StartError(
                f"cannot set rlimit {_rlimit_name(number)} to soft {_limit(soft)},"
                f" hard {_limit(hard)}: {reason}"
            ) from err


def _open_fifo(fifo: str | None) -> int:
    """The exec fifo's read end (-1: none), opened while still root (the state directory
    is 0700); non-blocking, so the open itself does not wait for ``start``."""
    if not fifo:
        return -1
    try:
        return posix.open(fifo, posix.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
    except OSError as err:
        raise StartError(f"cannot open the exec fifo {fifo}: {_reason(err)}") from err


def _become_user(plan: LaunchPlan) -> None:
    """Into the working directory; the target user's identity, umask, noNewPrivileges."""
    # Into the working directory as root, as runc does: a user's mount point may lie
    # under a directory only root may enter (docker's data root is 0710). One the
    # user may enter and root may not (root squashed by NFS) is tried again as the user.
    entered = _enter_cwd(plan.cwd, as_root=True)
    if plan.seccomp is not None and not plan.no_new_privileges:
        # Without no_new_privs the kernel asks for CAP_SYS_ADMIN: before the switch
        # drops it (runc's order).
        _load_seccomp(plan)
    identity.switch(plan)
    if not entered:
        _enter_cwd(plan.cwd, as_root=False)
    if plan.umask is not None:
        posix.umask(plan.umask)
    if plan.no_new_privileges:
        from hostjob.linux import syscalls

        try:
            syscalls.set_no_new_privs()
        except OSError as err:
            raise StartError(
                f"cannot set noNewPrivileges (prctl PR_SET_NO_NEW_PRIVS): {_reason(err)}"
            ) from err


def _exec_once_started(
    setup: ChildSetup, program: str, args: list[str], env: list[str], fifo_fd: int, release_fd: int
) -> None:
    """After READY: wait for the start (the exec fifo's byte, or the release pipe's),
    run ``startContainer`` hooks and exec the program."""
    plan = setup.plan
    # What is left to do before the exec and does not wait for the start is done here,
    # off create's path (it returned at READY) and off start's (it waits for the exec):
    # while the caller goes from one to the other.
    environment = env_dict(env)
    _load_exec_modules(plan)
    if fifo_fd >= 0:
        _wait_for_start(fifo_fd)
    elif release_fd >= 0 and not posix.read(release_fd, 1):
        raise StartError("the runtime went away before it started the container")
    if setup.start_hooks:
        from hostjob.runtime.launch.hooks import run_hooks

        state = dict(setup.hook_state, pid=posix.getpid(), status="created")
        run_hooks("startContainer", setup.start_hooks, state)
    _reset_signals()
    if plan.seccomp is not None and plan.no_new_privileges:
        _load_seccomp(plan)  # the very last step: as few system calls as can be under it
    try:
        posix.execve(program, args, environment)
    except OSError as err:
        raise exec_error(plan.args[0], program, err) from err


def _load_exec_modules(plan: LaunchPlan) -> None:
    """Load what the steps after the start use (``_reset_signals``, ``_load_seccomp``)."""
    from hostjob.linux import signals  # noqa: F401

    if plan.seccomp is not None and plan.no_new_privileges:
        from hostjob.seccomp import bpf  # noqa: F401


def _load_seccomp(plan: LaunchPlan) -> None:
    from hostjob.seccomp import bpf

    assert plan.seccomp is not None
    try:
        bpf.install(plan.seccomp)
    except OSError as err:
        hint = ""
        if err.errno == errno.EACCES:
            hint = " (without noNewPrivileges the process needs CAP_SYS_ADMIN)"
        raise StartError(
            f"cannot load the seccomp filter (linux.seccomp): {_reason(err)}{hint}"
        ) from err


def _enter_cwd(cwd: str, as_root: bool) -> bool:
    """chdir; as root, False where permission is what stops it (to try again as the
    user)."""
    try:
        posix.chdir(cwd)
    except OSError as err:
        if as_root and err.errno in (errno.EACCES, errno.EPERM):
            return False
        raise StartError(f"cannot enter the working directory {cwd}: {err.strerror}") from err
    return True


def _connect_stdio(stdout: str, stderr: str) -> None:
    """A watched container's stdio: stdin /dev/null, stdout and stderr FIFOs of its
    state directory (root's: opened before the identity switch).

    Opened read-write, so the process itself holds a reader: a write never fails with
    EPIPE or raises SIGPIPE, whether or not its watcher lives (if nobody reads, a
    full pipe blocks the writer until a watcher drains it again). The pipe is made as
    large as the host allows (``fs.pipe-max-size``, 1 MiB by default) to ride out a
    busy or restarting watcher."""
    import fcntl

    null = posix.open("/dev/null", posix.O_RDONLY)
    posix.dup2(null, 0)
    posix.close(null)
    for target, path in ((1, stdout), (2, stderr)):
        try:
            fd = posix.open(path, posix.O_RDWR | posix.O_NOFOLLOW | posix.O_CLOEXEC)
        except OSError as err:
            raise StartError(f"cannot open the container's output {path}: {_reason(err)}") from err
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _pipe_max_size())
        except OSError:
            pass  # over the user's pipe-buffer quota: the default 64 KiB does
        posix.dup2(fd, target)  # dup2 clears close-on-exec on the copy
        posix.close(fd)


def _pipe_max_size() -> int:
    try:
        with open("/proc/sys/fs/pipe-max-size", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20


def _reset_signals() -> None:
    """The program starts with every signal at its default and none blocked, as from a
    shell. An ignored signal survives exec: Python ignores SIGPIPE and SIGXFSZ (a
    program would see EPIPE where it expects to die), and a watcher ignores SIGTERM
    and blocks its wake-up signal while it starts (a restarted program would ignore
    ``stop``); an ignored SIGCHLD would even make the program's children reap
    themselves."""
    from hostjob.linux import signals

    for number in range(1, signals.NSIG):
        if number in (signals.SIGKILL, signals.SIGSTOP):
            continue
        try:
            if signals.getsignal(number) == signals.SIG_IGN:
                signals.signal(number, signals.SIG_DFL)
        except (OSError, ValueError):
            pass  # a number the C library keeps for itself
    signals.pthread_sigmask(signals.SIG_SETMASK, [])


def _write_setting(path: str, value: str, setting: str) -> None:
    """Write ``value`` to a /proc file; a failure names the file and the setting."""
    try:
        fd = posix.open(path, posix.O_WRONLY | posix.O_CLOEXEC)
        try:
            posix.write(fd, value.encode())
        finally:
            posix.close(fd)
    except OSError as err:
        raise StartError(f"cannot write {path} ({setting}): {_reason(err)}") from err


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def _make_cwd(path: str, uid: int, gid: int, mount_point: str) -> None:
    """mkdir -p the working directory (we are still root), owned by the process's user.

    Only inside the image: an existing part of the path that is a symlink leading out
    of the mount point (``w -> /root`` with cwd ``/w/.ssh``) would otherwise have root
    make a directory on the host that the container's user then owns. And the
    container may already run (``exec``) as a user who owns a directory on the way and
    swaps it for a symlink meanwhile: so each directory is reached from the mount
    point without following a symlink, made with ``mkdirat`` and given to the user
    with ``fchown`` on the fd of the directory just made, never by path."""
    from hostjob.linux import fsutil

    root = paths.realpath(mount_point)
    # Symlinks of the existing part that stay inside the image are resolved first.
    try:
        target = fsutil.canonical(path)
    except OSError as err:
        raise StartError(f"cannot create the working directory {path}: {_reason(err)}") from err
    if not fsutil.under(target, root):
        raise StartError(
            f"working directory {path} leads outside the container's root through a symlink"
        )

    def give(fd: int) -> None:
        posix.fchown(fd, uid, gid)

    try:
        anchor = fsutil.open_anchor(root)
        try:
            fd = fsutil.make_dirs(anchor, fsutil.parts(target[len(root) :]), 0o700, after=give)
        finally:
            posix.close(anchor)
        posix.close(fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StartError(
                f"cannot create the working directory {path}: a directory on the way was"
                " replaced by a symlink or a file (never followed)"
            ) from err
        raise StartError(f"cannot create the working directory {path}: {_reason(err)}") from err


def _wait_for_start(fifo_fd: int) -> None:
    """Block until ``start`` writes its byte into the exec fifo."""
    import select

    poller = select.poll()
    poller.register(fifo_fd, select.POLLIN)
    while True:
        poller.poll()
        if posix.read(fifo_fd, 1):
            break
        # A writer left without writing (a start killed mid-way): wait for the next.
        time.sleep(0.01)
    # fifo_fd stays open (close-on-exec): ``start`` waits for it to close at exec.


def _rlimit_name(number: int) -> str:
    from hostjob.specconv.convert import RLIMIT_NAMES

    for name in RLIMIT_NAMES:
        if hasattr(resource, name) and launch_plan.rlimit_number(name) == number:
            return name
    return str(number)
