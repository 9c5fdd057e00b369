"""``create``: a job container's record, job cgroup, rootfs set-up and process, the
process set up in its job and waiting for ``start`` (runc's ``create``; ``run`` shares
it). ``Container.create`` and ``Container.create_from_config`` hand the new container's
handle here.

A module of its own, as youki keeps its builders apart from the container: the other
verbs (``state``, ``start``, ``kill``, ``delete``) are whole commands of their own and
load none of it.
"""

from __future__ import annotations

import posix

from hostjob import faults, log
from hostjob.boot import paths
from hostjob.boot.env import getenv
from hostjob.errors import CgroupExists, HostjobError, MountError
from hostjob.runtime import proc
from hostjob.runtime.handle import Handle
from hostjob.runtime.record import (
    PHASE_CREATED,
    PHASE_CREATING,
    SECCOMP_NAME,
    STDERR_FIFO,
    STDOUT_FIFO,
    Record,
    remove_pid_file,
    write_pid_file,
)
from hostjob.runtime.status import Status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hostjob import cgroups
    from hostjob.runtime.launch.plan import Credentials
    from hostjob.runtime.launch.spawn import Child
    from hostjob.runtime.sandbox.host import HostPlan
    from hostjob.runtime.sandbox.provider import RootfsProvider
    from hostjob.specconv.jobconfig import DaemonConfig, JobConfig

    Placer = Callable[[int], None]


class CreateOptions:
    """How ``create`` is asked to start the container process (runc's create flags).

    ``rootfs`` makes a rootfs the runtime does not own before anything is mounted
    (``hostjob run IMAGE``'s overlay; see ``hostjob.runtime.sandbox.provider``):
    the runtime records its undo entries and knows nothing else of it. Such a rootfs
    lives in the container's state directory, which is then opened (0711) to a
    non-root job user so that its processes can reach it."""

    __slots__ = (
        "auto_user_range",
        "bundle_config",
        "console_socket",
        "daemon",
        "pid_file",
        "pidfd_socket",
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
        auto_user_range: str | None = None,
        pidfd_socket: str | None = None,
    ) -> None:
        self.pid_file = pid_file
        self.pidfd_socket = pidfd_socket  # receives a pidfd of the process (runc 1.2's flag)
        self.console_socket = console_socket
        self.preserve_fds = preserve_fds
        self.systemd_cgroup = systemd_cgroup
        self.rootfs = rootfs
        self.bundle_config = bundle_config  # written as <state dir>/config.json
        # run -d IMAGE: stdout/stderr become FIFOs its watcher reads into this log
        # (``hostjob.supervisor.watcher``); the record keeps it.
        self.daemon = daemon
        # --user auto: FIRST-LAST (the global --auto-user-range); None: the
        # environment's default, else the built-in one (``hostjob.runtime.users``).
        self.auto_user_range = auto_user_range


def create(
    container: Handle,
    job: JobConfig,
    *,
    options: CreateOptions | None = None,
    release_by_pipe: bool = False,
) -> Child:
    """Create ``container`` (a handle with no record yet) from a converted config; the
    child's handle (for ``run``).

    ``release_by_pipe``: the caller starts the process itself (``start_child``),
    as ``run`` does: no exec fifo is made, and the container reads as running."""
    from hostjob import cgroups
    from hostjob.cgroups.driver import open_manager
    from hostjob.runtime.launch import plan as launch_plan
    from hostjob.runtime.launch.child import ChildSetup
    from hostjob.runtime.launch.spawn import spawn
    from hostjob.units import rfc3339_nano

    options = options or CreateOptions()
    store, container_id = container.store, container.id
    given = job.cgroups_path
    job.cgroups_path = cgroups.resolve_path(given, container_id, options.systemd_cgroup)
    if not given and not options.systemd_cgroup and paths.isdir("/run/systemd/system"):
        job.cgroups_path = _under_the_unit(container_id) or job.cgroups_path
    if job.process.terminal and options.console_socket is None:
        raise HostjobError("cannot allocate a tty without --console-socket")
    span = None
    if job.auto_user:
        from hostjob.runtime import users

        span = users.configured_range(options.auto_user_range)  # a bad range: nothing made
    lock = store.create(container_id)  # first: a taken ID is "already exists"
    try:
        hierarchies = cgroups.detect()
        manager = open_manager(job.cgroups_path, mounts=hierarchies)
        _refuse_existing_cgroup(job.cgroups_path, manager)
        scope = options.systemd_cgroup and _systemd_scope(hierarchies.version)
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
        systemd_scope=scope or None,
        daemon=options.daemon,
        restarts=0 if options.daemon is not None else None,
    )
    container.record = record
    host_plan = None
    child = None
    written: list[str] = []  # the pid file, once written
    try:
        if options.rootfs is None and _host_setup_due(job):
            from hostjob.runtime.sandbox.host import plan_host

            # What the rootfs's set-up will record goes in this first write already.
            host_plan = plan_host(job)
            if host_plan is not None:
                record.undo = list(host_plan.undo)
        # The record comes first: whatever happens below, delete --force can undo it.
        if span is None:
            store.write(record)
        else:
            _allocate_user(container, span)
        faults.point("create:after-state-dir")
        try:
            if scope:  # systemd makes the cgroup when it starts the scope, the init in it
                manager.check(job.resources)
            else:
                manager.create(job.resources, exclusive=True)
        except CgroupExists:
            # Made by someone else since the check above: never ours to touch.
            record.cgroup = ""
            store.write(record)
            raise
        faults.point("create:after-cgroup")
        compiled = None
        if job.seccomp is not None:
            from hostjob.seccomp import cache

            compiled = cache.compiled(store.seccomp_cache(), job.seccomp)
        plan = launch_plan.plan(job, job.process, compiled.program if compiled else None)
        if plan.user.uid != 0 and not job.auto_user:
            from hostjob.runtime import users

            users.warn_if_shared(store, container_id, plan.user.uid)
        _prepare_rootfs(container, options, host_plan, plan.user)
        faults.point("create:after-mount")
        fifo = None
        if not release_by_pipe:
            fifo = store.fifo(container_id)
            # Only root may write the start byte (the process opens the read end as root).
            posix.mkfifo(fifo, 0o600)
        if plan.seccomp is not None:
            from hostjob.seccomp import bpf

            bpf.save(plan.seccomp, store.path(container_id, SECCOMP_NAME))
        if options.rootfs is not None and plan.user.uid != 0:
            store.open_for_user(container_id)
        setup = ChildSetup(plan, cgroups.Entry([], None) if scope else manager.entry())
        setup.fifo = fifo
        setup.release_by_pipe = release_by_pipe
        setup.console = options.console_socket
        setup.pidfd_socket = options.pidfd_socket
        listen = listen_fds()
        setup.listen_fds = listen
        setup.extra_fds = listen + options.preserve_fds
        if job.mount_mode == "bind":
            from hostjob.runtime.sandbox.namespace import enter_bind_namespace

            setup.enter_namespace = enter_bind_namespace(job)
        if job.pod_namespaces:
            from hostjob.runtime.sandbox.join import join_pod

            setup.join_pod = join_pod(job.pod_namespaces)
        setup.start_hooks = job.hooks_for("startContainer")
        setup.hook_state = container.hook_state(Status.CREATED, None)
        if options.daemon is not None:
            setup.stdio = _prepare_output(container, options.daemon)
        points = [p for p in ("prestart", "createRuntime", "createContainer") if job.hooks_for(p)]

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

        place = _scope_placer(container_id, job, manager) if scope else None
        child = spawn(setup, after_fork=recorded, place=place)
        faults.point("create:after-fork")
        if points:
            from hostjob.runtime.launch import hooks

            state = container.hook_state(Status.CREATING, child.pid)
            for point in points:
                hooks.run_hooks(point, job.hooks_for(point), state)
        faults.point("create:before-created")
        if points:
            record.phase = PHASE_CREATED
            store.write(record)
        if compiled is not None:
            compiled.keep()  # for the next create with this profile
    except BaseException:
        for path in written:
            remove_pid_file(path)
        if child is not None:
            child.close()
        try:
            from hostjob.runtime.verbs.delete import destroy

            destroy(container, grace=0.0, run_poststop=False)
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
    return child


def _allocate_user(container: Handle, span: tuple[int, int]) -> None:
    """``--user auto``: a uid (and the same gid) of the container's own, no groups. Picked
    under the state root's lock with every other record read, and recorded before the
    lock goes: the record holds it until delete removes the record."""
    from hostjob.runtime import users

    store, record = container.store, container.record
    assert record is not None
    process = record.config.process
    with store.lock_shared_paths():
        number = users.allocate(store, container.id, span)
        process.uid = process.gid = number
        process.additional_gids = []
        process.username = None
        store.write(record)


def _prepare_rootfs(
    container: Handle, options: CreateOptions, host_plan: HostPlan | None, user: Credentials
) -> None:
    job = container.config
    if options.bundle_config is not None:
        from hostjob.boot import jsonio
        from hostjob.linux import fsutil

        # 0600: the directory may be opened to the job's user (open_for_user), and
        # the config holds the --env values.
        path = paths.join(container.store.dir(container.id), "config.json")
        data = jsonio.dumps(options.bundle_config, 2) + "\n"
        fsutil.write_atomic(path, data.encode(), mode=0o600)
    if options.rootfs is not None:
        options.rootfs.prepare(container.id, job, container.record_change)
    if not paths.isdir(job.rootfs):
        raise MountError(f"rootfs {job.rootfs} is not a directory")
    if job.secrets:
        from hostjob.runtime.sandbox.secrets import write_secrets

        # Into the rootfs itself, before a read-only bind or remount covers it.
        write_secrets(job, user.uid, user.gid, container.record_change)
    if job.mount_mode == "bind":
        from hostjob.runtime.sandbox.bind import prepare_bind

        # Paths bind-mode containers share (/hpc, /run/secrets/...) are made,
        # adopted and removed under the state root's lock: one container's delete
        # never removes what another is just adopting.
        with container.store.lock_shared_paths():
            prepare_bind(
                job,
                container.record_change,
                lambda targets: _adopt_shared_paths(container, targets),
            )
    elif _host_setup_due(job):
        from hostjob.runtime.sandbox.host import prepare_host

        prepare_host(job, container.record_change, host_plan)


def _prepare_output(container: Handle, daemon: DaemonConfig) -> tuple[str, str]:
    """``run -d IMAGE``: the log directory (root's, 0700; removed at delete) and the
    stdout/stderr FIFOs in the state directory; returns the FIFOs' paths."""
    from hostjob.linux import fsremove, fsutil
    from hostjob.runtime.sandbox.undo import REMOVE_TREE

    log_dir = daemon.log_dir
    container.record_change([REMOVE_TREE, fsutil.canonical(log_dir)])
    fsutil.ensure_dir(paths.dirname(log_dir), 0o700)
    if paths.lexists(log_dir):  # a leftover of an earlier container of this name
        fsremove.remove_tree(log_dir)
    posix.mkdir(log_dir, 0o700)
    store = container.store
    fifos = (store.path(container.id, STDOUT_FIFO), store.path(container.id, STDERR_FIFO))
    for path in fifos:
        posix.mkfifo(path, 0o600)
    return fifos


def _adopt_shared_paths(container: Handle, targets: list[str]) -> None:
    """Share the removal of what another container created at or above one of
    ``targets`` (canonical): whichever of them is deleted last removes it. Entries
    come before this container's own (the undo log runs newest first: children
    before their parents)."""
    from hostjob.linux import fsutil
    from hostjob.runtime.sandbox.undo import REMOVE

    assert container.record is not None
    adopted: list[list[str]] = []
    for other in Handle.load_all(root=container.store.root):
        if other.id == container.id or other.record is None:
            continue
        for entry in other.record.undo:
            kind, path = entry[0], entry[1]
            if kind == REMOVE and any(fsutil.under(target, path) for target in targets):
                adopted.append([kind, path])
    container.record_change(*adopted)  # those not recorded yet, in one write


def _under_the_unit(container_id: str) -> str | None:
    """The job's cgroup inside the systemd unit that runs this command, where the unit
    delegates its cgroup (a generated unit, or ``systemd-run -p Delegate=yes``): then
    ``journalctl -u UNIT`` shows the job's output (journald files each line under the
    writer's cgroup) and ``systemctl status UNIT`` its processes. None elsewhere."""
    from hostjob.cgroups import systemd

    unit = systemd.unit_cgroup()
    if unit is None:
        return None
    if not systemd.delegates(unit):
        # A session's scope is no service's output; a service whose output is not the
        # journal (cron's pipe, a file) loses nothing either.
        if unit.endswith(".service") and systemd.writes_to_journal():
            log.warning(
                f"the systemd unit of {unit} does not delegate its cgroup (Delegate=yes):"
                " the job's cgroup is made outside it, and journalctl -u will not show"
                " its output"
            )
        return None
    if not systemd.leave_unit_root(unit):
        log.warning(
            f"the systemd unit's cgroup {unit} holds other processes than hostjob: the"
            " job's cgroup is made outside it, and journalctl -u will not show its output"
        )
        return None
    return f"{unit}/{container_id}"


def _systemd_scope(version: int) -> bool:
    """Whether ``--systemd-cgroup`` makes the job a systemd scope on this host; where it
    cannot, the path is mapped onto cgroupfs, and a warning says why."""
    from hostjob.cgroups import systemd

    why = systemd.unavailable(version)
    if why is not None:
        log.warning(f"--systemd-cgroup: {why}; the job's cgroup is made on cgroupfs")
        return False
    return True


def _scope_placer(container_id: str, job: JobConfig, manager: cgroups.Manager) -> Placer:
    """How the forked init gets into its job under the systemd driver: systemd starts the
    scope with it, then what systemd has no property for is written to the cgroup."""
    from hostjob.cgroups import systemd

    def place(pid: int) -> None:
        description = f"hostjob container {container_id}"
        rest = systemd.start(job.cgroups_path, pid, description, job.resources)
        if rest is not None and rest.to_json():
            manager.update(rest)

    return place


def _host_setup_due(job: JobConfig) -> bool:
    """Whether a host-mode rootfs has anything to bind, link or make read-only; else
    (containerd's default config) it is used where it is, and mounts is not loaded."""
    return job.mount_mode != "bind" and bool(job.bind_rootfs or job.volumes or job.readonly)


def _refuse_existing_cgroup(path: str, manager: cgroups.Manager) -> None:
    """A job owns its cgroup: teardown (a failed create, delete, kill --all) kills every
    process in it and removes it. So the cgroup must be one hostjob makes for this
    container: a cgroupsPath naming one that exists already, in any hierarchy (a
    typo'd ``/system.slice``, another job's, an empty one someone prepared), is
    refused before anything is made. runc adopts an existing empty cgroup; hostjob never
    adopts, writes, kills or removes a cgroup it did not make for this container."""
    found = [d for d in manager.dirs() if paths.isdir(d)]
    if found:
        raise CgroupExists(path, found[0], manager.pids())


def listen_fds() -> int:
    """Socket-activation fds handed to us (sd_listen_fds), passed on to the container."""
    value = getenv("LISTEN_FDS") or ""
    if not value.isascii() or not value.isdigit():
        return 0
    pid = getenv("LISTEN_PID")
    if pid and pid != str(posix.getpid()):
        return 0
    return int(value)


def _reap_quietly(pid: int) -> None:
    try:
        posix.waitpid(pid, 0)
    except ChildProcessError:
        pass
