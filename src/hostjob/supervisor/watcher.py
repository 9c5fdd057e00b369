"""The watcher of a detached image container (``hostjob run -d IMAGE``): conmon's role.

One small process per container. ``hostjob.supervisor.launch`` forks it (detached: its own session,
stdio on /dev/null, re-parented to init); *it* creates and starts the container, so
that it is the init's parent and reaps its real exit status, reports back to
``run -d`` (which prints the ID and exits), and then replaces itself with a fresh
interpreter that imports only this module and what it needs (``python -I -S``:
5-7 MiB PSS whatever ``run -d`` had loaded -- a fork of one that pulled its image,
with httpx and rich, would keep 18 MiB), keeping the init as its child. Then, until
the container stops for good, it:

* copies the container's stdout and stderr into its CRI-format log
  (``hostjob.supervisor.logwriter``: records, rotation by size);
* when the init exits: ends the rest of the job (SIGTERM, SIGKILL after the grace
  period), records the exit (code or signal, time, whether the job's cgroup counted
  an OOM kill) in the container's state;
* applies the restart policy (``hostjob.supervisor.restart``): waits its back-off, then
  ``Container.restart`` runs the process again in the same job and rootfs;
* deletes the container once it has stopped for good if it was run with ``--rm``.

**The job survives the watcher.** The container's stdout and stderr are FIFOs in its
state directory that the init holds open read-write (``hostjob.runtime.launch.child``): a write
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
from hostjob.linux import signals
from hostjob.linux.signals import pidfd_of
from hostjob.runtime import proc
from hostjob.runtime.container import Container
from hostjob.runtime.handle import stop_grace
from hostjob.runtime.record import STDERR_FIFO, STDOUT_FIFO
from hostjob.supervisor import crilog, restart
from hostjob.supervisor.logwriter import LineSplitter, RotatingLog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.linux.fsutil import FileLock
    from hostjob.runtime.record import ExitStatus


READ_SIZE = 1 << 18

PROCESS_NAME = b"hostjob-watcher"  # /proc/PID/comm: what ps -e and top show


def main() -> None:
    """The fresh interpreter's entry:
    ``... -c _BOOT DIR ROOT ID LOCK_FD,STDOUT_FD,STDERR_FD LOG FMT DEBUG``."""
    from hostjob.linux.fsutil import FileLock

    root, container_id, fds, path, fmt, debug = sys.argv[2:8]
    log.configure(path or None, fmt, debug == "1")
    lock_fd, out_fd, err_fd = (int(fd) for fd in fds.split(","))
    for fd in (lock_fd, out_fd, err_fd):
        os.set_inheritable(fd, False)
    run_loop(root, container_id, FileLock(lock_fd), (out_fd, err_fd))


def run_loop(root: str, container_id: str, lock: FileLock, fifos: tuple[int, int]) -> None:
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
            self.log = RotatingLog(dir_fd, daemon.log_max_size, daemon.log_max_files)
        except BaseException:
            os.close(dir_fd)
            raise
        self.streams = {
            fifos[0]: LineSplitter(crilog.STDOUT),
            fifos[1]: LineSplitter(crilog.STDERR),
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
            if not restart.should_restart(
                record.daemon, ended, record.restarts or 0, bool(record.stop_requested)
            ):
                self._finish()
                return
            delay = restart.next_delay(delay, time.monotonic() - started)
            self._pause(delay)
            started = time.monotonic()
            oom_base = self.container.oom_kills()  # before the new process can use any
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
            ended = self._watch_process(oom_base)

    def _finish(self) -> None:
        record = self.container.record
        if record is not None and record.daemon is not None and record.daemon.remove:
            Container.delete_by_id(self.container.id, root=self.container.store.root, force=True)

    def _watch_process(self, oom_base: int | None = None) -> ExitStatus | None:
        """Copy output until the init exits, end the job, record how it ended.

        ``oom_base``: the job's OOM kills before this process started; a kill beyond
        them ended it. For the first process it is 0, the job's cgroup being as new as
        the process (read when the watcher started, it already held the kill of a
        program that ran out of memory before a slow host had the watcher going)."""
        self.container.reload()
        record = self.container.record
        if record is None:
            return None
        pid, started = record.pid, record.start_time
        child = pid > 0 and _is_child(pid)
        pidfd = pidfd_of(pid) if child else proc.open_pidfd(pid, started)
        if oom_base is None:
            # A watcher that logs started later, after restarts: what came before them
            # is not this process's.
            oom_base = 0 if not record.restarts else self.container.oom_kills()
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
            return self.container.record_exit(wait_status, self.container.oom_kills() > oom_base)
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
        grace period, while its output is still copied."""
        container = self.container
        if not container.owns_cgroup():
            return
        manager = container.cgroup()
        try:
            manager.terminate(stop_grace(), idle=lambda seconds: self._pump(None, seconds))
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


def _is_child(pid: int) -> bool:
    """Whether ``pid`` is our child (only then can we reap its exit status)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


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
    signals.set_wakeup_fd(write_fd)
    signals.signal(signals.SIGUSR1, _ignore)
    for number in (signals.SIGTERM, signals.SIGINT, signals.SIGHUP, signals.SIGQUIT):
        signals.signal(number, signals.SIG_IGN)
    signals.pthread_sigmask(signals.SIG_UNBLOCK, HANDLED)  # what came meanwhile arrives now
    return read_fd


# The signals the watcher handles or ignores (blocked from the fork's exec until then).
HANDLED = (signals.SIGUSR1, signals.SIGTERM, signals.SIGINT, signals.SIGHUP, signals.SIGQUIT)


def _ignore(_signum: int, _frame: object) -> None:
    pass


def _drain_wake(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
