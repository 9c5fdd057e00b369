"""``Container``: one job container and the verbs of its lifecycle.

``create`` and ``delete`` live in modules of their own (``hostjob.runtime.create``,
``hostjob.runtime.delete``; ``Container.create`` and ``Container.delete`` hand over to
them): ``state``, ``start`` and ``kill`` are whole commands and load neither.

Every verb loads the container's record, asks a predicate of
``hostjob.runtime.status`` whether the move is legal, acts, and persists the
new record. Status is never stored: like runc, it is derived from the init
process (pid + start time), the ``exec.fifo`` (present until ``start``) and the
job's freezer.
"""

from __future__ import annotations

import errno
import posix
import select

from hostjob import faults, log, paths
from hostjob.errors import (
    ContainerNotFound,
    ContainerNotRunning,
    DelegateError,
    HookError,
    InvalidState,
    StateCorrupt,
)
from hostjob.runtime import proc, status

# cgroups, hooks, init, mounts and resolve are imported by the verbs that use them:
# `state`, `kill` and `start` are whole commands of their own and should not pay for
# them (`start` of a created container never asks its cgroup anything).
from hostjob.runtime.proc import sig
from hostjob.runtime.state_dir import (
    DEFAULT_ROOT,
    PHASE_CREATING,
    ExitStatus,
    Record,
    StateStore,
    validate_id,
)
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob import cgroups
    from hostjob.job import DaemonConfig, Hook, JobConfig, ProcessConfig
    from hostjob.runtime.create import CreateOptions
    from hostjob.runtime.execute import ExecOptions
    from hostjob.runtime.init import Child
    from hostjob.spec import runtime as wire
    from hostjob.spec.state import State

# ``stop``: seconds between the stop signal and SIGKILL to the whole job (podman's).
DEFAULT_STOP_TIMEOUT = 10
# ``stop`` waits at most this long, after the job ended, for the watcher to record
# the exit and leave.
WATCHER_EXIT_WAIT = 30.0

__all__ = ["Container", "Status"]


class Container:
    """A job container, identified by its ID under a state root."""

    __slots__ = ("_held", "id", "record", "store")

    def __init__(self, store: StateStore, container_id: str, record: Record | None) -> None:
        self.store = store
        self.id = container_id
        self.record = record  # None: a create that died before writing anything
        # The record file as ``load`` read it, open until the first ``reload``: a verb
        # that locks and reloads (start, delete) then reads it again only if it changed.
        self._held = -1

    def __del__(self) -> None:
        if getattr(self, "_held", -1) >= 0:
            posix.close(self._held)

    # --- loading ------------------------------------------------------------------------

    @classmethod
    def load(cls, container_id: str, *, root: str = DEFAULT_ROOT) -> Container:
        store = StateStore(root)
        record, held = store.read_held(container_id)
        if record is None:
            runtime = store.route(container_id)
            if runtime is not None:
                raise DelegateError(
                    f"container {container_id} is not a job container: {runtime} runs it"
                    f" (state root {store.delegate_root(runtime)}); the hostjob command"
                    " hands it over, the library does not"
                )
        container = cls(store, container_id, record)
        container._held = held
        return container

    @classmethod
    def load_all(cls, *, root: str = DEFAULT_ROOT) -> list[Container]:
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

    # --- status ---------------------------------------------------------------------------

    @property
    def config(self) -> JobConfig:
        if self.record is None:
            raise ContainerNotFound(self.id)
        return self.record.config

    @property
    def pid(self) -> int:
        return self.record.pid if self.record is not None else 0

    def cgroup(self) -> cgroups.Manager:
        from hostjob import cgroups

        return cgroups.open_manager(self.config.cgroups_path, mounts=self._cgroup_mounts())

    def _cgroup_mounts(self) -> cgroups.Mounts | None:
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

    @property
    def status(self) -> str:
        record = self.record
        if record is None or record.phase == PHASE_CREATING:
            # Creating while its creator holds the lock; a create that died is stopped.
            return Status.CREATING if self.store.creator_alive(self.id) else Status.STOPPED
        if not proc.is_alive(record.pid, record.start_time):
            return Status.STOPPED
        if paths.exists(self.store.fifo(self.id)):
            return Status.CREATED
        from hostjob import cgroups  # here: a created or stopped one never asks

        if cgroups.frozen(record.config.cgroups_path, self._cgroup_mounts()):
            return Status.PAUSED
        return Status.RUNNING

    def state(self) -> State:
        """The runtime-spec state, in runc's shape."""
        from hostjob.spec.state import OCI_VERSION, State

        current = self.status
        record = self.record
        job = record.config if record is not None else None
        return State(
            oci_version=job.oci_version if job else OCI_VERSION,
            id=self.id,
            pid=record.pid if record is not None and current != Status.STOPPED else 0,
            status=current,
            bundle=job.bundle if job else "",
            rootfs=job.rootfs if job else "",
            created=record.created if record is not None else "",
            annotations=job.annotations if job and job.annotations else None,
            owner="",
            mount_mode=job.mount_mode if job else None,
            mount_point=job.mount_point if job else None,
            **self._ending(),
        )

    def _ending(self) -> dict[str, Any]:
        """``state``'s fields on how the process last ended, and a daemon's restarts."""
        record = self.record
        if record is None:
            return {}
        out: dict[str, Any] = {}
        ended = record.exit
        if ended is not None:
            out["exit_code"] = ended.code
            out["exit_signal"] = proc.signal_name(ended.signal) if ended.signal else None
            out["finished_at"] = ended.finished
            out["oom_killed"] = ended.oom_killed
        daemon = record.daemon
        if daemon is not None:
            policy = daemon.restart or "no"
            if policy == "on-failure" and daemon.max_retries is not None:
                policy = f"on-failure:{daemon.max_retries}"
            out["restart_policy"] = policy
            out["restart_count"] = record.restarts or 0
            out["watcher"] = "running" if self.watcher_alive() else "gone"
        return out

    def watcher_alive(self) -> bool:
        """Whether the process that watches this ``run -d IMAGE`` container lives."""
        watcher = self.record.watcher if self.record is not None else None
        return bool(watcher) and proc.is_alive(watcher[0], watcher[1])  # type: ignore[index]

    def _hook_state(self, current: str, pid: int | None) -> dict[str, Any]:
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

    # --- create (hostjob.runtime.create) ----------------------------------------------

    @classmethod
    def create(
        cls,
        container_id: str,
        bundle: str,
        *,
        root: str = DEFAULT_ROOT,
        options: CreateOptions | None = None,
        document: object = None,
    ) -> Container:
        """Create the container: its process is set up, in its job, waiting for ``start``.
        ``document``: the bundle's config.json as ``bundle.read_config`` read it already.

        The calling process is the container process's parent until it exits (the
        CLI exits at once, so a subreaper such as containerd's shim adopts it).
        """
        from hostjob.runtime.bundle import load_bundle

        validate_id(container_id)
        job = load_bundle(bundle, container_id, document)
        container, child = cls.create_from_config(container_id, job, root=root, options=options)
        child.close()
        return container

    @classmethod
    def create_from_config(
        cls,
        container_id: str,
        job: JobConfig,
        *,
        root: str = DEFAULT_ROOT,
        options: CreateOptions | None = None,
        release_by_pipe: bool = False,
    ) -> tuple[Container, Child]:
        """``create`` from a converted config; also returns the child's handle (for
        ``run``, with ``release_by_pipe``)."""
        from hostjob.runtime.create import create_from_config

        return create_from_config(
            cls, container_id, job, root=root, options=options, release_by_pipe=release_by_pipe
        )

    def _record_change(self, *entries: list[str]) -> None:
        """Persist undo entries, in one write, before the changes they undo are made (no
        write for entries recorded already: ``mounts.plan_host``'s)."""
        assert self.record is not None
        undo = self.record.undo
        count = len(undo)
        for entry in entries:
            if entry not in undo:
                undo.append(entry)
        if len(undo) > count:
            self.store.write(self.record)

    # --- start ----------------------------------------------------------------------------

    def start(self) -> None:
        """Release the created container's process into its program."""
        with self.store.lock(self.id):
            self.reload()
            status.require_start(self.id, self.status)
            poststart = self.config.hooks_for("poststart")
            # poststart hooks run once the program runs, so then wait for its exec.
            self._release(wait_for_exec=bool(poststart))
            faults.point("start:after-release")
            try:
                posix.unlink(self.store.fifo(self.id))
            except FileNotFoundError:
                pass
        if poststart:
            self._run_poststart(poststart)

    def start_child(self, child: Child) -> None:
        """``start`` by the process that created the container with a release pipe
        and holds its handle (``run``): nothing to look up, nobody else can start it."""
        poststart = self.config.hooks_for("poststart")
        child.release()
        faults.point("start:after-release")
        if poststart:
            child.wait_exec()  # poststart hooks run once the program runs
            self._run_poststart(poststart)

    def _run_poststart(self, poststart: list[Hook]) -> None:
        from hostjob.runtime import hooks

        try:
            hooks.run_hooks("poststart", poststart, self._hook_state(Status.RUNNING, self.pid))
        except HookError:
            # runc: a failed poststart hook takes the container down with it.
            self.kill(sig.SIGKILL, all_processes=True)
            raise

    def _release(self, *, wait_for_exec: bool) -> None:
        """Write the start byte into the exec fifo, which the container process reads
        (and, if asked, wait for its exec). With no reader (ENXIO) it has gone."""
        try:
            fd = posix.open(
                self.store.fifo(self.id), posix.O_WRONLY | posix.O_NONBLOCK | posix.O_CLOEXEC
            )
        except OSError as err:
            if err.errno in (errno.ENXIO, errno.ENOENT):
                raise InvalidState("cannot start a container that has stopped") from err
            raise
        try:
            posix.write(fd, b"0")
            if wait_for_exec:
                # The process keeps its read end open until it execs (close-on-exec):
                # this returns once startContainer hooks ran and the program runs.
                poller = select.poll()
                poller.register(fd, select.POLLERR)
                poller.poll()
        finally:
            posix.close(fd)

    # --- kill -----------------------------------------------------------------------------

    def kill(self, sig: int = sig.SIGTERM, *, all_processes: bool = False) -> None:
        """Signal the init, or with ``all_processes`` every process of the job."""
        current = self.status
        if all_processes:
            if not self.owns_cgroup():
                return  # never a cgroup hostjob did not make for this container
            manager = self.cgroup()
            if current == Status.STOPPED and not manager.exists():
                return  # nothing left to signal: runc's kill --all succeeds here
            manager.kill_all(sig)
            return
        status.require_signal(self.id, current)
        record = self.record
        assert record is not None
        if not proc.signal_process(record.pid, record.start_time, sig):
            raise ContainerNotRunning(self.id)

    # --- how a process ended, stop, restart ----------------------------------------------

    def record_exit(self, wait_status: int | None, oom_killed: bool = False) -> ExitStatus:
        """Keep how the container's process ended (its wait status; None when it
        cannot be known) in the record, for ``state`` and ``list``."""
        from hostjob.units import rfc3339_nano

        ended = ExitStatus.of(wait_status, rfc3339_nano(), oom_killed)
        with self.store.lock(self.id):
            self.reload()
            record = self.record
            if record is None:
                raise ContainerNotFound(self.id)
            record.exit = ended
            self.store.write(record)
        return ended

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the container as podman does: its stop signal (``run --stop-signal``,
        else the image's ``StopSignal``, else SIGTERM) to the init, then, once the
        timeout (``run --stop-timeout``, else 10 s) has passed, SIGKILL to every
        process of the job. A restart policy ends here: the container is not
        restarted. Returns whether it was running (stopping a stopped container is
        fine: what is left of its job is ended all the same)."""
        with self.store.lock(self.id):
            self.reload()
            record = self.record
            if record is None:
                return False
            record.stop_requested = True
            self.store.write(record)
        daemon = record.daemon
        if timeout is None:
            timeout = daemon.stop_timeout if daemon is not None else DEFAULT_STOP_TIMEOUT
        deadline = _monotonic() + max(0.0, timeout)
        watcher = self._open_watcher()
        try:
            if watcher is not None:
                # Out of a back-off wait at once: it sees stop_requested and leaves.
                sig.pidfd_send_signal(watcher, sig.SIGUSR1)
            current = self.status
            running = current != Status.STOPPED
            if running:
                signum = daemon.stop_signal if daemon is not None else sig.SIGTERM
                proc.signal_process(record.pid, record.start_time, signum or sig.SIGTERM)
                if current == Status.PAUSED:
                    self.cgroup().thaw()  # a frozen process acts on no signal
                init = proc.open_pidfd(record.pid, record.start_time)
                if init is not None:
                    try:
                        proc.wait_pidfd(init, max(0.0, deadline - _monotonic()))
                    finally:
                        posix.close(init)
            self._end_job(deadline)
            if watcher is not None:
                proc.wait_pidfd(watcher, WATCHER_EXIT_WAIT)
            elif daemon is not None:
                self._stopped_without_watcher(daemon, running)
        finally:
            if watcher is not None:
                posix.close(watcher)
        return running

    def _end_job(self, deadline: float) -> None:
        """What is left of the job once the init ended: SIGTERM, then at ``deadline``
        SIGKILL."""
        if not self.owns_cgroup():
            return
        manager = self.cgroup()
        if not manager.exists():
            return
        alive = self.record is not None and proc.is_alive(self.pid, self.record.start_time)
        if manager.pids() and not alive:
            manager.kill_all(sig.SIGTERM)
        if not manager.wait_empty(max(0.0, deadline - _monotonic())):
            manager.kill_all(sig.SIGKILL)
            manager.wait_empty(5.0)

    def _stopped_without_watcher(self, daemon: DaemonConfig, running: bool) -> None:
        """Do the watcher's part when it is gone: the exit (unknown: only the init's
        parent could tell, and that was the watcher), and ``--rm``."""
        if running:
            try:
                self.record_exit(None)
            except ContainerNotFound:
                return
        if daemon.remove:
            Container.delete_by_id(self.id, root=self.store.root, force=True)

    def _open_watcher(self) -> int | None:
        """A pidfd of the container's watcher, if it lives."""
        watcher = self.record.watcher if self.record is not None else None
        if not watcher:
            return None
        return proc.open_pidfd(watcher[0], watcher[1])

    def restart(self, stdio: tuple[str, str] | None = None) -> Child:
        """Run the stopped container's process again (its watcher's restart policy):
        a new init from the same config, in the same job cgroup and rootfs, its
        output into the same FIFOs, started at once. The calling process is its
        parent. Create-time hooks do not run again; ``startContainer`` hooks do.
        Refused once ``stop`` has stopped the container."""
        from hostjob.runtime import init, resolve

        with self.store.lock(self.id):
            self.reload()
            record = self.record
            if record is None:
                raise ContainerNotFound(self.id)
            status.require_restart(self.id, self.status, record.phase, bool(record.stop_requested))
            job = record.config
            manager = self.cgroup()
            if manager.pids():  # what outlived the last init goes first
                manager.kill_all(sig.SIGKILL)
                manager.wait_empty(5.0)
            setup = init.ChildSetup(resolve.plan(job, job.process), manager.entry())
            setup.stdio = stdio
            if job.mount_mode == "bind":
                from hostjob.runtime import mounts

                setup.enter_namespace = mounts.enter_bind_namespace(job)
            setup.start_hooks = job.hooks_for("startContainer")
            setup.hook_state = self._hook_state(Status.CREATED, None)
            child = init.spawn(setup)
            record.pid = child.pid
            record.start_time = proc.start_time(child.pid) or 0
            record.restarts = (record.restarts or 0) + 1
            self.store.write(record)
        return child

    def set_watcher(self, pid: int) -> None:
        """Record the process that watches this container (its pid and start time)."""
        with self.store.lock(self.id):
            self.reload()
            record = self.record
            if record is None:
                raise ContainerNotFound(self.id)
            record.watcher = [pid, proc.start_time(pid) or 0]
            self.store.write(record)

    # --- delete (hostjob.runtime.delete) ----------------------------------------------

    @classmethod
    def delete_by_id(
        cls, container_id: str, *, root: str = DEFAULT_ROOT, force: bool = False
    ) -> None:
        """``delete`` of an ID, as runc's ``delete`` does it. With ``force``: an ID that
        is not there is fine (clients delete to be sure), and a container whose record
        is damaged is removed as far as its ID alone says (``delete.remove_damaged``)."""
        try:
            cls.load(container_id, root=root).delete(force=force)
        except ContainerNotFound:
            if not force:
                raise
        except StateCorrupt as err:
            if not force:
                raise
            from hostjob.runtime.delete import remove_damaged

            remove_damaged(StateStore(root), container_id, err)

    def delete(self, *, force: bool = False) -> None:
        """Delete a created or stopped container (any container with ``force``)."""
        from hostjob.runtime.delete import delete

        delete(self, force=force)

    def pause(self) -> None:
        """Freeze every process of the job."""
        with self.store.lock(self.id):
            self.reload()
            status.require_pause(self.id, self.status)
            self.cgroup().freeze()

    def resume(self) -> None:
        """Thaw a paused job."""
        with self.store.lock(self.id):
            self.reload()
            status.require_resume(self.id, self.status)
            self.cgroup().thaw()

    def pids(self) -> list[int]:
        """Every process of the job (the init, its children, execs, daemons)."""
        if not self.owns_cgroup():
            return []
        return self.cgroup().pids()

    def update(self, resources: wire.Resources) -> None:
        """Change the job's limits live; they are kept in the container's record."""
        from hostjob.job import merge_resources

        with self.store.lock(self.id):
            self.reload()
            status.require_signal(self.id, self.status)
            record = self.record
            assert record is not None
            merged = merge_resources(record.config.resources, resources)
            self.cgroup().update(merged)
            record.config.set_resources(merged)
            self.store.write(record)

    def stats(self) -> dict[str, Any]:
        """The job's accounting, in runc's ``events --stats`` shape."""
        if self.record is None or (self.status == Status.STOPPED and not self.cgroup().exists()):
            raise ContainerNotRunning(self.id)
        return self.cgroup().stats()

    # --- exec -----------------------------------------------------------------------------

    def exec(self, process: ProcessConfig, options: ExecOptions | None = None) -> int:
        """Run another process in the job; its exit status (0 once it runs, detached)."""
        from hostjob.runtime.execute import ExecOptions, exec_in_job

        status.require_exec(self.id, self.status)
        assert self.record is not None
        entry = self.cgroup().entry()
        return exec_in_job(self.config, self.record, entry, process, options or ExecOptions())


def _monotonic() -> float:
    import time

    return time.monotonic()
