"""The watcher of a detached image container (``hostjob run -d IMAGE``): conmon's role.

One small process per container. ``launch`` forks it (detached: its own session,
stdio on /dev/null, re-parented to init); *it* creates and starts the container, so
that it is the init's parent and reaps its real exit status, reports back to
``run -d`` (which prints the ID and exits), and then replaces itself with a fresh
interpreter that imports only this module and what it needs (``python -I -S``:
5-7 MiB PSS whatever ``run -d`` had loaded -- a fork of one that pulled its image,
with httpx and rich, would keep 18 MiB), keeping the init as its child. Then, until
the container stops for good, it:

* copies the container's stdout and stderr into its CRI-format log
  (``hostjob.runtime.crilog``: records, rotation by size);
* when the init exits: ends the rest of the job (SIGTERM, SIGKILL after the grace
  period), records the exit (code or signal, time, whether the job's cgroup counted
  an OOM kill) in the container's state;
* applies the restart policy (``hostjob.runtime.policy``): waits its back-off, then
  ``Container.restart`` runs the process again in the same job and rootfs;
* deletes the container once it has stopped for good if it was run with ``--rm``.

**The job survives the watcher.** The container's stdout and stderr are FIFOs in its
state directory that the init holds open read-write (``runtime.init``): a write
never raises EPIPE or SIGPIPE whether a watcher reads or not, and a pipe holds
``fs.pipe-max-size`` (1 MiB) of output. If the watcher is SIGKILLed, the daemon runs
on; once the pipe is full its writes block until a watcher drains it again, which
``hostjob logs`` starts (``respawn``): it reopens the FIFOs by name, and what was
buffered is logged (lost is only what the killed watcher had read and not yet
written: one read, at most ``READ_SIZE``). That watcher is not the init's parent
(the kernel re-parented the init when the first one died), so the exit it records
is "unknown". ``stop``, ``list`` and ``logs`` need no watcher. One watcher per
container: each holds the flock of ``watcher.lock`` in the state directory while it
lives.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time

from hostjob import log
from hostjob.errors import ContainerNotFound, HostjobError, InvalidState
from hostjob.runtime import crilog, policy, proc
from hostjob.runtime.container import Container
from hostjob.runtime.delete import stop_grace
from hostjob.runtime.proc import sig
from hostjob.runtime.state_dir import STDERR_FIFO, STDOUT_FIFO, WATCHER_LOCK, StateStore

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.fsutil import FileLock
    from hostjob.job import JobConfig
    from hostjob.runtime.create import CreateOptions
    from hostjob.runtime.state_dir import ExitStatus

    Handover = tuple[FileLock, tuple[int, int]]  # what the forked watcher keeps

READ_SIZE = 1 << 18
# How the fresh interpreter starts: the package's directory first on its path.
_BOOT = "import sys;sys.path.insert(0,sys.argv[1]);from hostjob.runtime.watcher import main;main()"
PROCESS_NAME = b"hostjob-watcher"  # /proc/PID/comm: what ps -e and top show


# --- starting a watcher -----------------------------------------------------------------


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
    from hostjob import fsutil

    return fsutil.lock_file(store.path(container_id, WATCHER_LOCK), wait=False)


def _preserved_fds(options: CreateOptions) -> range:
    """Socket-activation fds and ``--preserve-fds``: the container's init gets them."""
    from hostjob.runtime.create import listen_fds

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
            report = _read_all(inner_read)
            if not report:
                report = b"D%d" % os.waitpid(watcher, 0)[1]
            os.write(write_fd, report)
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    try:
        report = _read_all(read_fd)
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
    keep = {0, 1, 2, report_fd, *keep_fds}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listdir's own fd
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
    sig.pthread_sigmask(sig.SIG_BLOCK, _HANDLED)
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
    _run(root, container_id, lock, fifos)


def main() -> None:
    """The fresh interpreter's entry:
    ``... -c _BOOT DIR ROOT ID LOCK_FD,STDOUT_FD,STDERR_FD LOG FMT DEBUG``."""
    from hostjob.fsutil import FileLock

    root, container_id, fds, path, fmt, debug = sys.argv[2:8]
    log.configure(path or None, fmt, debug == "1")
    lock_fd, out_fd, err_fd = (int(fd) for fd in fds.split(","))
    for fd in (lock_fd, out_fd, err_fd):
        os.set_inheritable(fd, False)
    _run(root, container_id, FileLock(lock_fd), (out_fd, err_fd))


def _run(root: str, container_id: str, lock: FileLock, fifos: tuple[int, int]) -> None:
    code = 0
    try:
        _name_process()
        Watcher(root, container_id, fifos).run()
    except ContainerNotFound:
        pass  # deleted meanwhile: nothing left to watch
    except BaseException as err:  # a watcher has nobody to tell but the log
        log.warning(f"watcher of {container_id}: {type(err).__name__}: {err}")
        code = 1
    finally:
        lock.release()
        os._exit(code)


def _name_process() -> None:
    try:
        with open("/proc/self/comm", "wb") as f:
            f.write(PROCESS_NAME)
    except OSError:
        pass


def _error_report(err: BaseException) -> bytes:
    """An error as ``E<class>\\n<exit code>\\n<message>`` for the launching process."""
    if isinstance(err, HostjobError):
        name, code, message = type(err).__name__, err.exit_code, str(err)
    else:
        name, code, message = "HostjobError", 1, f"cannot start the container: {err}"
    return f"E{name}\n{code}\n{message}".encode(errors="replace")


def _error_from(report: bytes) -> HostjobError:
    """The watcher's error again, as the same class with the same line and exit code."""
    from hostjob import errors

    if report.startswith(b"D") and report[1:].isdigit():
        status = int(report[1:])
        if os.WIFSIGNALED(status):  # e.g. SIGKILL mid-create (the crash-safety tests)
            signum = os.WTERMSIG(status)
            err = HostjobError(
                f"the container's watcher was killed by {proc.signal_name(signum)}"
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


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


# --- the watcher's loop -----------------------------------------------------------------


class Watcher:
    """Copies one container's output into its log and looks after its process."""

    __slots__ = ("container", "fifos", "log", "streams", "wake", "writers")

    def __init__(self, root: str, container_id: str, fifos: tuple[int, int]) -> None:
        self.container = Container.load(container_id, root=root)
        record = self.container.record
        if record is None or record.daemon is None:
            raise ContainerNotFound(container_id)
        daemon = record.daemon
        store = self.container.store
        self.fifos = (store.path(container_id, STDOUT_FIFO), store.path(container_id, STDERR_FIFO))
        dir_fd = os.open(
            daemon.log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
        try:
            self.log = crilog.RotatingLog(dir_fd, daemon.log_max_size, daemon.log_max_files)
        except BaseException:
            os.close(dir_fd)
            raise
        self.streams = {
            fifos[0]: crilog.LineSplitter(crilog.STDOUT),
            fifos[1]: crilog.LineSplitter(crilog.STDERR),
        }
        # A writer of our own on each: with the job gone the FIFO never reports a
        # hang-up, and a restarted init's output goes on through the same pipe.
        flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        self.writers = [os.open(path, flags) for path in self.fifos]
        self.wake = _wake_pipe()

    def run(self) -> None:
        """Until the container has stopped for good (or is deleted)."""
        delay = 0.0
        started = time.monotonic()
        ended = self._watch_process()
        while ended is not None:
            record = self.container.record
            assert record is not None and record.daemon is not None
            if not policy.should_restart(
                record.daemon, ended, record.restarts or 0, bool(record.stop_requested)
            ):
                self._finish()
                return
            delay = policy.next_delay(delay, time.monotonic() - started)
            self._pause(delay)
            started = time.monotonic()
            try:
                child = self.container.restart(self.fifos)
            except InvalidState:  # stop came first (the exit is recorded)
                self._finish()
                return
            except HostjobError as err:  # the program could not start again: a failure
                log.warning(f"watcher of {self.container.id}: restart failed: {err}")
                ended = self.container.record_exit(127 << 8)
                continue
            try:
                child.wait_exec()
            except HostjobError as err:  # it exits: the next round records that
                log.warning(f"watcher of {self.container.id}: restart failed: {err}")
            ended = self._watch_process()

    def _finish(self) -> None:
        record = self.container.record
        if record is not None and record.daemon is not None and record.daemon.remove:
            Container.delete_by_id(self.container.id, root=self.container.store.root, force=True)

    def _watch_process(self) -> ExitStatus | None:
        """Copy output until the init exits, end the job, record how it ended."""
        self.container.reload()
        record = self.container.record
        if record is None:
            return None
        pid, started = record.pid, record.start_time
        child = pid > 0 and _is_child(pid)
        pidfd = _open_pidfd(pid) if child else proc.open_pidfd(pid, started)
        oom_base = self._oom_kills()
        wait_status = None
        if pidfd is not None:
            try:
                while not self._pump(pidfd, None):
                    pass
            finally:
                os.close(pidfd)
            if child:
                wait_status = _reap(pid)
        self._end_job()
        self._drain(final=True)
        try:
            return self.container.record_exit(wait_status, self._oom_kills() > oom_base)
        except ContainerNotFound:
            return None

    def _pump(self, until: int | None, timeout: float | None) -> bool:
        """Wait for output, the fd ``until`` (a pidfd) or ``timeout``; copy what came.
        True once ``until`` is readable (or the time is up)."""
        poller = select.poll()
        for fd in self.streams:
            poller.register(fd, select.POLLIN)
        poller.register(self.wake, select.POLLIN)
        if until is not None:
            poller.register(until, select.POLLIN)
        events = poller.poll(None if timeout is None else max(0, int(timeout * 1000)))
        done = timeout is not None and not events
        for fd, _mask in events:
            if fd == until:
                done = True
            elif fd == self.wake:
                _drain_wake(self.wake)
            else:
                self._copy(fd)
        return done

    def _copy(self, fd: int) -> bool:
        """Copy what the FIFO ``fd`` holds now (one read); False when it was empty."""
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return False
        if not data:
            return False
        self._write(self.streams[fd].feed(data, crilog.stamp()))
        return True

    def _write(self, records: bytes) -> None:
        if not records:
            return
        try:
            self.log.write(records)
        except OSError as err:
            # A full disk or a log directory deleted under us: the output is dropped,
            # never left to block the job.
            if err.errno != errno.ENOENT:
                log.warning(f"watcher of {self.container.id}: cannot write the log: {err}")

    def _drain(self, *, final: bool = False) -> None:
        """Copy everything the FIFOs hold; with ``final`` also a last line without a
        newline (``P``): its program has ended."""
        for fd, splitter in self.streams.items():
            while self._copy(fd):
                pass
            if final:
                self._write(splitter.flush(crilog.stamp()))

    def _end_job(self) -> None:
        """The init has exited: the rest of the job gets SIGTERM, SIGKILL after the
        grace period (SPEC §5), while its output is still copied."""
        container = self.container
        if not container.owns_cgroup():
            return
        manager = container.cgroup()
        try:
            for signum, grace in ((sig.SIGTERM, stop_grace()), (sig.SIGKILL, 5.0)):
                if not manager.exists() or not manager.pids():
                    return
                manager.kill_all(signum)
                deadline = time.monotonic() + grace
                while manager.pids() and time.monotonic() < deadline:
                    self._pump(None, 0.05)
        except HostjobError as err:
            log.warning(f"watcher of {container.id}: cannot end the job: {err}")
        finally:
            manager.close()

    def _pause(self, delay: float) -> None:
        """The back-off before a restart; ``stop`` (SIGUSR1) cuts it short."""
        deadline = time.monotonic() + delay
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._pump(None, left)
            record = self.container.store.read(self.container.id)
            if record is None or record.stop_requested:
                return

    def _oom_kills(self) -> int:
        try:
            return self.container.cgroup().oom_kill_count()
        except (HostjobError, OSError):
            return 0


def _is_child(pid: int) -> bool:
    """Whether ``pid`` is our child (only then can we reap its exit status)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def _reap(pid: int) -> int | None:
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def _wake_pipe() -> int:
    """A pipe the signal handler writes to (``signal.set_wakeup_fd``): SIGUSR1 from
    ``stop`` wakes the loop. Other termination signals are ignored: the watcher ends
    when its container does (SIGKILL still ends it; the job survives that)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    sig.set_wakeup_fd(write_fd)
    sig.signal(sig.SIGUSR1, _ignore)
    for number in (sig.SIGTERM, sig.SIGINT, sig.SIGHUP, sig.SIGQUIT):
        sig.signal(number, sig.SIG_IGN)
    sig.pthread_sigmask(sig.SIG_UNBLOCK, _HANDLED)  # what came meanwhile arrives now
    return read_fd


# The signals the watcher handles or ignores (blocked from the fork's exec until then).
_HANDLED = (sig.SIGUSR1, sig.SIGTERM, sig.SIGINT, sig.SIGHUP, sig.SIGQUIT)


def _ignore(_signum: int, _frame: object) -> None:
    pass


def _drain_wake(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
