"""``delete``: a job container's teardown -- its watcher, its process, its job cgroup,
what its create changed on the host (the record's undo log, newest first), its state
directory, then its ``poststop`` hooks (runc's ``delete``). ``delete_by_id`` is the
command's way in, from an ID; a failed ``create`` tears down the same way (``destroy``).

A module of its own, as youki keeps each verb in one: ``state``, ``start`` and ``kill``
load none of it.
"""

from __future__ import annotations

import posix

from hostjob import faults, log
from hostjob.errors import ContainerNotFound, HookError, StateCorrupt
from hostjob.linux import signals
from hostjob.runtime import proc, status
from hostjob.runtime.handle import Handle, stop_grace
from hostjob.runtime.record import PHASE_CREATED, StateStore
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob import cgroups


def delete_by_id(container_id: str, *, root: str, force: bool = False) -> None:
    """``delete`` of an ID, as runc's ``delete`` does it. With ``force``: an ID that is
    not there is fine (clients delete to be sure), and a container whose record is
    damaged is removed as far as its ID alone says (``remove_damaged``)."""
    try:
        delete(Handle.load(container_id, root=root), force=force)
    except ContainerNotFound:
        if not force:
            raise
    except StateCorrupt as err:
        if not force:
            raise
        remove_damaged(StateStore(root), container_id, err)


def remove_damaged(store: StateStore, container_id: str, err: StateCorrupt) -> None:
    """``delete --force`` of a container whose record is damaged: removed as far as its
    ID alone says -- its default job cgroup ``/hostjob/<id>`` (killing what runs there)
    and its state directory with any mount below it -- so that the ID is free again."""
    from hostjob import cgroups

    with store.lock(container_id):
        _remove_job_cgroup(cgroups.resolve_path("", container_id))
        store.remove(container_id)
    log.warning(f"{err}: removed its default cgroup and its state directory only")


def delete(container: Handle, *, force: bool = False) -> None:
    """Delete a created or stopped container (any container with ``force``)."""
    with container.store.lock(container.id):
        container.reload()
        current = container.status()
        status.require_delete(container.id, current, force)
        # A created container never ran its program; running ones were forced.
        grace = stop_grace() if current == Status.STOPPED else 0.0
        destroy(container, grace=grace, run_poststop=True)


def destroy(container: Handle, *, grace: float, run_poststop: bool) -> None:
    """Tear everything down; safe on any partial state, idempotent."""
    record = container.record
    store = container.store
    if record is None:
        store.remove(container.id)
        return
    job = record.config
    if record.watcher and record.watcher[0] != posix.getpid():
        _kill_watcher(record.watcher)  # first: it would restart what is killed next
    if record.pid:
        proc.signal_process(record.pid, record.start_time, signals.SIGKILL)
    faults.point("delete:after-kill")
    if container.owns_cgroup() and record.systemd_scope:
        _end_scope(container, grace)
    elif container.owns_cgroup():
        from hostjob import cgroups

        path, mounts = job.cgroups_path, container.cgroup_mounts()
        # Mostly the job has ended: one rmdir a hierarchy, no manager to load.
        if mounts is None or not cgroups.remove_if_empty(path, mounts, _cgroup_top(path)):
            manager = container.cgroup()
            if grace > 0:
                manager.terminate(grace)  # the job outlived its init: TERM, then KILL
            _remove_job_cgroup(path, manager)
    faults.point("delete:after-cgroup")
    entries = record.undo
    # A bind-mode container may share paths it made or adopted with others: which of
    # them to remove is decided, and its record goes, under the state root's lock --
    # two containers deleted at once must not each keep a path for the other.
    shared = store.lock_shared_paths() if job.mount_mode == "bind" and entries else None
    try:
        if shared is not None:
            entries = _not_shared(container, entries)
        if entries:
            from hostjob.runtime.sandbox.undo import undo

            undo(entries)
        faults.point("delete:after-unmount")
        store.remove(container.id)
    finally:
        if shared is not None:
            shared.release()
    poststop = job.hooks_for("poststop")
    if run_poststop and poststop and record.phase == PHASE_CREATED:
        from hostjob.runtime.launch import hooks

        try:
            hooks.run_hooks("poststop", poststop, container.hook_state(Status.STOPPED, None))
        except HookError as err:
            log.warning(str(err))


def _not_shared(container: Handle, entries: list[list[str]]) -> list[list[str]]:
    """The undo entries of a bind-mode container that it alone needs: not a path
    another container of this state root will remove, nor one where a mount lies at
    or below it in any mount namespace rooted at the host's ``/`` (a bind-mode job
    of another state root: removing the directory would unmount it there)."""
    from hostjob.linux import fsutil, mountinfo
    from hostjob.runtime.sandbox.undo import REMOVE

    kept = [e for e in entries if not _used_by_others(container, e[1])]
    if not any(e[0] == REMOVE for e in kept):
        return kept
    points = mountinfo.points_of_host_rooted_namespaces()
    return [e for e in kept if e[0] != REMOVE or not any(fsutil.under(p, e[1]) for p in points)]


def _used_by_others(container: Handle, path: str) -> bool:
    """Whether another bind-mode container will remove ``path`` or something below
    it (it made or adopted them): a mount point or volume target two containers
    share outlives the first. Asked under the state root's lock, as adoption is."""
    from hostjob.linux import fsutil

    for other in Handle.load_all(root=container.store.root):
        if other.id == container.id or other.record is None:
            continue
        if other.record.config.mount_mode != "bind":
            continue
        if any(fsutil.under(entry[1], path) for entry in other.record.undo):
            return True
    return False


def _end_scope(container: Handle, grace: float) -> None:
    """The systemd driver's teardown: what is left of the job ends as any job's does,
    then systemd stops the scope (its cgroup goes with it) and forgets it. Never a slice:
    those are systemd's."""
    from hostjob.cgroups import systemd

    manager = container.cgroup()
    if grace > 0:
        manager.terminate(grace)
    if manager.exists():
        manager.kill_all(signals.SIGKILL)
        manager.wait_empty(5.0)
    systemd.stop(container.config.cgroups_path)
    if manager.exists():  # a scope systemd no longer knew (stopped meanwhile, a crash)
        manager.destroy()


def _remove_job_cgroup(path: str, manager: cgroups.Manager | None = None) -> None:
    """Kill what is left in the job's cgroup ``path``, remove it, then the parents
    hostjob made for it once they are empty (up to ``_cgroup_top``)."""
    from hostjob import cgroups
    from hostjob.cgroups.driver import open_manager

    manager = manager or open_manager(path)
    manager.destroy()
    cgroups.remove_empty_ancestors(manager.dirs(), path, _cgroup_top(path))


def _cgroup_top(path: str) -> str:
    """The highest cgroup hostjob may remove above a job's: ``/hostjob``, or for a
    ``--systemd-cgroup`` path mapped onto cgroupfs its top slice (without systemd, those
    slices exist because hostjob made them)."""
    from hostjob.cgroups import CGROUP_PARENT

    if path.endswith(".scope"):
        return "/" + path.strip("/").split("/")[0]
    return CGROUP_PARENT


def _kill_watcher(watcher: list[int]) -> None:
    """SIGKILL the container's watcher, and see it gone (``delete`` leaves no process)."""
    fd = proc.open_pidfd(watcher[0], watcher[1])
    if fd is None:
        return
    try:
        signals.pidfd_send_signal(fd, signals.SIGKILL)
        proc.wait_pidfd(fd, 5.0)
    except ProcessLookupError:
        pass
    finally:
        posix.close(fd)
