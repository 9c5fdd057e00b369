"""An exec's way into a bind-mode container's mount namespace."""

from __future__ import annotations

import errno
import posix

from hostjob.env import getenv
from hostjob.errors import StartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


# Set to False (tests; or HOSTJOB_PIDFD_SETNS=0 in the environment) to join a bind-mode
# namespace the way kernels before 5.8 need: /proc/<pid>/ns/mnt, checked after the open.
PIDFD_SETNS = True


def join_namespace(init_pid: int, start_time: int) -> Callable[[], None]:
    """For an exec (in the child, as root): join the init's mount namespace.

    The init is pinned by a pidfd opened before its start time is checked, then
    ``setns(pidfd, CLONE_NEWNS)`` (Linux 5.8+) joins exactly that process's
    namespace, never the one of a process that took its pid later."""

    def join() -> None:
        from hostjob import linux
        from hostjob.signals import pidfd_of

        pidfd = pidfd_of(init_pid)
        if pidfd is None:
            raise StartError("cannot join the container's mount namespace: its init is gone")
        try:
            _check_init(init_pid, start_time)
            use_pidfd = PIDFD_SETNS and getenv("HOSTJOB_PIDFD_SETNS") != "0"
            if use_pidfd:
                try:
                    linux.setns(pidfd, linux.CLONE_NEWNS)
                    return
                except OSError as err:
                    if err.errno != errno.EINVAL:  # EINVAL: no pidfd support in setns
                        raise StartError(
                            f"cannot join the mount namespace of process {init_pid}"
                            f" (setns on its pidfd): {err.strerror}"
                        ) from err
            _join_by_proc(init_pid, start_time)
        finally:
            posix.close(pidfd)

    return join


def _join_by_proc(init_pid: int, start_time: int) -> None:
    from hostjob import linux

    path = f"/proc/{init_pid}/ns/mnt"
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError as err:
        raise StartError(f"cannot open {path}: {err.strerror}") from err
    try:
        # Checked after the open: the fd is the namespace of the process that had the
        # pid then; if that is still the init, it is the init's.
        _check_init(init_pid, start_time)
        try:
            linux.setns(fd, linux.CLONE_NEWNS)
        except OSError as err:
            raise StartError(f"cannot join the mount namespace {path}: {err.strerror}") from err
    finally:
        posix.close(fd)


def _check_init(pid: int, start_time: int) -> None:
    from hostjob.runtime.proc import is_alive

    if not is_alive(pid, start_time):
        raise StartError(
            f"cannot join the container's mount namespace: process {pid} is no longer"
            " its init (it exited, or the pid was reused)"
        )
