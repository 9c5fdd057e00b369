"""``Container``: the public façade of one job container and the verbs of its lifecycle.

A ``Container`` is a ``Handle`` (``hostjob.runtime.handle``: its record, store, lock, job
cgroup, and what every verb asks: its status, derived, its pids and ``stats``) with the
verbs on it. Each verb is a module of ``hostjob.runtime.verbs`` that takes a handle
(``create``, ``start``, ``state``, ``kill``, ``delete``, ``execute`` for ``exec``,
``pause`` for ``pause`` and ``resume``, ``update``, ``ps``, ``events``, ``restart``; and
``run``, which creates, starts and deletes); each method here is one call into its
module, imported when the method runs, so that a command loads its own verb's module
only: ``kill`` never loads ``create``. No module of the runtime imports this one.
"""

from __future__ import annotations

from hostjob.runtime.handle import Handle
from hostjob.runtime.record import StateStore
from hostjob.runtime.state_root import DEFAULT_ROOT
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
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
        from hostjob.runtime.verbs.create import create_from_bundle

        container = cls(StateStore(root), container_id, None)
        create_from_bundle(container, bundle, options=options, document=document, defaults=defaults)
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
        return container, create(container, job, options=options, release_by_pipe=release_by_pipe)

    def start(self) -> None:
        """Release the created container's process into its program."""
        from hostjob.runtime.verbs.start import start

        start(self)

    def start_child(self, child: Child) -> None:
        """``start`` by the process that created the container with a release pipe and
        holds its handle (``run``)."""
        from hostjob.runtime.verbs.start import start_child

        start_child(self, child)

    def state(self) -> State:
        """The runtime-spec state, in runc's shape."""
        from hostjob.runtime.verbs.state import state

        return state(self)

    def kill(self, signum: int | None = None, *, all_processes: bool = False) -> None:
        """Signal the init (``signum``: a number such as ``hostjob.linux.signals.SIGKILL``;
        SIGTERM by default), or with ``all_processes`` every process of the job."""
        from hostjob.runtime.verbs.kill import kill

        kill(self, signum, all_processes=all_processes)

    def pause(self) -> None:
        """Freeze every process of the job."""
        from hostjob.runtime.verbs.pause import pause

        pause(self)

    def resume(self) -> None:
        """Thaw a paused job."""
        from hostjob.runtime.verbs.pause import resume

        resume(self)

    def update(self, resources: wire.Resources) -> None:
        """Change the job's limits live; they are kept in the container's record."""
        from hostjob.runtime.verbs.update import update

        update(self, resources)

    @classmethod
    def delete_by_id(
        cls, container_id: str, *, root: str = DEFAULT_ROOT, force: bool = False
    ) -> None:
        """``delete`` of an ID, as runc's ``delete`` does it. With ``force``: an ID that
        is not there is fine (clients delete to be sure), and a container whose record
        is damaged is removed as far as its ID alone says (``delete.remove_damaged``)."""
        from hostjob.runtime.verbs.delete import delete_by_id

        delete_by_id(container_id, root=root, force=force)

    def delete(self, *, force: bool = False) -> None:
        """Delete a created or stopped container (any container with ``force``)."""
        from hostjob.runtime.verbs.delete import delete

        delete(self, force=force)

    def exec(self, process: ProcessConfig, options: ExecOptions | None = None) -> int:
        """Run another process in the job; its exit status (0 once it runs, detached)."""
        from hostjob.runtime.verbs.execute import exec_in_job

        return exec_in_job(self, process, options)

    def ps(self, ps_args: list[str]) -> str:
        """ps(1)'s table (``ps_args``: its options, e.g. ``["-ef"]``) of the job's
        processes; their pids alone are ``pids()``."""
        from hostjob.runtime.verbs.ps import ps

        return ps(self, ps_args)

    def events(self, interval: float, *, once: bool = False) -> Iterator[dict[str, Any]]:
        """The job's stats every ``interval`` seconds and each OOM kill as it happens, until
        the container stops (runc's ``events``); with ``once``, one stats event."""
        from hostjob.runtime.verbs.events import events

        return events(self, interval, once=once)

    def restart(self, stdio: tuple[str, str] | None = None) -> Child:
        """Run the stopped container's process again (a restart policy's): see
        ``hostjob.runtime.verbs.restart``. The calling process is its parent."""
        from hostjob.runtime.verbs.restart import restart

        return restart(self, stdio)
