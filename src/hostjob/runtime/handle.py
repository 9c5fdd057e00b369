"""``Handle``: one container as every verb sees it -- its record, its state store, its lock,
its job's cgroup, and its status, derived and never stored.

Every verb loads the handle, locks it, reloads the record, asks a predicate of
``hostjob.runtime.status`` whether the move is legal, acts, and persists the new record.
Like runc, the status comes from the init process (pid + start time), the ``exec.fifo``
(present until ``start``) and the job's freezer. The verbs (``hostjob.runtime.verbs``,
a module each) take a handle; ``hostjob.runtime.container.Container``, the public
façade, is one. Nothing here imports a verb, and no verb imports the façade.
"""

from __future__ import annotations

import posix

from hostjob import log
from hostjob.boot import paths
from hostjob.boot.env import getenv
from hostjob.errors import ContainerNotFound, ContainerNotRunning, NotAJobContainer, StateCorrupt
from hostjob.runtime import proc
from hostjob.runtime.record import PHASE_CREATING, ExitStatus, StateStore
from hostjob.runtime.state_root import DEFAULT_ROOT
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from hostjob import cgroups
    from hostjob.runtime.record import Record
    from hostjob.specconv.jobconfig import JobConfig

    H = TypeVar("H", bound="Handle")

# How long a job's other processes get between SIGTERM and SIGKILL once its init has
# ended (the job ends with its init), unless HOSTJOB_STOP_GRACE says otherwise.
DEFAULT_STOP_GRACE = 5.0


def stop_grace() -> float:
    """The grace period of a job whose init has ended (``HOSTJOB_STOP_GRACE`` seconds)."""
    value = getenv("HOSTJOB_STOP_GRACE")
    try:
        return float(value) if value else DEFAULT_STOP_GRACE
    except ValueError:
        return DEFAULT_STOP_GRACE


class Handle:
    """A container, identified by its ID under a state root, with its record (``None``:
    a create that died before writing anything)."""

    __slots__ = ("_held", "id", "record", "store")

    def __init__(
        self, store: StateStore, container_id: str, record: Record | None, held: int = -1
    ) -> None:
        self.store = store
        self.id = container_id
        self.record = record
        # The record file as ``load`` read it, open until the first ``reload``: a verb
        # that locks and reloads (start, delete) then reads it again only if it changed.
        self._held = held

    def __del__(self) -> None:
        if getattr(self, "_held", -1) >= 0:
            posix.close(self._held)

    # --- loading ------------------------------------------------------------------------

    @classmethod
    def load(cls: type[H], container_id: str, *, root: str = DEFAULT_ROOT) -> H:
        store = StateStore(root)
        record, held = store.read_held(container_id)
        if record is None:
            runtime = store.route(container_id)
            if runtime is not None:
                raise NotAJobContainer(
                    f"container {container_id} is not a job container: {runtime} runs it"
                    f" (state root {store.delegate_root(runtime)}); the hostjob command"
                    " hands it over, the library does not",
                    runtime,
                )
        return cls(store, container_id, record, held)

    @classmethod
    def load_all(cls: type[H], *, root: str = DEFAULT_ROOT) -> list[H]:
        store = StateStore(root)
        found = []
        for container_id in store.ids():
            try:
                record = store.read(container_id)
                if record is None and store.route(container_id) is not None:
                    continue  # not a job container: its own runtime lists it
                found.append(cls(store, container_id, record))
            except ContainerNotFound:
                continue  # deleted while we listed
            except StateCorrupt as err:
                # One damaged record must not hide every other container from list.
                log.warning(str(err))
                found.append(cls(store, container_id, None))
        return found

    def reload(self) -> None:
        held, self._held = self._held, -1
        if held >= 0:
            try:
                if self.store.unchanged(self.id, held):
                    return  # as read by load: nothing wrote it since
            finally:
                posix.close(held)
        self.record = self.store.read(self.id)

    # --- what every verb asks -----------------------------------------------------------

    @property
    def config(self) -> JobConfig:
        if self.record is None:
            raise ContainerNotFound(self.id)
        return self.record.config

    @property
    def pid(self) -> int:
        return self.record.pid if self.record is not None else 0

    def cgroup(self) -> cgroups.Manager:
        from hostjob.cgroups.driver import open_manager

        return open_manager(self.config.cgroups_path, mounts=self.cgroup_mounts())

    def cgroup_mounts(self) -> cgroups.Mounts | None:
        """The hierarchies as they were when the job was made (None: look them up)."""
        from hostjob import cgroups

        rows = self.record.cgroup_mounts if self.record is not None else None
        return cgroups.Mounts.from_rows(rows) if rows else None

    def owns_cgroup(self) -> bool:
        """Whether hostjob made the job's cgroup for this container (the only cgroup
        it ever signals, freezes, writes or removes)."""
        record = self.record
        if record is None:
            return False
        # A record from before this was kept owns its cgroup, as it was made then.
        return record.cgroup is None or record.cgroup == record.config.cgroups_path

    def status(self) -> str:
        """The status now: a look at the init, the exec fifo and (running) the freezer."""
        record = self.record
        if record is None or record.phase == PHASE_CREATING:
            # Creating while its creator holds the lock; a create that died is stopped.
            return Status.CREATING if self.store.creator_alive(self.id) else Status.STOPPED
        if not proc.is_alive(record.pid, record.start_time):
            return Status.STOPPED
        if paths.exists(self.store.fifo(self.id)):
            return Status.CREATED
        from hostjob import cgroups  # here: a created or stopped one never asks

        if cgroups.frozen(record.config.cgroups_path, self.cgroup_mounts()):
            return Status.PAUSED
        return Status.RUNNING

    def pids(self) -> list[int]:
        """Every process of the job (the init, its children, execs, daemons)."""
        if not self.owns_cgroup():
            return []
        return self.cgroup().pids()

    def stats(self) -> dict[str, Any]:
        """The job's accounting, in runc's ``events --stats`` shape."""
        if self.record is None or (self.status() == Status.STOPPED and not self.cgroup().exists()):
            raise ContainerNotRunning(self.id)
        return self.cgroup().stats()

    def watcher_alive(self) -> bool:
        """Whether the process that watches this ``run -d IMAGE`` container lives."""
        watcher = self.record.watcher if self.record is not None else None
        return bool(watcher) and proc.is_alive(watcher[0], watcher[1])  # type: ignore[index]

    def oom_kills(self) -> int:
        """How many OOM kills the job's cgroup has counted (0 when it cannot be read)."""
        from hostjob.errors import HostjobError

        try:
            return self.cgroup().oom_kill_count()
        except (HostjobError, OSError):
            return 0

    def hook_state(self, current: str, pid: int | None) -> dict[str, Any]:
        """The state a hook reads on its stdin."""
        job = self.config
        state: dict[str, Any] = {
            "ociVersion": job.oci_version,
            "id": self.id,
            "status": current,
            "bundle": job.bundle,
            "annotations": job.annotations or {},
        }
        if pid:
            state["pid"] = pid
        return state

    # --- changing the record ------------------------------------------------------------

    def record_change(self, *entries: list[str]) -> None:
        """Persist undo entries, in one write, before the changes they undo are made (no
        write for entries recorded already: ``sandbox.host.plan_host``'s)."""
        assert self.record is not None
        undo = self.record.undo
        count = len(undo)
        for entry in entries:
            if entry not in undo:
                undo.append(entry)
        if len(undo) > count:
            self.store.write(self.record)

    def update_record(self, change: Callable[[Record], None]) -> Record:
        """Under the container's lock: the record as it is now, changed and written."""
        with self.store.lock(self.id):
            self.reload()
            record = self.record
            if record is None:
                raise ContainerNotFound(self.id)
            change(record)
            self.store.write(record)
        return record

    def record_exit(self, wait_status: int | None, oom_killed: bool = False) -> ExitStatus:
        """Keep how the container's process ended (its wait status; None when it
        cannot be known) in the record, for ``state`` and ``list``."""
        from hostjob.units import rfc3339_nano

        ended = ExitStatus.of(wait_status, rfc3339_nano(), oom_killed)

        def change(record: Record) -> None:
            record.exit = ended

        self.update_record(change)
        return ended

    def set_watcher(self, pid: int) -> None:
        """Record the process that watches this container (its pid and start time): the
        one ``delete`` ends first, as it would restart what is killed next."""
        watcher = [pid, proc.start_time(pid) or 0]

        def change(record: Record) -> None:
            record.watcher = watcher

        self.update_record(change)
