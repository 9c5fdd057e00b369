"""An exec's way into the namespaces of a running job (a bind-mode container's mount
namespace, a pod's network, IPC and UTS that its init joined), and the init's way into
a pod's namespaces."""

from __future__ import annotations

import errno
import posix

from hostjob.boot.env import getenv
from hostjob.errors import StartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.specconv.jobconfig import PodNamespace


# Set to False (tests; or HOSTJOB_PIDFD_SETNS=0 in the environment) to join a bind-mode
# namespace the way kernels before 5.8 need: /proc/<pid>/ns/mnt, checked after the open.
PIDFD_SETNS = True

# runtime-spec types (and "mnt") -> (the file under /proc/<pid>/ns, the CLONE_NEW* flag)
_KINDS = {
    "mnt": ("mnt", 0x00020000),
    "network": ("net", 0x40000000),
    "ipc": ("ipc", 0x08000000),
    "uts": ("uts", 0x04000000),
}


def join_namespace(
    init_pid: int, start_time: int, kinds: tuple[str, ...] = ("mnt",)
) -> Callable[[], None]:
    """For an exec (in the child, as root): join the init's namespaces of ``kinds``
    (``mnt``, ``network``, ``ipc``, ``uts``).

    The init is pinned by a pidfd opened before its start time is checked, then
    ``setns(pidfd, CLONE_NEW...)`` (Linux 5.8+) joins exactly that process's
    namespaces, all at once, never those of a process that took its pid later."""

    what = "mount namespace" if kinds == ("mnt",) else "namespaces"

    def join() -> None:
        from hostjob.linux import syscalls
        from hostjob.linux.signals import pidfd_of

        pidfd = pidfd_of(init_pid)
        if pidfd is None:
            raise StartError(f"cannot join the container's {what}: its init is gone")
        try:
            _check_init(init_pid, start_time, what)
            use_pidfd = PIDFD_SETNS and getenv("HOSTJOB_PIDFD_SETNS") != "0"
            if use_pidfd:
                flags = 0
                for kind in kinds:
                    flags |= _KINDS[kind][1]
                try:
                    syscalls.setns(pidfd, flags)
                    return
                except OSError as err:
                    if err.errno != errno.EINVAL:  # EINVAL: no pidfd support in setns
                        raise StartError(
                            f"cannot join the {what} of process {init_pid}"
                            f" (setns on its pidfd): {err.strerror}"
                        ) from err
            for kind in kinds:
                _join_by_proc(init_pid, start_time, kind, what)
        finally:
            posix.close(pidfd)

    return join


def _join_by_proc(init_pid: int, start_time: int, kind: str, what: str) -> None:
    from hostjob.linux import syscalls

    name, flag = _KINDS[kind]
    path = f"/proc/{init_pid}/ns/{name}"
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError as err:
        raise StartError(f"cannot open {path}: {err.strerror}") from err
    try:
        # Checked after the open: the fd is the namespace of the process that had the
        # pid then; if that is still the init, it is the init's.
        _check_init(init_pid, start_time, what)
        try:
            syscalls.setns(fd, flag)
        except OSError as err:
            raise StartError(f"cannot join the {what} {path}: {err.strerror}") from err
    finally:
        posix.close(fd)


def join_pod(namespaces: list[PodNamespace]) -> Callable[[], None]:
    """For a job's init (in the child, as root): join the pod's namespaces at the paths
    containerd gave. Each file is opened, then checked to be the very namespace that
    ``create`` found there (st_dev, st_ino: a ``/proc/<pid>/ns`` path of a sandbox that
    died since would be another process's), and joined with its type named, so that
    the kernel refuses a file of another kind."""

    def join() -> None:
        from hostjob.linux import syscalls

        for ns in namespaces:
            try:
                fd = posix.open(ns.path, posix.O_RDONLY | posix.O_CLOEXEC)
            except OSError as err:
                raise StartError(
                    f"cannot open the pod's {ns.type} namespace {ns.path}: {err.strerror}"
                ) from err
            try:
                st = posix.fstat(fd)
                if (st.st_dev, st.st_ino) != (ns.device, ns.inode):
                    raise StartError(
                        f"the pod's {ns.type} namespace {ns.path} is no longer the one"
                        " create found there (its sandbox is gone)"
                    )
                try:
                    syscalls.setns(fd, _KINDS[ns.type][1])
                except OSError as err:
                    raise StartError(
                        f"cannot join the pod's {ns.type} namespace {ns.path}: {err.strerror}"
                    ) from err
            finally:
                posix.close(fd)

    return join


def _check_init(pid: int, start_time: int, what: str) -> None:
    from hostjob.runtime.proc import is_alive

    if not is_alive(pid, start_time):
        raise StartError(
            f"cannot join the container's {what}: process {pid} is no longer"
            " its init (it exited, or the pid was reused)"
        )
