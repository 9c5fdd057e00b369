"""``Container``: the public façade of one job container and the verbs of its lifecycle.

A ``Container`` is a ``Handle`` (``hostjob.runtime.handle``: its record, store, lock, job
cgroup and derived status) with the verbs on it. The small verbs -- ``state``, ``start``,
``kill``, ``pause``, ``resume``, ``update``, ``stats`` -- are here, and ``start`` in
``hostjob.runtime.start`` (``run`` shares it); the verbs with work of their own hand
over to their module in ``hostjob.runtime.verbs`` (``create``, ``delete``, ``exec``,
``restart``), which a command loads only when it runs that verb: ``state``, ``start`` and
``kill`` are whole commands of their own and load none of them. No module of the runtime
imports this one.
"""

from __future__ import annotations

from hostjob.errors import ContainerNotFound, ContainerNotRunning, StateCorrupt
from hostjob.runtime import proc, status
from hostjob.runtime.handle import Handle
from hostjob.runtime.record import StateStore
from hostjob.runtime.state_root import DEFAULT_ROOT, validate_id
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.runtime.launch.spawn import Child
    from hostjob.runtime.verbs.create import CreateOptions
    from hostjob.runtime.verbs.execute import ExecOptions
    from hostjob.spec import resources as wire
    from hostjob.spec.state import State
    from hostjob.specconv.jobconfig import JobConfig, ProcessConfig

__all__ = ["Container", "Status"]


class Container(Handle):
    """A job container, identified by its ID under a state root."""

    __slots__ = ()

    # --- state ----------------------------------------------------------------------------

    def state(self) -> State:
        """The runtime-spec state, in runc's shape."""
        from hostjob.spec.state import OCI_VERSION, State

        current = self.status()
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
            out["exit_signal"] = _signal_name(ended.signal) if ended.signal else None
            out["finished_at"] = ended.finished
            out["oom_killed"] = ended.oom_killed
        daemon = record.daemon
        if daemon is not None:
            out["restart_policy"] = daemon.restart_text()
            out["restart_count"] = record.restarts or 0
            out["watcher"] = "running" if self.watcher_alive() else "gone"
        return out

    # --- create (hostjob.runtime.verbs.create) ----------------------------------------

    @classmethod
    def create(
        cls,
        container_id: str,
        bundle: str,
        *,
        root: str = DEFAULT_ROOT,
        options: CreateOptions | None = None,
        document: object = None,
        defaults: dict[str, str] | None = None,
    ) -> Container:
        """Create the container: its process is set up, in its job, waiting for ``start``.
        ``document``: the bundle's config.json as ``bundle.read_config`` read it already;
        ``defaults``: the operator's for what its annotations do not say (by annotation:
        ``hostjob.specconv.convert.DEFAULT_FLAGS``).

        The calling process is the container process's parent until it exits (the
        CLI exits at once, so a subreaper such as containerd's shim adopts it).
        """
        from hostjob.runtime.bundle import load_bundle

        validate_id(container_id)
        job = load_bundle(bundle, container_id, document, defaults)
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
        ``run``, with ``release_by_pipe``: the caller starts it, ``start_child``)."""
        from hostjob.runtime.verbs.create import create

        container = cls(StateStore(root), container_id, None)
        child = create(container, job, options=options, release_by_pipe=release_by_pipe)
        return container, child

    # --- start (hostjob.runtime.start) ---------------------------------------------------

    def start(self) -> None:
        """Release the created container's process into its program."""
        from hostjob.runtime.start import start

        start(self)

    def start_child(self, child: Child) -> None:
        """``start`` by the process that created the container with a release pipe and
        holds its handle (``run``)."""
        from hostjob.runtime.start import start_child

        start_child(self, child)

    # --- kill, pause, resume --------------------------------------------------------------

    def kill(self, signum: int | None = None, *, all_processes: bool = False) -> None:
        """Signal the init (``signum``: a number such as ``hostjob.linux.signals.SIGKILL``;
        SIGTERM by default), or with ``all_processes`` every process of the job."""
        if signum is None:
            from hostjob.linux import signals

            signum = int(signals.SIGTERM)
        current = self.status()
        if all_processes:
            if not self.owns_cgroup():
                return  # never a cgroup hostjob did not make for this container
            manager = self.cgroup()
            if current == Status.STOPPED and not manager.exists():
                return  # nothing left to signal: runc's kill --all succeeds here
            manager.kill_all(signum)
            return
        status.require_signal(self.id, current)
        record = self.record
        assert record is not None
        if not proc.signal_process(record.pid, record.start_time, signum):
            raise ContainerNotRunning(self.id)

    def pause(self) -> None:
        """Freeze every process of the job."""
        with self.store.lock(self.id):
            self.reload()
            status.require_pause(self.id, self.status())
            self.cgroup().freeze()

    def resume(self) -> None:
        """Thaw a paused job."""
        with self.store.lock(self.id):
            self.reload()
            status.require_resume(self.id, self.status())
            self.cgroup().thaw()

    # --- delete (hostjob.runtime.verbs.delete) ----------------------------------------

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
            from hostjob.runtime.verbs.delete import remove_damaged

            remove_damaged(StateStore(root), container_id, err)

    def delete(self, *, force: bool = False) -> None:
        """Delete a created or stopped container (any container with ``force``)."""
        from hostjob.runtime.verbs.delete import delete

        delete(self, force=force)

    # --- the job --------------------------------------------------------------------------

    def update(self, resources: wire.Resources) -> None:
        """Change the job's limits live; they are kept in the container's record."""
        from hostjob.specconv.jobconfig import merge_resources

        with self.store.lock(self.id):
            self.reload()
            status.require_signal(self.id, self.status())
            record = self.record
            assert record is not None
            merged = merge_resources(record.config.resources, resources)
            rest: wire.Resources | None = merged
            if record.systemd_scope:  # what systemd has properties for, it sets
                from hostjob.cgroups import systemd

                rest = systemd.set_properties(record.config.cgroups_path, resources)
            if rest is not None and rest.to_json():
                self.cgroup().update(rest)
            record.config.set_resources(merged)
            self.store.write(record)

    # --- exec, restart --------------------------------------------------------------------

    def exec(self, process: ProcessConfig, options: ExecOptions | None = None) -> int:
        """Run another process in the job; its exit status (0 once it runs, detached)."""
        from hostjob.runtime.verbs.execute import ExecOptions, exec_in_job

        return exec_in_job(self, process, options or ExecOptions())

    def restart(self, stdio: tuple[str, str] | None = None) -> Child:
        """Run the stopped container's process again (a restart policy's): see
        ``hostjob.runtime.verbs.restart``. The calling process is its parent."""
        from hostjob.runtime.verbs.restart import restart

        return restart(self, stdio)


def _signal_name(number: int) -> str:
    from hostjob.linux.signals import signal_name

    return signal_name(number)
