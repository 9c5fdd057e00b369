"""Secrets as files: each ``[source, destination]`` of ``JobConfig.secrets`` becomes the
file ``destination`` of the container's view, readable by the job's user alone.

The environment is the wrong place for a secret: every process of the job's uid reads
``/proc/PID/environ`` of every other (and a shared uid is common: ``nobody``, one
service account for many jobs). A file of mode 0400 owned by the job's uid is readable
by that uid and root only; it is written into the rootfs itself -- an image container's
writable layer, below the store, which only root can reach; a bundle's rootfs, the
operator's -- at create, before any process of the container exists, and taken back at
delete (an undo entry for it and each directory made for it, recorded first).

The rootfs is the image's: a directory on the way may be a symlink (``run -> /etc``).
Every step is fd-relative from the rootfs and follows no symlink; a symlink on the way,
or a file already at the destination, is refused with one line.
"""

from __future__ import annotations

import errno
import posix
import stat

from hostjob.boot import paths
from hostjob.errors import ConfigError, MountError
from hostjob.linux import fsutil
from hostjob.runtime.sandbox.steps import exact_mode
from hostjob.runtime.sandbox.undo import REMOVE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.specconv.jobconfig import JobConfig

    Recorder = Callable[..., None]

# A secret is a key, a token, a certificate: what is read from the host is bounded.
MAX_SECRET_BYTES = 1 << 20
_WHERE = "secret"


def write_secrets(job: JobConfig, uid: int, gid: int, record: Recorder) -> None:
    """Write every secret of ``job`` into its rootfs, owned by ``uid:gid``, mode 0400."""
    base = fsutil.canonical(job.rootfs)
    anchor = fsutil.open_anchor(base)
    try:
        for source, destination in job.secrets or []:
            data = read_source(source)
            names = fsutil.parts(destination)
            _write(anchor, base, names, data, uid, gid, record)
    finally:
        posix.close(anchor)


def read_source(source: str) -> bytes:
    """The host file ``source``: a regular file of at most ``MAX_SECRET_BYTES``."""
    try:
        fd = posix.open(source, posix.O_RDONLY | posix.O_NONBLOCK | posix.O_CLOEXEC)
    except OSError as err:
        raise ConfigError(f"{source}: {err.strerror}", _WHERE) from err
    try:
        st = posix.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{source} is not a regular file", _WHERE)
        chunks: list[bytes] = []
        size = 0
        while chunk := posix.read(fd, 65536):
            size += len(chunk)
            if size > MAX_SECRET_BYTES:
                raise ConfigError(f"{source} is larger than {MAX_SECRET_BYTES} bytes", _WHERE)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        posix.close(fd)


def _write(
    anchor: int, base: str, names: list[str], data: bytes, uid: int, gid: int, record: Recorder
) -> None:
    parents, name = names[:-1], names[-1]
    where = "/" + "/".join(names)

    def made(i: int) -> None:
        record([REMOVE, paths.join(base, *parents[: i + 1])])

    try:
        # 0755 whatever the umask: a non-root job walks to its secret through them.
        parent = fsutil.make_dirs(anchor, parents, 0o755, before=made, after=exact_mode)
    except OSError as err:
        raise _refusal(where, err) from err
    try:
        # A file there already is the image's (or the operator's): never replaced, and
        # never recorded for removal. Then the new one is recorded before it is made.
        try:
            posix.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            raise _refusal(where, OSError(errno.EEXIST, "exists"))
        record([REMOVE, paths.join(base, *names)])
        flags = posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC
        try:
            fd = posix.open(name, flags, 0o400, dir_fd=parent)
        except OSError as err:
            raise _refusal(where, err) from err
        try:
            posix.fchmod(fd, 0o400)
            posix.fchown(fd, uid, gid)
            view = memoryview(data)
            while view:
                view = view[posix.write(fd, view) :]
        finally:
            posix.close(fd)
    finally:
        posix.close(parent)


def _refusal(where: str, err: OSError) -> MountError:
    if err.errno == errno.EEXIST:
        return MountError(f"secret {where}: the container's files have one of that name already")
    if err.errno in (errno.ELOOP, errno.ENOTDIR):
        return MountError(
            f"secret {where}: a directory on its way is a symlink or a file in the"
            " container's files (never followed)"
        )
    return MountError(f"secret {where}: {err.strerror}")
