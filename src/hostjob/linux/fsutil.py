"""File-system changes inside trees that someone else can write, made fd-relative.

A container's processes (any user, racing the runtime) and other local users can
rename a directory and put a symlink in its place at any moment. Whatever the
runtime changes in such a tree — removing a writable layer, undoing what it made
in a rootfs, creating a working directory — is therefore done relative to
directory fds opened with ``O_NOFOLLOW``, walking one component at a time from a
trusted anchor, and never through a path that a symlink can redirect (the
CVE-2022-21658 pattern). A walk that meets a symlink fails (``ELOOP``). The
removal of such a tree (``rm -rf``), built on these walks, is ``hostjob.linux.fsremove``.

It also holds the file helpers every part of hostjob shares:

* **Atomic writes** (``write_atomic``, ``AtomicFile``). One rule: a file hostjob
  writes is replaced whole or not at all. The bytes go to a new temp file in the
  same directory (a random name opened ``O_CREAT | O_EXCL | O_NOFOLLOW``: a
  symlink or file planted there is never written through), which is then renamed
  over the target, so a reader sees the old file or the new one, never half of
  one, and a crash leaves at most a ``.<name>.tmp-*`` file (a failed write removes
  its own). ``durable=True`` also survives a power cut: the file is fsynced before
  the rename and its directory after it. Durable: what a user cannot rebuild by
  running the command again cheaply and what nothing else records (the image
  store's blobs, names and metadata). Not durable: the runtime's state
  (``state.json``, pid files, the bundle config copy) -- it describes processes and
  mounts that a power cut ends anyway, runc does not fsync it either, and an fsync
  there would cost milliseconds on every command.
* **Locks** (``lock_file``, ``lock_fd``, ``is_locked``, ``FileLock``): ``flock`` held on
  an open file or directory as a context manager, released when its fd is closed (by
  the kernel too, when the holder dies). They live in ``hostjob.linux.flock``, re-exported
  here: ``start`` only locks, and should not load the rest of this module.
* **Directories** (``ensure_dir``): ``mkdir -p`` whose new directories get exactly
  the mode asked, whatever the umask.

Light on purpose (``posix``, ``errno``, ``fcntl``; not ``os``, see ``hostjob.boot.paths``):
runtime commands use it.
"""

from __future__ import annotations

import errno
import posix

from hostjob.boot import paths

# Re-exported (see above).
from hostjob.linux.flock import FileLock as FileLock
from hostjob.linux.flock import is_locked as is_locked
from hostjob.linux.flock import lock_fd as lock_fd
from hostjob.linux.flock import lock_file as lock_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

# A directory below the anchor: never a symlink, never a blocking open.
DIR_FLAGS = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
# How often ``canonical`` looks again at a path whose symlinks keep being swapped.
_MAX_RETRIES = 8


def parts(path: str) -> list[str]:
    """The components of ``path`` (``.`` and empty ones dropped); ``..`` is refused."""
    out = [p for p in path.split("/") if p and p != "."]
    if ".." in out:
        raise ValueError(f"path {path!r} must not contain '..'")
    return out


def canonical(path: str) -> str:
    """``path`` (absolute) with the symlinks of its existing part resolved and the
    missing rest appended: the form in which the runtime records what it makes, so
    that undoing it later can walk every component without following anything."""
    for _ in range(_MAX_RETRIES):
        head = paths.abspath(path)
        tail: list[str] = []
        while head != "/" and not paths.lexists(head):
            head, name = paths.split(head)
            tail.append(name)
        try:
            return paths.join(paths.realpath(head), *reversed(tail))
        except OSError:
            continue  # a symlink swapped for a directory mid-way (readlink: EINVAL)
    raise OSError(errno.EBUSY, f"{path} keeps changing")


def under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies below it (plain strings, nothing resolved)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def open_anchor(path: str) -> int:
    """A directory fd for a trusted path (symlinks in it are followed: it is ours)."""
    return posix.open(path or "/", posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)


def walk(dir_fd: int, names: list[str]) -> int:
    """A new fd of the directory ``names`` below ``dir_fd``, opened one component at
    a time with ``O_NOFOLLOW``: a symlink anywhere raises ``ELOOP`` (or ``ENOTDIR``)."""
    fd, reached = walk_existing(dir_fd, names)
    if reached < len(names):
        posix.close(fd)
        raise FileNotFoundError(errno.ENOENT, posix.strerror(errno.ENOENT), names[reached])
    return fd


def walk_existing(dir_fd: int, names: list[str]) -> tuple[int, int]:
    """``walk`` as far as ``names`` exist: a new fd of the last directory reached and how
    many of ``names`` were (a symlink on the way still raises)."""
    fd = posix.dup(dir_fd)
    for i, name in enumerate(names):
        try:
            child = posix.open(name, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return fd, i
        except BaseException:
            posix.close(fd)
            raise
        posix.close(fd)
        fd = child
    return fd, len(names)


def walk_path(path: str) -> int:
    """``walk`` of an absolute path from ``/``: no component may be a symlink."""
    root = open_anchor("/")
    try:
        return walk(root, parts(path))
    finally:
        posix.close(root)


def make_dirs(
    dir_fd: int,
    names: list[str],
    mode: int = 0o755,
    before: Callable[[int], None] | None = None,
    after: Callable[[int], None] | None = None,
) -> int:
    """``mkdir -p`` of ``names`` below ``dir_fd``, fd-relative; returns the last one's fd.

    Existing components are walked with ``O_NOFOLLOW``; a missing one is made with
    ``mkdirat`` and then opened ``O_NOFOLLOW`` (so a symlink swapped in between
    fails the call instead of being followed). ``before(i)`` runs before component
    ``i`` is made (record it for undo); ``after(fd)`` with the fd of each one this
    call made (not of one that someone else made meanwhile).
    """
    fd = posix.dup(dir_fd)
    try:
        for i, name in enumerate(names):
            try:
                child = posix.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if before is not None:
                    before(i)
                made = True
                try:
                    posix.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:
                    made = False  # made meanwhile by someone else: walked like any other
                child = posix.open(name, DIR_FLAGS, dir_fd=fd)
                posix.close(fd)
                fd = child
                if made and after is not None:
                    after(fd)
                continue
            posix.close(fd)
            fd = child
    except BaseException:
        posix.close(fd)
        raise
    return fd


def unmount(path: str, flags: int, keep: int = -1) -> bool:
    """umount2 of the mount at ``path`` (absolute, canonical) if one is there; False
    when ``path`` is no mount point (or is gone), or when the mount there is the one
    whose mount id is ``keep`` (someone else's, which hostjob mounted on top of).

    Its parent directory is reached without following any symlink, the last component
    is never followed (``UMOUNT_NOFOLLOW``), and whether it is a mount point is asked
    of the directory so reached (its mount id), not of mountinfo's paths, which a
    rename on the way changes: a path swapped for a symlink cannot redirect the
    unmount to someone else's mount. Raises OSError (``ENOTDIR``/``ELOOP``: a
    symlink on the way)."""
    from hostjob.linux import syscalls

    parent, name = paths.split(path)
    if not name:
        raise OSError(errno.EINVAL, "refusing to unmount /")
    fd = walk_path(parent)
    try:
        try:
            target = posix.open(name, posix.O_PATH | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            return False
        try:
            if mount_id(target) in (mount_id(fd), keep):
                return False
        finally:
            posix.close(target)
        # The magic link /proc/self/fd/N is the directory we hold, whatever its path.
        syscalls.umount2(f"/proc/self/fd/{fd}/{name}", flags | syscalls.UMOUNT_NOFOLLOW)
        return True
    finally:
        posix.close(fd)


def mount_id(fd: int) -> int:
    """The id of the mount that holds the open file ``fd`` (from /proc/self/fdinfo):
    two directories of one device are on different mounts after a bind mount."""
    info = posix.open(f"/proc/self/fdinfo/{fd}", posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        data = posix.read(info, 4096)
    finally:
        posix.close(info)
    for line in data.split(b"\n"):
        if line.startswith(b"mnt_id:"):
            return int(line[7:])
    raise OSError(errno.ENOTSUP, f"no mnt_id in /proc/self/fdinfo/{fd}")


# --- atomic writes -----------------------------------------------------------------------

_TEMP_FLAGS = posix.O_RDWR | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC


def temp_file(folder: str, prefix: str) -> tuple[int, str]:
    """A new, empty file (0600) in ``folder`` named ``prefix`` + a random suffix, and
    its fd: ``tempfile.mkstemp`` without what importing tempfile costs (~3 ms). Opened
    ``O_EXCL | O_NOFOLLOW``: a name planted there (a symlink, a file) is skipped,
    never written through."""
    for _ in range(100):
        path = paths.join(folder, f"{prefix}{posix.urandom(6).hex()}")
        try:
            return posix.open(path, _TEMP_FLAGS, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name in {folder}")


def fsync_dir(path: str) -> None:
    """Make a directory's entries (a rename into it) survive a power cut."""
    fd = posix.open(path or ".", posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
    try:
        posix.fsync(fd)
    finally:
        posix.close(fd)


class AtomicFile:
    """A file written whole or not at all (the rule in the module docstring).

    ``with AtomicFile(path) as f: f.write(...)`` writes to a temp file next to
    ``path`` and renames it over ``path`` when the block ends; an exception in the
    block removes the temp file and leaves ``path`` as it was. ``mode`` is the
    file's exact mode (the umask does not apply). Outside a ``with`` block:
    ``open()`` (a file object) or ``open_fd()`` (the bare fd), then ``commit()`` or
    ``discard()``.
    """

    __slots__ = ("durable", "fd", "file", "mode", "path", "tmp")

    def __init__(self, path: str, *, mode: int = 0o644, durable: bool = False) -> None:
        self.path = path
        self.mode = mode
        self.durable = durable
        self.tmp = ""
        self.fd = -1
        self.file: BinaryIO | None = None

    def open_fd(self) -> int:
        folder, name = paths.split(self.path)
        self.fd, self.tmp = temp_file(folder or ".", f".{name}.tmp-")
        return self.fd

    def open(self) -> BinaryIO:
        self.file = open(self.open_fd(), "wb")  # noqa: SIM115 -- closed by commit() or discard()
        return self.file

    def commit(self) -> None:
        assert self.fd >= 0, "AtomicFile.commit() before open()"
        try:
            if self.file is not None:
                self.file.flush()
            posix.fchmod(self.fd, self.mode)
            if self.durable:
                posix.fsync(self.fd)
            self._close()
            posix.rename(self.tmp, self.path)
        except BaseException:
            self.discard()
            raise
        if self.durable:
            fsync_dir(paths.dirname(self.path))

    def _close(self) -> None:
        if self.file is not None:
            self.file.close()  # and its fd
            self.file = None
        elif self.fd >= 0:
            posix.close(self.fd)
        self.fd = -1

    def discard(self) -> None:
        self._close()
        if self.tmp:
            try:
                posix.unlink(self.tmp)
            except FileNotFoundError:
                pass

    def __enter__(self) -> BinaryIO:
        return self.open()

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


def read_fd(fd: int, limit: int) -> bytes:
    """What ``fd`` holds from its offset on, at most ``limit`` bytes, read on the bare fd
    (a file object would cost a runtime command more than the read)."""
    chunks = []
    while limit > 0:
        chunk = posix.read(fd, limit)
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def write_atomic(path: str, data: bytes, *, mode: int = 0o644, durable: bool = False) -> None:
    """Replace ``path`` by ``data``, whole or not at all (see ``AtomicFile``), written
    on the bare fd: every record write of a runtime command takes this way, and a
    file object would cost it more than the write."""
    atomic = AtomicFile(path, mode=mode, durable=durable)
    fd = atomic.open_fd()
    try:
        view = memoryview(data)
        while view:
            view = view[posix.write(fd, view) :]
    except BaseException:
        atomic.discard()
        raise
    atomic.commit()


# --- directories -------------------------------------------------------------------------


def ensure_dir(path: str, mode: int = 0o755) -> None:
    """``mkdir -p path``: each directory this call makes gets exactly ``mode`` (missing
    parents 0o755) whatever the umask -- ``os.makedirs`` gives parents ``0o777 &
    ~umask``, world-writable under a umask of 0. Existing ones are left as they are."""
    if paths.isdir(path):
        return
    parent = paths.dirname(path)
    if parent and parent != path:
        ensure_dir(parent)
    try:
        posix.mkdir(path, mode)
    except FileExistsError:
        if not paths.isdir(path):
            raise
        return
    posix.chmod(path, mode)


# --- a cache of the runtime's own, in its state root (seccomp programs, loader decisions) ----


def open_private_dir(path: str, create: bool) -> int:
    """An fd of the directory ``path``, opened without following a symlink; made first
    (0700) when ``create`` and missing."""
    if create:
        try:
            posix.mkdir(path, 0o700)
        except FileExistsError:
            pass
    flags = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
    return posix.open(path, flags)


def private(fd: int, limit: int | None = None) -> bool:
    """Whether ``fd`` is this user's, nobody else may write it (and it holds at most
    ``limit`` bytes): a file of a cache that is trusted as its writer is."""
    st = posix.fstat(fd)
    if limit is not None and st.st_size > limit:
        return False
    return st.st_uid == posix.geteuid() and not st.st_mode & 0o022


def trim_oldest(dir_fd: int, suffix: str, keep: int) -> None:
    """Remove the files of ``dir_fd`` named ``*suffix`` beyond the ``keep`` most recently
    written (a racing writer may remove one first: that is no error)."""
    names = [n for n in posix.listdir(dir_fd) if n.endswith(suffix) and not n.startswith(".")]
    if len(names) <= keep:
        return
    dated = []
    for name in names:
        try:
            dated.append((posix.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime_ns, name))
        except OSError:
            pass
    dated.sort()
    for _, name in dated[: len(dated) - keep]:
        try:
            posix.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
