"""The runtime's half of a launch: the fork of a container process, and waiting for its
set-up (``hostjob.runtime.launch.child`` is the other half, run in the child).

The fork and the join (``hostjob.cgroups.Entry``) avoid the kernel's RCU grace
period that a write to ``cgroup.procs`` waits for (5-24 ms, most of a ``run``):
where the job has a cgroup2 cgroup, the child is born in it by
``clone3(CLONE_INTO_CGROUP)`` (``hostjob.linux.syscalls.fork_into_cgroup``, which says
what its child may do); v1 hierarchies are joined through ``tasks``. clone3 is
used only by a single-threaded runtime (every CLI command; a library caller
with threads gets ``posix.fork()``); where it fails (no clone3 or
CLONE_INTO_CGROUP, a seccomp filter, a cgroup that cannot take a process),
``posix.fork()`` and a write to ``cgroup.procs`` do the same, slower, and report
the real error if there is one. ``HOSTJOB_NO_CLONE3=1`` forces that path (tests).

Any failure of the child before its program runs comes back over the report pipe
and ``spawn`` raises it: ``create`` reports a missing program, never a process that
exits 127.
"""

from __future__ import annotations

import errno
import posix

from hostjob.boot.env import getenv
from hostjob.errors import HostjobError, StartError
from hostjob.runtime.launch.child import ERROR, LEARNED, READY, ChildSetup, child_main
from hostjob.runtime.launch.program import DECISIONS_MAX_BYTES, decision_file, decision_request
from hostjob.runtime.proc import exit_code, read_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class Child:
    """The runtime's handle on a forked container process."""

    __slots__ = ("decisions_dir", "learned", "pid", "release_fd", "report_fd")

    def __init__(self, pid: int, report_fd: int, release_fd: int = -1) -> None:
        self.pid = pid
        self.report_fd = report_fd
        self.release_fd = release_fd  # the write end of the release pipe, if any
        # The image loader's decision the process learned, and where it is to be kept.
        self.learned: bytes | None = None
        self.decisions_dir: str | None = None

    def keep_decision(self) -> None:
        """Keep what the process learned for the next start of its program, once the
        verb that started it has succeeded (a failed one leaves nothing behind)."""
        learned, self.learned = self.learned, None
        if learned and self.decisions_dir is not None:
            from hostjob.runtime.launch import remember

            remember.keep(self.decisions_dir, learned)

    def release(self) -> None:
        """Let the process exec its program (a child created with a release pipe)."""
        fd, self.release_fd = self.release_fd, -1
        try:
            posix.write(fd, b"0")
        finally:
            posix.close(fd)

    def wait_exec(self) -> None:
        """After release: wait for the exec (pipe EOF); raise if the exec failed."""
        if self.report_fd < 0:
            return
        try:
            message = read_all(self.report_fd)
        finally:
            self.close()
        if message.startswith(ERROR):
            raise StartError(message[1:].decode(errors="replace"))

    def close(self) -> None:
        if self.report_fd >= 0:
            posix.close(self.report_fd)
            self.report_fd = -1
        if self.release_fd >= 0:  # unreleased: the process exits instead of its program
            posix.close(self.release_fd)
            self.release_fd = -1


def spawn(
    setup: ChildSetup,
    after_fork: Callable[[int], None] | None = None,
    place: Callable[[int], None] | None = None,
) -> Child:
    """Fork the container process and wait until it is set up (or failed).

    ``after_fork(pid)`` runs meanwhile in the parent (the runtime records the pid while
    the child sets itself up, on the other CPU). ``place(pid)``, before it, puts the
    child into its job from outside (systemd's scope takes a process, not a path): the
    child waits for it before its first step. If either raises, the child is killed."""
    _kept_decisions(setup)
    report_r, report_w = posix.pipe()
    release_r, release_w = posix.pipe() if setup.release_by_pipe else (-1, -1)
    placed_r, placed_w = posix.pipe() if place is not None else (-1, -1)
    pid, in_unified = _fork(setup.entry.unified)
    if pid == 0:  # the child: never returns
        posix.close(report_r)
        if placed_w >= 0:
            posix.close(placed_w)
        code = 1
        try:
            child_main(setup, report_w, release_r, in_unified, placed_r)
        except HostjobError as err:
            _report(report_w, ERROR + str(err).encode())
        except OSError as err:
            _report(report_w, ERROR + f"cannot start container process: {err}".encode())
        except BaseException as err:
            _report(report_w, ERROR + f"cannot start container process: {err!r}".encode())
        finally:
            posix._exit(code)
    posix.close(report_w)
    for fd in (release_r, placed_r):
        if fd >= 0:
            posix.close(fd)
    try:
        if place is not None:
            place(pid)
            posix.write(placed_w, b"1")
        if after_fork is not None:
            after_fork(pid)
    except BaseException:
        posix.close(report_r)
        if release_w >= 0:
            posix.close(release_w)
        from hostjob.linux import signals

        posix.kill(pid, signals.SIGKILL)
        posix.waitpid(pid, 0)
        raise
    finally:
        if placed_w >= 0:
            posix.close(placed_w)
    first = posix.read(report_r, 1)  # READY, ERROR, or nothing: the child died
    learned = None
    if first == LEARNED:
        # Sent by the child's own code, which bounds it (remember.keep checks it again).
        learned = _read_exactly(report_r, int.from_bytes(_read_exactly(report_r, 4), "little"))
        first = posix.read(report_r, 1)
    if first == READY:
        child = Child(pid, report_r, release_w)
        child.learned, child.decisions_dir = learned, setup.decisions_dir
        return child
    message = first + read_all(report_r)
    posix.close(report_r)
    if release_w >= 0:
        posix.close(release_w)
    _, status = posix.waitpid(pid, 0)
    if message.startswith(ERROR):
        raise StartError(message[1:].decode(errors="replace"))
    raise StartError(f"container process died during set-up (exit status {exit_code(status)})")


def _kept_decisions(setup: ChildSetup) -> None:
    """The file of image loader decisions kept for this process's request, for the
    child to check when its program needs the loader (``launch.recall``): read here,
    where the state root may be read, from a file this user owns that nobody else may
    write, below a directory opened without following a symlink. Its bytes only: a
    program the kernel runs as it is never parses them."""
    plan = setup.plan
    if setup.decisions_dir is None or not plan.image_loader or plan.mount_point == "/":
        return
    request = decision_request(plan)
    if request is None:
        return
    setup.decisions = b""  # none kept yet: the child sends what it learns
    flags = posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC
    try:
        dir_fd = posix.open(setup.decisions_dir, flags | posix.O_DIRECTORY)
    except OSError:
        return
    try:
        fd = posix.open(decision_file(request), flags, dir_fd=dir_fd)
    except OSError:
        return
    finally:
        posix.close(dir_fd)
    from hostjob.linux import fsutil  # create's already

    try:
        if fsutil.private(fd, DECISIONS_MAX_BYTES):
            setup.decisions = posix.read(fd, DECISIONS_MAX_BYTES)
    except OSError:
        pass
    finally:
        posix.close(fd)


def _read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes of the report pipe (fewer only if the child died meanwhile)."""
    chunks: list[bytes] = []
    while size > 0 and (chunk := posix.read(fd, min(size, 65536))):
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


# Set once clone3 or CLONE_INTO_CGROUP proved missing: later spawns go straight to fork.
_clone3_missing = False


def _fork(unified: str | None) -> tuple[int, bool]:
    """Fork the container process; (pid or 0, whether the child was born in ``unified``)."""
    global _clone3_missing
    if (
        unified is None
        or _clone3_missing
        or getenv("HOSTJOB_NO_CLONE3") == "1"
        or not _single_threaded()
    ):
        return posix.fork(), False
    from hostjob.linux import syscalls

    try:
        fd = posix.open(
            unified, posix.O_PATH | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
        )
    except OSError:
        return posix.fork(), False  # the fallback's write names the problem
    try:
        return syscalls.fork_into_cgroup(fd), True
    except OSError as err:
        # As crun does: any failure falls back to fork, whose cgroup.procs write then
        # either works (a kernel or seccomp filter without clone3) or names the problem.
        if err.errno in (errno.ENOSYS, errno.E2BIG, errno.EINVAL):
            _clone3_missing = True
        return posix.fork(), False
    finally:
        posix.close(fd)  # the child's copy is closed with every other fd


def _single_threaded() -> bool:
    """Whether this process has one thread (field 20 of /proc/self/stat)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 :].split()[17] == b"1"
    except (OSError, ValueError, IndexError):
        return False


def _report(fd: int, message: bytes) -> None:
    try:
        posix.write(fd, message)
    except OSError:
        posix.write(2, message[1:] + b"\n")
