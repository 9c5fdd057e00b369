"""The state directories: ``<root>/<id>/`` holds one container's state.

* ``state.json`` — the ``Record`` (written atomically, ``fsutil.write_atomic``: a
  reader never sees half a file and a crash never leaves one);
* ``exec.fifo`` — runc's start handshake, present while the container is created.

Mutating commands hold an exclusive ``flock`` on the container's directory, so
two commands on one ID are serialised while different IDs never wait for each
other; readers (``state``, ``list``) take no lock, thanks to the atomic writes.
"""

from __future__ import annotations

import errno
import posix

from hostjob.boot import jsonio, paths
from hostjob.errors import (
    ConfigError,
    ContainerExists,
    ContainerNotFound,
    InvalidArgument,
    MountError,
    PermissionDenied,
    StateCorrupt,
)
from hostjob.runtime.state_root import (
    DEFAULT_ROOT,
    DELEGATE_DIR,
    ID_CHARS,
    LOADER_CACHE_DIR,
    SECCOMP_CACHE_DIR,
    container_dir,
)
from hostjob.spec._decode import Model, boolean, integer, list_of, string, string_list

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.linux.flock import FileLock
    from hostjob.specconv.jobconfig import DaemonConfig, JobConfig

STATE_FILE = "state.json"
FIFO_NAME = "exec.fifo"
SECCOMP_NAME = "seccomp.bpf"  # linux.seccomp compiled at create, for exec
# A container that is not a job container (hostjob.runtime.delegate): its directory
# holds only ROUTE_NAME, a symlink to the real OCI runtime that runs it (and, when its
# namespaces had to change, the bundle that runtime was given); that runtime keeps its
# state under <root>/DELEGATE_DIR/<its name> (hostjob.runtime.state_root).
ROUTE_NAME = "delegate"
# A detached image container's stdout and stderr (see hostjob.supervisor.watcher), and
# the lock its watcher holds while it lives.
STDOUT_FIFO = "stdout.fifo"
STDERR_FIFO = "stderr.fifo"
WATCHER_LOCK = "watcher.lock"

# Record.phase: create has not finished / create finished (status is then derived
# from the init process, the fifo and the freezer, as runc does).
PHASE_CREATING = "creating"
PHASE_CREATED = "created"


def _job_config(value: object, path: str) -> JobConfig:
    # Imported here: `delete --force` of an unknown ID, `list -q` and the like never
    # decode a record.
    from hostjob.specconv.jobconfig import JobConfig

    config: JobConfig = JobConfig.decode(value, path)
    return config


def _daemon_config(value: object, path: str) -> DaemonConfig:
    from hostjob.specconv.jobconfig import DaemonConfig

    config: DaemonConfig = DaemonConfig.decode(value, path)
    return config


class ExitStatus(Model):
    """How a container's process ended: its exit code (128+N when killed by signal N,
    as a shell says; None when nobody could tell: its watcher had gone), the signal,
    when, and whether the job's cgroup counted an OOM kill meanwhile."""

    __slots__ = ("code", "finished", "oom_killed", "signal")
    code: int | None
    signal: int | None
    finished: str
    oom_killed: bool
    FIELDS = (
        ("exitCode", "code", integer),
        ("signal", "signal", integer),
        ("finishedAt", "finished", string),
        ("oomKilled", "oom_killed", boolean),
    )

    @classmethod
    def of(cls, wait_status: int | None, finished: str, oom_killed: bool) -> ExitStatus:
        """From a wait status (None: unknown)."""
        if wait_status is None:
            return cls(code=None, signal=None, finished=finished, oom_killed=oom_killed)
        if posix.WIFSIGNALED(wait_status):
            signum = posix.WTERMSIG(wait_status)
            return cls(code=128 + signum, signal=signum, finished=finished, oom_killed=oom_killed)
        code = posix.waitstatus_to_exitcode(wait_status)
        return cls(code=code, signal=None, finished=finished, oom_killed=oom_killed)

    @property
    def failed(self) -> bool:
        """Not a clean exit 0 (an unknown end counts as a failure)."""
        return self.code != 0


class Record(Model):
    """What hostjob remembers about a container between commands."""

    __slots__ = (
        "cgroup",
        "cgroup_mounts",
        "config",
        "created",
        "daemon",
        "exit",
        "id",
        "owner",
        "phase",
        "pid",
        "restarts",
        "start_time",
        "stop_requested",
        "systemd_scope",
        "undo",
        "watcher",
    )
    id: str
    pid: int
    start_time: int
    phase: str
    created: str
    owner: str
    config: JobConfig
    # What hostjob changed on the host, as (kind, path), undone in reverse at delete
    # (see hostjob.runtime.sandbox); recorded before each change, so a crash loses none.
    undo: list[list[str]]
    # The cgroup hostjob made for this container ("" while it has made none): the
    # only one it ever writes, signals or removes for it. Absent in older records.
    cgroup: str | None
    # Where the cgroup hierarchies were mounted when it was made (``Mounts.rows``):
    # the manager of a later command is opened from them. Absent in older records.
    cgroup_mounts: list[list[str]] | None
    # Whether the cgroup is a transient scope systemd started for the job
    # (``--systemd-cgroup``): delete stops the unit. Recorded before it is started.
    systemd_scope: bool | None
    # run -d IMAGE: how it is looked after; the watcher's [pid, start time]; how its
    # process last ended; how often the watcher restarted it; whether ``stop`` ended
    # it (no restart after that). Absent for other containers.
    daemon: DaemonConfig | None
    watcher: list[int] | None
    exit: ExitStatus | None
    restarts: int | None
    stop_requested: bool | None
    FIELDS = (
        ("id", "id", string),
        ("pid", "pid", integer),
        ("startTime", "start_time", integer),
        ("phase", "phase", string),
        ("created", "created", string),
        ("owner", "owner", string),
        ("config", "config", _job_config),
        ("undo", "undo", list_of(string_list)),
        ("cgroup", "cgroup", string),
        ("cgroupMounts", "cgroup_mounts", list_of(string_list)),
        ("systemdScope", "systemd_scope", boolean),
        ("daemon", "daemon", _daemon_config),
        ("watcher", "watcher", list_of(integer)),
        ("exit", "exit", ExitStatus.decode),
        ("restarts", "restarts", integer),
        ("stopRequested", "stop_requested", boolean),
    )


class StateStore:
    __slots__ = ("root",)

    def __init__(self, root: str = DEFAULT_ROOT) -> None:
        self.root = paths.abspath(root)

    def dir(self, container_id: str) -> str:
        return container_dir(self.root, container_id)

    def fifo(self, container_id: str) -> str:
        return paths.join(self.dir(container_id), FIFO_NAME)

    def path(self, container_id: str, name: str) -> str:
        """A file of the container's directory (``STDOUT_FIFO``, ``WATCHER_LOCK``...)."""
        return paths.join(self.dir(container_id), name)

    def _ensure_root(self) -> None:
        # 0711: nobody else may list or write it, but a container running as another
        # user can reach its own directory below it (see ``open_for_user``). Missing
        # parents get 0755 whatever the umask (os.makedirs: 0777 under a umask of 0).
        from hostjob.linux import fsutil

        try:
            fsutil.ensure_dir(self.root, 0o711)
        except PermissionError as err:
            raise PermissionDenied(
                f"cannot create the state directory {self.root}: hostjob needs root"
            ) from err
        st = posix.stat(self.root)
        if st.st_mode & 0o022:
            raise PermissionDenied(
                f"state directory {self.root} is writable by others; refusing it"
            )
        if st.st_mode & 0o777 != 0o711 and st.st_uid == posix.geteuid():
            # Exactly 0711: a root made readable (0755) would let anyone list the IDs.
            posix.chmod(self.root, 0o711)

    def open_for_user(self, container_id: str, gid: int) -> None:
        """Let a container's non-root job (of group ``gid``) reach the image rootfs
        mounted below its directory, and nobody else: the directory becomes root's, of
        the job's group, 0710. The job passes through it by its group; no other user
        passes at all; nothing in it is readable by the group (the state, config.json and
        FIFOs are 0600) and the directory cannot be listed. A shared group is shared
        here too: ``--user auto`` gives a job a gid of its own."""
        path = self.dir(container_id)
        posix.chown(path, 0, gid)
        posix.chmod(path, 0o710)

    def create(self, container_id: str) -> FileLock:
        """Make the container's directory and lock it; the ID must be new."""
        path = self.dir(container_id)
        self._ensure_root()
        try:
            posix.mkdir(path, 0o700)
        except FileExistsError as err:
            raise ContainerExists(container_id) from err
        except PermissionError as err:
            raise PermissionDenied(f"cannot create {path}: hostjob needs root") from err
        return self._lock_dir(path, container_id)

    def lock(self, container_id: str) -> FileLock:
        """Lock an existing container exclusively (waits for other commands on it)."""
        return self._lock_dir(self.dir(container_id), container_id)

    def _lock_dir(self, path: str, container_id: str) -> FileLock:
        try:
            fd = posix.open(path, posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
        except FileNotFoundError as err:
            raise ContainerNotFound(container_id) from err
        except PermissionError as err:
            raise PermissionDenied(f"cannot open {path}: hostjob needs root") from err
        from hostjob.linux.flock import lock_fd  # here: `state` and `list` never lock

        lock = lock_fd(fd)
        # The directory may have been deleted while we waited for the lock.
        if posix.fstat(fd).st_nlink == 0:
            lock.release()
            raise ContainerNotFound(container_id)
        return lock

    def lock_shared_paths(self) -> FileLock:
        """Lock the state root itself (exclusively): held while a bind-mode container
        makes or adopts the paths it may share with others, while one decides which
        of them to remove, and while ``--user auto`` picks a container's uid."""
        from hostjob.linux import fsutil

        self._ensure_root()
        return fsutil.lock_fd(
            posix.open(self.root, posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
        )

    def creator_alive(self, container_id: str) -> bool:
        """True while some command holds the container's lock (e.g. create in progress)."""
        from hostjob.linux import fsutil

        return fsutil.is_locked(self.dir(container_id))

    def owner(self, container_id: str) -> str:
        """The name of the user who owns the container (its state directory)."""
        import pwd

        try:
            uid = posix.stat(self.dir(container_id)).st_uid
            return pwd.getpwuid(uid).pw_name
        except (OSError, KeyError):
            return ""

    def route(self, container_id: str) -> str | None:
        """The real OCI runtime a container that is not a job container was handed to;
        None for a job container or an unknown ID. One ``readlink``: every runtime
        command asks it first."""
        try:
            return posix.readlink(paths.join(self.dir(container_id), ROUTE_NAME))
        except (OSError, InvalidArgument):
            return None

    def write_route(self, container_id: str, runtime: str) -> None:
        """Record that ``runtime`` (an absolute path) runs the container (its directory
        made by ``create``)."""
        posix.symlink(runtime, paths.join(self.dir(container_id), ROUTE_NAME))

    def delegate_root(self, runtime: str) -> str:
        """The state root of the real runtime ``runtime``: one of hostjob's own."""
        return paths.join(self.root, DELEGATE_DIR, paths.basename(runtime))

    def seccomp_cache(self) -> str:
        """Where compiled seccomp profiles are kept between creates (below the root that
        ``create`` made)."""
        return paths.join(self.root, SECCOMP_CACHE_DIR)

    def loader_cache(self) -> str:
        """Where the image loader's decisions are kept between starts."""
        return paths.join(self.root, LOADER_CACHE_DIR)

    def has_delegates(self) -> bool:
        return paths.isdir(paths.join(self.root, DELEGATE_DIR))

    def exists(self, container_id: str) -> bool:
        return paths.isdir(self.dir(container_id))

    def read(self, container_id: str) -> Record | None:
        """The container's record; None when the directory exists without one
        (a create that died before writing it). ContainerNotFound when unknown."""
        return self.read_held(container_id, hold=False)[0]

    def read_held(self, container_id: str, *, hold: bool = True) -> tuple[Record | None, int]:
        """``read``, and the record file's fd kept open (-1 if none or not ``hold``):
        while it is open its inode number names this version of the record, for
        ``unchanged`` (every write replaces the file; none changes it in place)."""
        path = paths.join(self.dir(container_id), STATE_FILE)
        try:
            fd = posix.open(path, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC)
        except FileNotFoundError as err:
            if self.exists(container_id):
                return None, -1
            raise ContainerNotFound(container_id) from err
        except PermissionError as err:
            raise PermissionDenied(f"cannot read {path}: hostjob needs root") from err
        try:
            chunks = []
            while chunk := posix.read(fd, 65536):
                chunks.append(chunk)
        except BaseException:
            posix.close(fd)
            raise
        if not hold:
            posix.close(fd)
            fd = -1
        data = b"".join(chunks)
        try:
            record: Record = Record.decode(jsonio.loads(data))
        except (ValueError, ConfigError) as err:  # atomic writes: tampering or disk damage
            if fd >= 0:
                posix.close(fd)
            raise StateCorrupt(container_id, str(err)) from err
        return record, fd

    def unchanged(self, container_id: str, held: int) -> bool:
        """Whether the record file is still the one open as ``held`` (``read_held``)."""
        try:
            current = posix.stat(
                paths.join(self.dir(container_id), STATE_FILE), follow_symlinks=False
            ).st_ino
            return current == posix.fstat(held).st_ino
        except OSError:
            return False

    def write(self, record: Record) -> None:
        path = paths.join(self.dir(record.id), STATE_FILE)
        from hostjob.linux import fsutil

        fsutil.write_atomic(path, jsonio.dumps(record.to_json()).encode(), mode=0o600)

    def ids(self) -> list[str]:
        try:
            names = posix.listdir(self.root)
        except FileNotFoundError:
            return []
        except PermissionError as err:
            raise PermissionDenied(f"cannot read {self.root}: hostjob needs root") from err
        return sorted(n for n in names if not n.startswith(".") and ID_CHARS.issuperset(n))

    def remove(self, container_id: str) -> None:
        """Remove the container's directory and everything hostjob put in it.

        An image container's rootfs mount below it is detached first; the removal
        itself is fd-relative and never crosses into a mount (``fsremove.remove_tree``):
        what a container wrote into its rootfs cannot redirect it."""
        path = self.dir(container_id)
        if not paths.lexists(path):
            return
        from hostjob.linux import fsremove

        if not _has_directory(path):
            # The common case needs no look at mountinfo: no mount point below.
            try:
                fsremove.remove_tree(path)
                return
            except OSError:
                pass  # a mount on one of its files after all: the careful way
        _unmount_under(path)
        fsremove.remove_tree(path)


def _has_directory(path: str) -> bool:
    """Whether the directory ``path`` holds a directory (an image container's rootfs, a
    mount point); True when it cannot be read."""
    try:
        fd = posix.open(
            path, posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
        )
    except OSError:
        return True
    try:
        with posix.scandir(fd) as entries:
            return any(entry.is_dir(follow_symlinks=False) for entry in entries)
    except OSError:
        return True
    finally:
        posix.close(fd)


def _unmount_under(path: str) -> None:
    """Detach every mount at or below ``path`` (the state root's own directory)."""
    from hostjob.linux.mountinfo import mounts_under

    real = paths.realpath(path)
    points = mounts_under(real)
    if not points:
        return
    from hostjob.linux import fsutil, syscalls

    # A lazy unmount takes the mounts below with it: only the outermost ones are
    # unmounted, each reached without following a symlink (the ones below may lie in
    # a rootfs that a container wrote).
    outermost = [p for p in points if not any(q != p and fsutil.under(p, q) for q in points)]
    for point in dict.fromkeys(outermost):
        for _ in range(16):  # stacked mounts on one point
            try:
                if not fsutil.unmount(point, syscalls.MNT_DETACH):
                    break
            except OSError as err:
                if err.errno in (errno.EINVAL, errno.ENOENT):
                    break
                raise MountError(f"cannot unmount {point}: {err.strerror}") from err


def write_pid_file(path: str, pid: int) -> None:
    """Digits only, no newline, atomically (containerd and conmon read it at once). The
    directory is the caller's: the temp file never writes through a planted symlink."""
    from hostjob.linux import fsutil

    fsutil.write_atomic(paths.abspath(path), str(pid).encode())


def remove_pid_file(path: str) -> None:
    """Take back the pid file of a create that failed after writing it."""
    try:
        posix.unlink(path)
    except FileNotFoundError:
        pass
