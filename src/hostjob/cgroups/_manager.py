"""The ``Manager`` interface, and the logic the v1 and v2 managers share.

A manager handles one cgroup (``path``, e.g. ``/hostjob/<id>``) in every mounted
hierarchy. It is a plain object: constructing it touches nothing; ``create``
makes the directories and applies limits; the other verbs work on a cgroup made
earlier (by this or another hostjob process).

Joining: the container's processes enter through ``entry()`` (``hostjob.cgroups.Entry``:
born in the cgroup2 cgroup by clone3, ``tasks`` on v1) between fork and exec; any
other process can write ``b"0"`` to each of ``procs_files()`` (``add(pid)`` moves one
from outside). Ending: ``terminate(grace)`` (SIGTERM, then SIGKILL) and ``destroy()``.
"""

from __future__ import annotations

import errno
import posix
import time

from hostjob.boot import paths
from hostjob.cgroups import _fs
from hostjob.errors import CgroupError, MissingController

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hostjob.spec.resources import Resources

# Upper bounds that keep every loop finite.
_SIGNAL_ROUNDS = 100
DESTROY_TIMEOUT = 10.0

_warned: set[str] = set()


class Entry:
    """How a new process enters the job: what ``Manager.entry()`` hands the runtime
    before it forks (plain paths, computed when the manager is made).

    ``unified``: the job's directory in a cgroup2 hierarchy (a v2 host, or the unified
    hierarchy of a hybrid one), or None. The runtime starts the process there with
    ``clone3(CLONE_INTO_CGROUP)`` when it can (``hostjob.runtime.launch.spawn``): a move into a
    cgroup2 cgroup after the fact can only go through ``cgroup.procs``, which takes the
    kernel's write lock on every process's cgroup membership (``cgroup_threadgroup_rwsem``)
    and so waits for an RCU grace period, 5-24 ms. ``tasks``: the job's ``tasks`` file
    in each v1 hierarchy.
    """

    __slots__ = ("tasks", "unified")

    def __init__(self, tasks: list[str], unified: str | None) -> None:
        self.tasks = tasks
        self.unified = unified

    def __repr__(self) -> str:
        return f"Entry(tasks={self.tasks!r}, unified={self.unified!r})"

    def join(self, *, unified: bool = True) -> None:
        """Move the calling process into the job; ``unified=False`` when it was born in
        the job's cgroup2 cgroup (clone3) and only the v1 hierarchies are left.

        What the container's process runs first after the fork: one open, write and
        close per hierarchy, nothing else. On v1 the value ``0`` goes into ``tasks``,
        which moves only the calling thread -- the whole process, since a forked child
        is single-threaded -- and skips that lock (``cgroup.procs`` would take it). On
        cgroup2, ``tasks`` does not exist and ``cgroup.threads`` cannot cross a domain:
        ``cgroup.procs`` it is. Raises CgroupError naming the file.
        """
        for path in self.tasks:
            _write_zero(path)
        if unified and self.unified is not None:
            _write_zero(self.unified + "/cgroup.procs")


def _write_zero(path: str) -> None:
    try:
        fd = posix.open(path, posix.O_WRONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC)
        try:
            posix.write(fd, b"0")
        finally:
            posix.close(fd)
    except OSError as err:
        raise CgroupError(f"cannot join cgroup: writing 0 to {path}: {err.strerror}") from err


def warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        # hostjob.log pulls in json (and so re, enum): only when there is something to say.
        from hostjob import log

        log.warning(msg)


def signal_pidfd(fd: int, pid: int, sig: int) -> None:
    """Signal the process behind pidfd ``fd`` (``pid``: for the error); gone is fine."""
    from hostjob.linux import signals

    try:
        signals.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        pass
    except PermissionError as err:
        raise CgroupError(f"cannot signal process {pid}: permission denied") from err


def collect_pids(path: str, out: set[int]) -> None:
    """Every pid in the cgroup at ``path`` and its sub-cgroups."""
    try:
        data = _fs.read_path(path + "/cgroup.procs")
    except FileNotFoundError:
        return
    except OSError as err:
        if err.errno == errno.ENODEV:
            return  # removed under us
        if err.errno != errno.EOPNOTSUPP:
            raise CgroupError(f"cannot read {path}/cgroup.procs: {err.strerror}") from err
        # A threaded cgroup has no cgroup.procs to read; its threads signal their process.
        data = _fs.read_path(path + "/cgroup.threads")
    out.update(_fs.parse_pids(data))
    try:
        # cgroupfs (kernfs) counts a directory's sub-directories in its link count, as
        # ext4 and tmpfs do: 2 means no sub-cgroup, and spares listing some 30 control
        # files (every delete asks each hierarchy). 1 (btrfs: not counted) lists.
        if posix.stat(path, follow_symlinks=False).st_nlink == 2:
            return
        it = posix.scandir(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    with it:
        for entry in it:
            if entry.is_dir(follow_symlinks=False):
                collect_pids(entry.path, out)


def remove_tree(path: str) -> bool:
    """rmdir the cgroup and its sub-cgroups, deepest first; False while one is busy."""
    try:
        _fs.rmdir(path)
        return True
    except FileNotFoundError:
        return True
    except OSError as err:
        if err.errno not in (errno.EBUSY, errno.ENOTEMPTY):
            raise CgroupError(f"cannot remove cgroup {path}: {err.strerror}") from err
    try:
        with posix.scandir(path) as it:
            children = [e.path for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return True
    for child in children:
        remove_tree(child)
    try:
        _fs.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError as err:
        if err.errno not in (errno.EBUSY, errno.ENOTEMPTY):
            raise CgroupError(f"cannot remove cgroup {path}: {err.strerror}") from err
        return False
    return True


def mkdir_p(
    mountpoint: str, path: str, new_parent: Callable[[str], None] | None = None
) -> list[str]:
    """mkdir the cgroup (and missing ancestors); returns the directories made, top first.

    The common case (parent exists) is one mkdir(2). ``new_parent`` is called for
    each ancestor this call had to make.
    """
    full = mountpoint + path
    made: list[str] = []
    for attempt in range(3):
        try:
            try:
                return [full] if _fs.mkdir(full) else []
            except FileNotFoundError:
                pass
            current = mountpoint
            parts = path.strip("/").split("/")
            for i, part in enumerate(parts):
                current = f"{current}/{part}"
                if _fs.mkdir(current):
                    made.append(current)
                    if new_parent is not None and i < len(parts) - 1:
                        new_parent(current)
            return made
        except FileNotFoundError as err:
            # A deleting container removed an empty shared parent under our feet.
            if attempt == 2:
                raise CgroupError(
                    f"cannot create cgroup {full}: its parent keeps vanishing"
                ) from err
        except OSError as err:
            raise CgroupError(f"cannot create cgroup {full}: {err.strerror}") from err
    return made


def rmdirs(dirs: list[str]) -> None:
    """Best-effort removal of directories a failed create made (deepest first)."""
    for path in reversed(dirs):
        try:
            _fs.rmdir(path)
        except OSError:
            pass


class OOMWatcher:
    """Reports the job's OOM kills as they happen.

    ``wait(timeout)`` blocks up to ``timeout`` seconds and returns the number of OOM
    kills since the previous call (the first call counts from the watcher's
    creation), 0 when none happened, or None once the cgroup is gone. ``fileno()``
    is an fd to put in a poll set: readable (v1 eventfd) or POLLPRI (v2
    ``memory.events``) when something may have happened; then call ``wait(0)``.
    """

    __slots__ = ()

    def fileno(self) -> int:
        raise NotImplementedError

    def wait(self, timeout: float) -> int | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Manager:
    """One job cgroup, across every hierarchy of this host."""

    __slots__ = ("_dirs", "_procs", "path")

    version: int  # 1 or 2, set by each implementation
    # Controllers whose absence is worth a warning even when no limit needs them.
    EXPECTED: tuple[str, ...] = ()

    def __init__(self, path: str, dirs: list[_fs.Dir]) -> None:
        self.path = path
        self._dirs = dirs
        self._procs = [d.path + "/cgroup.procs" for d in dirs]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, {[d.path for d in self._dirs]})"

    def __enter__(self) -> Manager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- per version ---------------------------------------------------------------------

    def create(self, resources: Resources | None = None, *, exclusive: bool = False) -> None:
        """mkdir the cgroup in every hierarchy and apply ``resources``; idempotent
        unless ``exclusive``: then the cgroup must be new in every hierarchy, and one
        that exists raises ``CgroupExists`` (never adopted, written or removed).

        A limit whose controller the host lacks raises ``MissingController`` before
        anything is created; a directory made by a call that then fails is removed.
        """
        raise NotImplementedError

    def check(self, resources: Resources | None) -> None:
        """What ``create`` checks before it makes anything -- every limit's controller
        is there -- for a cgroup someone else makes (systemd's scope, with the init in
        it): ``MissingController`` names the first that is not."""
        raise NotImplementedError

    def update(self, resources: Resources) -> None:
        """Apply the set fields of ``resources`` to the existing cgroup, live."""
        raise NotImplementedError

    def freeze(self) -> None:
        """Stop every process of the job; returns once the kernel reports it frozen."""
        raise NotImplementedError

    def thaw(self) -> None:
        raise NotImplementedError

    def frozen(self) -> bool:
        """True if the job itself was frozen (``paused``), not merely an ancestor."""
        raise NotImplementedError

    def kill_all(self, sig: int) -> None:
        """Send ``sig`` to every process of the job, even ones forking meanwhile."""
        raise NotImplementedError

    def stats(self) -> dict[str, Any]:
        """Accounting in runc's ``events --stats`` shape (``hostjob.cgroups.stats``)."""
        raise NotImplementedError

    def oom_kill_count(self) -> int:
        """OOM kills in the job since it was created."""
        raise NotImplementedError

    def oom_watcher(self) -> OOMWatcher:
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------------------

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes ``0`` to, to join the job.

        Computed when the manager is made: no syscalls. Do not mutate the list. The
        container's own processes use ``entry()`` instead, which is faster.
        """
        return self._procs

    def entry(self) -> Entry:
        """How the container's processes enter the job (see ``hostjob.cgroups.Entry``).

        Computed from the manager's paths: no syscalls.
        """
        raise NotImplementedError

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and its threads) into the job, in every hierarchy."""
        value = str(pid)
        for d in self._dirs:
            for attempt in range(5):
                code = d.try_write("cgroup.procs", value)
                # EINVAL: a just-forked task (TASK_NEW) cannot move yet; retry as runc does.
                if code != errno.EINVAL or attempt == 4:
                    break
                time.sleep(0.03)
            if code:
                raise _fs.write_error(d.path, "cgroup.procs", value, code)

    def pids(self) -> list[int]:
        """Every process of the job, sub-cgroups included, in every hierarchy."""
        seen: set[int] = set()
        for d in self._dirs:
            collect_pids(d.path, seen)
        seen.discard(0)
        return sorted(seen)

    def dirs(self) -> list[str]:
        """The cgroup's directory in each hierarchy (whether it exists or not)."""
        return [d.path for d in self._dirs]

    def exists(self) -> bool:
        return any(paths.isdir(d.path) for d in self._dirs)

    def wait_empty(self, timeout: float, idle: Callable[[float], object] | None = None) -> bool:
        """Wait until the job has no process; False if some remain after ``timeout``.
        ``idle(seconds)`` is how to pass the time between two looks (a sleep by default;
        a watcher copies the job's output meanwhile)."""
        deadline = time.monotonic() + timeout
        delay = 0.001
        while self.pids():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            (idle or time.sleep)(min(delay, left))
            delay = min(delay * 2, 0.05)
        return True

    def terminate(self, grace: float = 5.0, idle: Callable[[float], object] | None = None) -> bool:
        """End the job: SIGTERM everyone, SIGKILL what is left after ``grace`` seconds
        (``idle``: as ``wait_empty`` takes it). The one way a job is ended once its init
        has: ``delete``, ``run``, ``stop`` and a watcher all end it here.

        True once the job is empty (False if processes outlive even SIGKILL, e.g.
        stuck in uninterruptible sleep, for 5 s).
        """
        if not self.exists() or not self.pids():
            return True
        from hostjob.linux import signals  # here: an ended job's delete never loads it

        self.kill_all(signals.SIGTERM)
        if self.wait_empty(grace, idle):
            return True
        self.kill_all(signals.SIGKILL)
        return self.wait_empty(5.0, idle)

    def destroy(self, timeout: float = DESTROY_TIMEOUT) -> None:
        """Remove the cgroup everywhere, SIGKILLing what still runs in it; idempotent.

        Sub-cgroups the job made go first. Nothing is left behind: if processes
        survive SIGKILL for ``timeout`` seconds, CgroupError says which.
        """
        busy = [d.path for d in self._dirs if not remove_tree(d.path)]
        deadline = time.monotonic() + timeout
        delay = 0.001
        while busy:
            if self.pids():
                from hostjob.linux import signals

                self.kill_all(signals.SIGKILL)
                self.wait_empty(max(0.0, min(1.0, deadline - time.monotonic())))
            busy = [path for path in busy if not remove_tree(path)]
            if not busy:
                break
            if time.monotonic() >= deadline:
                pids = self.pids()
                raise CgroupError(
                    f"cannot remove cgroup {self.path}: "
                    + (f"processes {pids[:10]} survive SIGKILL" if pids else "it stays busy")
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        self.close()

    def close(self) -> None:
        """Release the fds this manager holds (it stays usable; they reopen on demand)."""
        for d in self._dirs:
            d.close()

    # --- helpers for the implementations --------------------------------------------------

    def _check(self, res: Resources | None, available: set[str]) -> None:
        """Validate, and refuse limits whose controller is missing (before any mkdir)."""
        if res is not None:
            # Only create and update check limits: delete, kill, ps never load this.
            from hostjob.cgroups import resources as _res

            _res.validate(res, self.version)
            for controller, field in _res.requirements(res, self.version):
                if controller not in available:
                    raise MissingController(controller, field)
            for msg in _res.ignored(res, self.version):
                warn_once(msg)
            if res.devices:
                from hostjob import log

                log.debug("linux.resources.devices ignored: job containers use the host's devices")

    def _warn_missing(self, available: set[str]) -> None:
        for controller in self.EXPECTED:
            if controller not in available:
                warn_once(
                    f"cgroup controller {controller!r} is not available on this host:"
                    " its limits and accounting are skipped"
                )

    def _signal_frozen(self, sig: int) -> None:
        """Freeze, signal every process, thaw: nothing forks in between."""
        from hostjob.linux import signals

        try:
            was_frozen = self.frozen()
            if not was_frozen:
                self.freeze()
        except CgroupError:
            # No freezer, or the job would not freeze: chase forks in rounds instead.
            self._signal_rounds(sig)
            return
        try:
            self._signal_members(self.pids(), sig)
        finally:
            # A frozen process acts on SIGKILL only once thawed (v1).
            if not was_frozen or sig == signals.SIGKILL:
                self.thaw()

    def _signal_members(self, pids: list[int], sig: int) -> None:
        """Signal ``pids`` (read from the job's cgroup.procs), never a stranger.

        Between reading a pid and signalling it, the process may exit, be reaped by
        its parent outside the job and its number be given to an unrelated process.
        So each pid is pinned by a pidfd first, and signalled only if the job still
        lists it afterwards: a pid listed after its pidfd was opened is the pidfd's
        process (a live process keeps its number), or that process is dead and the
        signal goes nowhere.
        """
        from hostjob.linux.signals import pidfd_of

        fds: dict[int, int] = {}
        try:
            for pid in pids:
                if pid <= 0:  # pid 0: a process outside our pid namespace
                    continue
                fd = pidfd_of(pid)
                if fd is not None:
                    fds[pid] = fd
            if not fds:
                return
            members = set(self.pids())
            for pid, fd in fds.items():
                if pid not in members:
                    continue
                signal_pidfd(fd, pid, sig)
        finally:
            for fd in fds.values():
                posix.close(fd)

    def _signal_rounds(self, sig: int) -> None:
        """Signal every process, then any that appeared meanwhile, until none is new."""
        signalled: set[int] = set()
        for _ in range(_SIGNAL_ROUNDS):
            todo = [pid for pid in self.pids() if pid not in signalled]
            if not todo:
                return
            self._signal_members(todo, sig)
            signalled.update(todo)
