"""Starting a detached image container's watcher (``hostjob run -d IMAGE``), and
starting one again for a running container whose watcher is gone (``respawn``).

``launch`` forks the watcher (a double fork: its own session, stdio on /dev/null,
re-parented to init); *it* creates and starts the container, so that it is the init's
parent and reaps its real exit status, reports back over a pipe (``run -d`` prints the
ID and exits, or raises the create's error as the same class with the same line and
exit code), and then replaces itself with a fresh ``python -I -S`` that imports only
the loop (``hostjob.supervisor.watcher``) and what it needs: 5-7 MiB PSS whatever ``run -d``
had loaded (a fork of one that pulled its image, with httpx and rich, would keep 18
MiB), keeping the init as its child.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from hostjob import log
from hostjob.errors import HostjobError
from hostjob.linux import signals
from hostjob.runtime import proc
from hostjob.runtime.container import Container
from hostjob.runtime.record import STDERR_FIFO, STDOUT_FIFO, WATCHER_LOCK, StateStore
from hostjob.supervisor.watcher import HANDLED, run_loop

if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.linux.fsutil import FileLock
    from hostjob.runtime.verbs.create import CreateOptions
    from hostjob.specconv.jobconfig import JobConfig

    Handover = tuple[FileLock, tuple[int, int]]  # what the forked watcher keeps


# How the fresh interpreter starts: the package's directory first on its path.
_BOOT = (
    "import sys;sys.path.insert(0,sys.argv[1]);from hostjob.supervisor.watcher import main;main()"
)


def launch(
    container_id: str, job: JobConfig, *, root: str, options: CreateOptions, keep: bool = True
) -> None:
    """``run -d IMAGE``: a watcher creates and starts the container; returns once its
    program runs, or raises the create's error as ``create`` would (a container whose
    start failed stays, stopped, with ``keep``, as ``run`` leaves it)."""
    root = StateStore(root).root  # absolute: the watcher works from /

    def work(report: Callable[[bytes], None]) -> Handover:
        container, child = Container.create_from_config(
            container_id, job, root=root, options=options
        )
        try:
            lock = _take_lock(container.store, container_id)
            # Read ends before the program runs: a pipe nobody holds loses what was
            # written to it when its last writer exits (a program that prints and quits).
            fifos = _open_fifos(container.store, container_id)
            container.set_watcher(os.getpid())
            container.start()
        except BaseException:
            child.close()
            if not keep:
                container.delete(force=True)
            raise
        child.close()
        report(b"OK")
        return lock, fifos

    _fork_watcher(work, root, container_id, _preserved_fds(options))
    if log.settings()[0] is None:
        # The watcher's create said it to its stderr, /dev/null: without a --log to
        # take it, say it here.
        from hostjob.runtime import users

        users.warn_if_shared_running(StateStore(root), container_id)


def respawn(container: Container) -> bool:
    """A new watcher for a running ``run -d IMAGE`` container whose watcher is gone
    (``hostjob logs`` calls it): it drains what the pipes kept, logs on and applies
    the restart policy. False when another watcher took the container meanwhile."""
    store, container_id = container.store, container.id

    def work(report: Callable[[bytes], None]) -> Handover:
        try:
            lock = _take_lock(store, container_id)
        except BlockingIOError:
            report(b"BUSY")
            os._exit(0)
        fifos = _open_fifos(store, container_id)
        Container.load(container_id, root=store.root).set_watcher(os.getpid())
        report(b"OK")
        return lock, fifos

    try:
        _fork_watcher(work, store.root, container_id, ())
    except _Busy:
        return False
    return True


class _Busy(Exception):
    pass


def _open_fifos(store: StateStore, container_id: str) -> tuple[int, int]:
    """The read ends of the container's stdout and stderr FIFOs."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    out = os.open(store.path(container_id, STDOUT_FIFO), flags)
    return out, os.open(store.path(container_id, STDERR_FIFO), flags)


def _take_lock(store: StateStore, container_id: str) -> FileLock:
    from hostjob.linux import fsutil

    return fsutil.lock_file(store.path(container_id, WATCHER_LOCK), wait=False)


def _preserved_fds(options: CreateOptions) -> range:
    """Socket-activation fds and ``--preserve-fds``: the container's init gets them."""
    from hostjob.runtime.verbs.create import listen_fds

    return range(3, 3 + listen_fds() + options.preserve_fds)


def _fork_watcher(
    work: Callable[[Callable[[bytes], None]], Handover],
    root: str,
    container_id: str,
    keep_fds: range | tuple[()],
) -> None:
    """Fork a detached process (double fork, new session) that runs ``work``, which
    reports over a pipe, then becomes the watcher; wait for its report.

    The intermediate process passes the report on and leaves (init adopts the
    watcher); if the watcher died without a word (killed mid-create), it passes on
    how it died instead."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the intermediate
        try:
            os.close(read_fd)
            os.setsid()
            inner_read, inner_write = os.pipe()
            watcher = os.fork()
            if watcher == 0:
                os.close(inner_read)
                os.close(write_fd)
                _watcher_process(work, inner_write, keep_fds, root, container_id)
            os.close(inner_write)
            report = proc.read_all(inner_read)
            if not report:
                report = b"D%d" % os.waitpid(watcher, 0)[1]
            os.write(write_fd, report)
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    try:
        report = proc.read_all(read_fd)
    finally:
        os.close(read_fd)
    if report == b"OK":
        return
    if report == b"BUSY":
        raise _Busy()
    raise _error_from(report)


def _watcher_process(
    work: Callable[[Callable[[bytes], None]], Handover],
    report_fd: int,
    keep_fds: range | tuple[()],
    root: str,
    container_id: str,
) -> None:
    """The forked watcher: detach, do ``work``, then run the watcher's loop in a fresh
    interpreter. Never returns (nothing of the caller's stack may run here)."""
    try:
        _detach(report_fd, keep_fds)

        def report(message: bytes) -> None:
            os.write(report_fd, message)
            os.close(report_fd)

        try:
            lock, fifos = work(report)
        except BaseException as err:
            report(_error_report(err))
            os._exit(1)
        _exec_fresh(lock, fifos, root, container_id)
    finally:
        os._exit(1)


def _detach(report_fd: int, keep_fds: range | tuple[()]) -> None:
    """stdio on /dev/null (the caller's terminal or pipes are not ours to hold), every
    other inherited fd closed but the report pipe and passed-on fds (LISTEN_FDS)."""
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    proc.close_fds_except({0, 1, 2, report_fd, *keep_fds})
    os.chdir("/")


def _exec_fresh(lock: FileLock, fifos: tuple[int, int], root: str, container_id: str) -> None:
    """Become a fresh ``python -I -S`` running ``main`` (the container's init stays our
    child; the lock's and the FIFOs' fds are passed on). If that cannot be, run the
    loop here."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path, fmt, debug = log.settings()
    fds = (lock.fd, *fifos)
    # Blocked until the fresh interpreter has its handlers (``_wake_pipe``): a ``stop``
    # in between would otherwise end it (SIGUSR1's default) instead of waking it.
    signals.pthread_sigmask(signals.SIG_BLOCK, HANDLED)
    argv = [
        sys.executable, "-I", "-S", "-c", _BOOT, package_parent, root, container_id,
        ",".join(map(str, fds)), path or "", fmt, "1" if debug else "0",
    ]  # fmt: skip
    if sys.executable:
        try:
            for fd in fds:
                os.set_inheritable(fd, True)
            os.execv(sys.executable, argv)
        except OSError as err:
            log.warning(f"watcher: cannot start a fresh interpreter ({err}); running in place")
            for fd in fds:
                os.set_inheritable(fd, False)
    run_loop(root, container_id, lock, fifos)


def _error_report(err: BaseException) -> bytes:
    """An error as ``E<class>\\n<exit code>\\n<message>`` for the launching process."""
    if isinstance(err, HostjobError):
        name, code, message = type(err).__name__, err.exit_code, str(err)
    elif not isinstance(err, Exception):  # interrupted: no bug
        name, code, message = "HostjobError", 1, f"cannot start the container: {err!r}"
    else:
        # A bug, said as one (the CLI says the same of its own): the traceback goes to
        # the log, where ``--log`` sent this process's records.
        import traceback

        log.error(
            "internal error in the container's watcher:\n"
            + "".join(traceback.format_exception(err)).rstrip()
        )
        name, code = "HostjobError", 1
        message = (
            f"internal error in the container's watcher: {type(err).__name__}: {err}"
            " (a bug in hostjob: please report it; --log FILE keeps its traceback)"
        )
    return f"E{name}\n{code}\n{message}".encode(errors="replace")


def _error_from(report: bytes) -> HostjobError:
    """The watcher's error again, as the same class with the same line and exit code."""
    from hostjob import errors

    if report.startswith(b"D") and report[1:].isdigit():
        status = int(report[1:])
        if os.WIFSIGNALED(status):  # e.g. SIGKILL mid-create (the crash-safety tests)
            signum = os.WTERMSIG(status)
            err = HostjobError(
                f"the container's watcher was killed by {signals.signal_name(signum)}"
                " while it created the container"
            )
            err.exit_code = 128 + signum
            return err
    if not report.startswith(b"E"):
        return HostjobError("the container's watcher died before the container ran")
    name, code, message = report[1:].decode(errors="replace").split("\n", 2)
    cls = getattr(errors, name, HostjobError)
    if not (isinstance(cls, type) and issubclass(cls, HostjobError)):
        cls = HostjobError
    err = cls.__new__(cls)
    HostjobError.__init__(err, message)
    err.exit_code = int(code) if code.isdigit() else 1
    return err
