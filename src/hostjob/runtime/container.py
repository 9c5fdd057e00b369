"""``Container``: one job container and the verbs of its lifecycle.

Every verb loads the container's record, asks a predicate of
``hostjob.runtime.status`` whether the move is legal, acts, and persists the
new record. Status is never stored: like runc, it is derived from the init
process (pid + start time), the ``exec.fifo`` (present until ``start``) and the
job's freezer.
"""

from __future__ import annotations

import errno
import os
import select

from hostjob import faults, log
from hostjob.errors import (
    CgroupExists,
    ContainerNotFound,
    ContainerNotRunning,
    DelegateError,
    HookError,
    HostjobError,
    InvalidState,
    MountError,
    StateCorrupt,
)
from hostjob.runtime import proc, status

# cgroups, hooks, init, mounts and resolve are imported by the verbs that use them:
# `state`, `kill` and `start` are whole commands of their own and should not pay for
# them (`start` of a created container never asks its cgroup anything).
from hostjob.runtime.proc import sig
from hostjob.runtime.state_dir import (
    DEFAULT_ROOT,
    PHASE_CREATED,
    PHASE_CREATING,
    STDERR_FIFO,
    STDOUT_FIFO,
    ExitStatus,
    Record,
    StateStore,
    remove_pid_file,
    validate_id,
    write_pid_file,
)
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob import cgroups
    from hostjob.job import DaemonConfig, Hook, JobConfig, ProcessConfig
    from hostjob.runtime.execute import ExecOptions
    from hostjob.runtime.init import Child
    from hostjob.runtime.mounts import RootfsProvider
    from hostjob.spec import runtime as wire
    from hostjob.spec.state import State

# How long a detached job's other processes get between SIGTERM and SIGKILL once
# its init has exited (SPEC §5), unless HOSTJOB_STOP_GRACE says otherwise.
DEFAULT_STOP_GRACE = 5.0
# ``stop``: seconds between the stop signal and SIGKILL to the whole job (podman's).
DEFAULT_STOP_TIMEOUT = 10
# ``stop`` waits at most this long, after the job ended, for the watcher to record
# the exit and leave.
WATCHER_EXIT_WAIT = 30.0

__all__ = ["Container", "Status"]


def stop_grace() -> float:
    value = os.environ.get("HOSTJOB_STOP_GRACE")
    try:
        return float(value) if value else DEFAULT_STOP_GRACE
    except ValueError:
        return DEFAULT_STOP_GRACE


class CreateOptions:
    """How ``create`` is asked to start the container process (runc's create flags).

    ``rootfs`` makes a rootfs the runtime does not own before anything is mounted
    (``hostjob run IMAGE``'s overlay; see ``hostjob.runtime.mounts.RootfsProvider``):
    the runtime records its undo entries and knows nothing else of it. Such a rootfs
    lives in the container's state directory, which is then opened (0711) to a
    non-root job user so that its processes can reach it."""

    __slots__ = (
        "bundle_config",
        "console_socket",
        "daemon",
        "pid_file",
        "preserve_fds",
        "rootfs",
        "systemd_cgroup",
    )

    def __init__(
        self,
        pid_file: str | None = None,
        console_socket: str | int | None = None,
        preserve_fds: int = 0,
        systemd_cgroup: bool = False,
        rootfs: RootfsProvider | None = None,
        bundle_config: dict[str, Any] | None = None,
        daemon: DaemonConfig | None = None,
    ) -> None:
        self.pid_file = pid_file
        self.console_socket = console_socket
        self.preserve_fds = preserve_fds
        self.systemd_cgroup = systemd_cgroup
        self.rootfs = rootfs
        self.bundle_config = bundle_config  # written as <state dir>/config.json
        # run -d IMAGE: stdout/stderr become FIFOs its watcher reads into this log
        # (``hostjob.runtime.watcher``); the record keeps it.
        self.daemon = daemon


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
            os.close(self._held)

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
                os.close(held)
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
        if os.path.exists(self.store.fifo(self.id)):
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

    # --- create ---------------------------------------------------------------------------

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
        """``create`` from a converted config; also returns the child's handle (for ``run``).

        ``release_by_pipe``: the caller starts the process itself (``start_child``),
        as ``run`` does: no exec fifo is made, and the container reads as running."""
        from hostjob import cgroups
        from hostjob.runtime import init, resolve
        from hostjob.units import rfc3339_nano

        options = options or CreateOptions()
        store = StateStore(root)
        job.cgroups_path = cgroups.resolve_path(
            job.cgroups_path, container_id, options.systemd_cgroup
        )
        if job.process.terminal and options.console_socket is None:
            raise HostjobError("cannot allocate a tty without --console-socket")
        lock = store.create(container_id)  # first: a taken ID is "already exists"
        try:
            hierarchies = cgroups.detect()
            manager = cgroups.open_manager(job.cgroups_path, mounts=hierarchies)
            _refuse_existing_cgroup(job.cgroups_path, manager)
        except BaseException:
            store.remove(container_id)  # nothing else was made
            lock.release()
            raise
        record = Record(
            id=container_id,
            pid=0,
            start_time=0,
            phase=PHASE_CREATING,
            created=rfc3339_nano(),
            owner="",
            config=job,
            undo=[],
            # Recorded before the mkdir, as undo entries are; a mkdir that finds the
            # cgroup there already clears it again (see below).
            cgroup=job.cgroups_path,
            cgroup_mounts=hierarchies.rows(),
            daemon=options.daemon,
            restarts=0 if options.daemon is not None else None,
        )
        container = cls(store, container_id, record)
        child = None
        written: list[str] = []  # the pid file, once written
        try:
            if options.rootfs is None and _host_setup_due(job):
                from hostjob.runtime import mounts

                # What the rootfs's set-up will record goes in this first write already.
                record.undo = mounts.planned_undo(job)
            # The record comes first: whatever happens below, delete --force can undo it.
            store.write(record)
            faults.point("create:after-state-dir")
            try:
                manager.create(job.resources, exclusive=True)
            except CgroupExists:
                # Made by someone else since the check above: never ours to touch.
                record.cgroup = ""
                store.write(record)
                raise
            faults.point("create:after-cgroup")
            container._prepare_rootfs(options)
            faults.point("create:after-mount")
            fifo = None
            if not release_by_pipe:
                fifo = store.fifo(container_id)
                # Only root may write the start byte (the process opens the read end as root).
                os.mkfifo(fifo, 0o600)
            plan = resolve.plan(job, job.process)
            if options.rootfs is not None and plan.user.uid != 0:
                store.open_for_user(container_id)
            setup = init.ChildSetup(plan, manager.entry())
            setup.fifo = fifo
            setup.release_by_pipe = release_by_pipe
            setup.console = options.console_socket
            listen = _listen_fds()
            setup.listen_fds = listen
            setup.extra_fds = listen + options.preserve_fds
            if job.mount_mode == "bind":
                from hostjob.runtime import mounts

                setup.enter_namespace = mounts.enter_bind_namespace(job)
            setup.start_hooks = job.hooks_for("startContainer")
            setup.hook_state = container._hook_state(Status.CREATED, None)
            if options.daemon is not None:
                setup.stdio = container._prepare_output(options.daemon)
            points = [
                p for p in ("prestart", "createRuntime", "createContainer") if job.hooks_for(p)
            ]

            pid_file = options.pid_file

            def recorded(pid: int) -> None:
                # One write while the child sets itself up: with no hooks to run it
                # is created once its set-up succeeds (a failure undoes the record).
                record.pid = pid
                record.start_time = proc.start_time(pid) or 0
                if not points:
                    record.phase = PHASE_CREATED
                store.write(record)
                # The pid file too (a client reads it once create has returned; a
                # failed create removes it again).
                if pid_file:
                    write_pid_file(pid_file, pid)
                    written.append(pid_file)

            child = init.spawn(setup, after_fork=recorded)
            faults.point("create:after-fork")
            if points:
                from hostjob.runtime import hooks

                state = container._hook_state(Status.CREATING, child.pid)
                for point in points:
                    hooks.run_hooks(point, job.hooks_for(point), state)
            faults.point("create:before-created")
            if points:
                record.phase = PHASE_CREATED
                store.write(record)
        except BaseException:
            for path in written:
                remove_pid_file(path)
            if child is not None:
                child.close()
            try:
                container._destroy(grace=0.0, run_poststop=False)
            except (HostjobError, OSError) as cleanup:
                # The create's own error is the one to report; the record stays, so
                # delete --force can finish the teardown.
                log.warning(f"cleanup after a failed create: {cleanup}")
            if child is not None:
                _reap_quietly(child.pid)
            raise
        finally:
            lock.release()
        assert child is not None
        return container, child

    def _prepare_rootfs(self, options: CreateOptions) -> None:
        job = self.config
        if options.bundle_config is not None:
            from hostjob import fsutil, jsonio

            # 0600: the directory may be opened to the job's user (open_for_user), and
            # the config holds the --env values.
            path = os.path.join(self.store.dir(self.id), "config.json")
            data = jsonio.dumps(options.bundle_config, 2) + "\n"
            fsutil.write_atomic(path, data.encode(), mode=0o600)
        if options.rootfs is not None:
            options.rootfs.prepare(self.id, job, self._record_change)
        if not os.path.isdir(job.rootfs):
            raise MountError(f"rootfs {job.rootfs} is not a directory")
        if job.mount_mode == "bind":
            from hostjob.runtime import mounts

            # Paths bind-mode containers share (/hpc, /run/secrets/...) are made,
            # adopted and removed under the state root's lock: one container's delete
            # never removes what another is just adopting.
            with self.store.lock_shared_paths():
                mounts.prepare_bind(job, self._record_change, self._adopt_shared_paths)
        elif _host_setup_due(job):
            from hostjob.runtime import mounts

            mounts.prepare_host(job, self._record_change)

    def _prepare_output(self, daemon: DaemonConfig) -> tuple[str, str]:
        """``run -d IMAGE``: the log directory (root's, 0700; removed at delete) and the
        stdout/stderr FIFOs in the state directory; returns the FIFOs' paths."""
        from hostjob import fsutil
        from hostjob.runtime.undo import REMOVE_TREE

        log_dir = daemon.log_dir
        self._record_change([REMOVE_TREE, fsutil.canonical(log_dir)])
        fsutil.ensure_dir(os.path.dirname(log_dir), 0o700)
        if os.path.lexists(log_dir):  # a leftover of an earlier container of this name
            fsutil.remove_tree(log_dir)
        os.mkdir(log_dir, 0o700)
        paths = (self.store.path(self.id, STDOUT_FIFO), self.store.path(self.id, STDERR_FIFO))
        for path in paths:
            os.mkfifo(path, 0o600)
        return paths

    def _record_change(self, *entries: list[str]) -> None:
        """Persist undo entries, in one write, before the changes they undo are made (no
        write for entries recorded already: ``mounts.planned_undo``'s)."""
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
                os.unlink(self.store.fifo(self.id))
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
            fd = os.open(self.store.fifo(self.id), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            if err.errno in (errno.ENXIO, errno.ENOENT):
                raise InvalidState("cannot start a container that has stopped") from err
            raise
        try:
            os.write(fd, b"0")
            if wait_for_exec:
                # The process keeps its read end open until it execs (close-on-exec):
                # this returns once startContainer hooks ran and the program runs.
                poller = select.poll()
                poller.register(fd, select.POLLERR)
                poller.poll()
        finally:
            os.close(fd)

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
                        os.close(init)
            self._end_job(deadline)
            if watcher is not None:
                proc.wait_pidfd(watcher, WATCHER_EXIT_WAIT)
            elif daemon is not None:
                self._stopped_without_watcher(daemon, running)
        finally:
            if watcher is not None:
                os.close(watcher)
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

    # --- delete ---------------------------------------------------------------------------

    @classmethod
    def delete_by_id(
        cls, container_id: str, *, root: str = DEFAULT_ROOT, force: bool = False
    ) -> None:
        """``delete`` of an ID, as runc's ``delete`` does it. With ``force``: an ID that
        is not there is fine (clients delete to be sure), and a container whose record
        is damaged is removed as far as its ID alone says -- its default job cgroup
        ``/hostjob/<id>`` (killing what runs there) and its state directory with any
        mount below it -- so that the ID is free again."""
        try:
            cls.load(container_id, root=root).delete(force=force)
        except ContainerNotFound:
            if not force:
                raise
        except StateCorrupt as err:
            if not force:
                raise
            from hostjob import cgroups

            store = StateStore(root)
            with store.lock(container_id):
                _remove_job_cgroup(cgroups.resolve_path("", container_id))
                store.remove(container_id)
            log.warning(f"{err}: removed its default cgroup and its state directory only")

    def delete(self, *, force: bool = False) -> None:
        """Delete a created or stopped container (any container with ``force``)."""
        with self.store.lock(self.id):
            self.reload()
            current = self.status
            status.require_delete(self.id, current, force)
            # A created container never ran its program; running ones were forced.
            grace = stop_grace() if current == Status.STOPPED else 0.0
            self._destroy(grace=grace, run_poststop=True)

    def _destroy(self, *, grace: float, run_poststop: bool) -> None:
        """Tear everything down; safe on any partial state, idempotent."""
        record = self.record
        if record is None:
            self.store.remove(self.id)
            return
        job = record.config
        if record.watcher and record.watcher[0] != os.getpid():
            _kill_watcher(record.watcher)  # first: it would restart what is killed next
        if record.pid:
            proc.signal_process(record.pid, record.start_time, sig.SIGKILL)
        faults.point("delete:after-kill")
        if self.owns_cgroup():
            from hostjob import cgroups

            path, mounts = job.cgroups_path, self._cgroup_mounts()
            # Mostly the job has ended: one rmdir a hierarchy, no manager to load.
            if mounts is None or not cgroups.remove_if_empty(path, mounts, _cgroup_top(path)):
                manager = self.cgroup()
                if grace > 0:
                    manager.terminate(grace)  # the job outlived its init: TERM, then KILL
                _remove_job_cgroup(path, manager)
        faults.point("delete:after-cgroup")
        entries = record.undo
        # A bind-mode container may share paths it made or adopted with others: which of
        # them to remove is decided, and its record goes, under the state root's lock --
        # two containers deleted at once must not each keep a path for the other.
        shared = self.store.lock_shared_paths() if job.mount_mode == "bind" and entries else None
        try:
            if shared is not None:
                entries = self._not_shared(entries)
            if entries:
                from hostjob.runtime.undo import undo

                undo(entries)
            faults.point("delete:after-unmount")
            self.store.remove(self.id)
        finally:
            if shared is not None:
                shared.release()
        poststop = job.hooks_for("poststop")
        if run_poststop and poststop and record.phase == PHASE_CREATED:
            from hostjob.runtime import hooks

            try:
                hooks.run_hooks("poststop", poststop, self._hook_state(Status.STOPPED, None))
            except HookError as err:
                log.warning(str(err))

    def _adopt_shared_paths(self, targets: list[str]) -> None:
        """Share the removal of what another container created at or above one of
        ``targets`` (canonical): whichever of them is deleted last removes it. Entries
        come before this container's own (the undo log runs newest first: children
        before their parents)."""
        from hostjob import fsutil
        from hostjob.runtime.undo import REMOVE

        assert self.record is not None
        adopted: list[list[str]] = []
        for other in Container.load_all(root=self.store.root):
            if other.id == self.id or other.record is None:
                continue
            for entry in other.record.undo:
                kind, path = entry[0], entry[1]
                if kind == REMOVE and any(fsutil.under(target, path) for target in targets):
                    adopted.append([kind, path])
        self._record_change(*adopted)  # those not recorded yet, in one write

    def _not_shared(self, entries: list[list[str]]) -> list[list[str]]:
        """The undo entries of a bind-mode container that it alone needs: not a path
        another container of this state root will remove, nor one where a mount lies at
        or below it in any mount namespace rooted at the host's ``/`` (a bind-mode job
        of another state root: removing the directory would unmount it there)."""
        from hostjob import fsutil, mountinfo
        from hostjob.runtime.undo import REMOVE

        kept = [e for e in entries if not self._used_by_others(e[1])]
        if not any(e[0] == REMOVE for e in kept):
            return kept
        points = mountinfo.points_of_host_rooted_namespaces()
        return [e for e in kept if e[0] != REMOVE or not any(fsutil.under(p, e[1]) for p in points)]

    def _used_by_others(self, path: str) -> bool:
        """Whether another bind-mode container will remove ``path`` or something below
        it (it made or adopted them): a mount point or volume target two containers
        share outlives the first. Asked under the state root's lock, as adoption is."""
        from hostjob import fsutil

        for other in Container.load_all(root=self.store.root):
            if other.id == self.id or other.record is None:
                continue
            if other.record.config.mount_mode != "bind":
                continue
            if any(fsutil.under(entry[1], path) for entry in other.record.undo):
                return True
        return False

    # --- the job: pause, resume, ps, update, stats ----------------------------------------

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


def _remove_job_cgroup(path: str, manager: cgroups.Manager | None = None) -> None:
    """Kill what is left in the job's cgroup ``path``, remove it, then the parents
    hostjob made for it once they are empty (up to ``_cgroup_top``)."""
    from hostjob import cgroups

    manager = manager or cgroups.open_manager(path)
    manager.destroy()
    cgroups.remove_empty_ancestors(manager.dirs(), path, _cgroup_top(path))


def _host_setup_due(job: JobConfig) -> bool:
    """Whether a host-mode rootfs has anything to bind, link or make read-only; else
    (containerd's default config) it is used where it is, and mounts is not loaded."""
    return job.mount_mode != "bind" and bool(job.bind_rootfs or job.volumes or job.readonly)


def _cgroup_top(path: str) -> str:
    """The highest cgroup hostjob may remove above a job's: ``/hostjob``, or for a
    ``--systemd-cgroup`` path mapped onto cgroupfs its top slice (without systemd, those
    slices exist because hostjob made them)."""
    from hostjob.cgroups import CGROUP_PARENT

    if path.endswith(".scope"):
        return "/" + path.strip("/").split("/")[0]
    return CGROUP_PARENT


def _refuse_existing_cgroup(path: str, manager: cgroups.Manager) -> None:
    """A job owns its cgroup: teardown (a failed create, delete, kill --all) kills every
    process in it and removes it. So the cgroup must be one hostjob makes for this
    container: a cgroupsPath naming one that exists already, in any hierarchy (a
    typo'd ``/system.slice``, another job's, an empty one someone prepared), is
    refused before anything is made. runc adopts an existing empty cgroup; SPEC §10
    says never."""
    found = [d for d in manager.dirs() if os.path.isdir(d)]
    if found:
        raise CgroupExists(path, found[0], manager.pids())


def _kill_watcher(watcher: list[int]) -> None:
    """SIGKILL the container's watcher, and see it gone (``delete`` leaves no process)."""
    fd = proc.open_pidfd(watcher[0], watcher[1])
    if fd is None:
        return
    try:
        sig.pidfd_send_signal(fd, sig.SIGKILL)
        proc.wait_pidfd(fd, 5.0)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


def _monotonic() -> float:
    import time

    return time.monotonic()


def _listen_fds() -> int:
    """Socket-activation fds handed to us (sd_listen_fds), passed on to the container."""
    value = os.environ.get("LISTEN_FDS", "")
    if not value.isdigit():
        return 0
    pid = os.environ.get("LISTEN_PID")
    if pid and pid != str(os.getpid()):
        return 0
    return int(value)


def _reap_quietly(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
