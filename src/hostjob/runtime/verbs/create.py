"""``create``: a job container's record, job cgroup, rootfs set-up and process, the
process set up in its job and waiting for ``start`` (runc's ``create``; ``run`` shares
it). ``Container.create`` (``create_from_bundle``) and ``Container.create_from_config``
(``create``) hand the new container's handle here.

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
    from hostjob.runtime.launch.child import ChildSetup
    from hostjob.runtime.launch.plan import Credentials, LaunchPlan
    from hostjob.runtime.launch.spawn import Child
    from hostjob.runtime.sandbox.host import HostPlan
    from hostjob.runtime.sandbox.provider import RootfsProvider
    from hostjob.seccomp.cache import Compiled
    from hostjob.specconv.jobconfig import DaemonConfig, JobConfig


class CreateOptions:
    """How ``create`` is asked to start the container process (runc's create flags).

    ``rootfs`` makes a rootfs the runtime does not own before anything is mounted
    (``hostjob run IMAGE``'s overlay; see ``hostjob.runtime.sandbox.provider``):
    the runtime records its undo entries and knows nothing else of it. Such a rootfs
    lives in the container's state directory, which is then opened (0710, the job's group)
    to a non-root job so that its processes can reach it, and to no other user."""

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


def create_from_bundle(
    container: Handle,
    bundle: str,
    *,
    options: CreateOptions | None = None,
    document: object = None,
    defaults: dict[str, str] | None = None,
) -> None:
    """Create ``container`` (a handle with no record yet) from the bundle directory
    ``bundle``: its ID checked, its config read and converted (``bundle.load_bundle``),
    the process made; the child's handle is closed (the caller is not ``run``)."""
    from hostjob.runtime.bundle import load_bundle
    from hostjob.runtime.state_root import validate_id

    validate_id(container.id)
    job = load_bundle(bundle, container.id, document, defaults)
    create(container, job, options=options).close()


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
    as ``run`` does: no exec fifo is made, and the container reads as running.

    The steps run in this order, each host change recorded before it is made, so that
    whatever a failure or a crash (at a fault point) leaves, ``delete --force`` undoes."""
    from hostjob.runtime.launch.spawn import spawn

    options = options or CreateOptions()
    _settle_cgroup_path(container.id, job, options)
    if job.process.terminal and options.console_socket is None:
        raise HostjobError("cannot allocate a tty without --console-socket")
    span = None
    if job.auto_user or (job.process.username and job.process.uid is None):
        from hostjob.runtime import users

        if users.wants_own_uid(job):  # --user auto, or a group's name
            span = users.configured_range(options.auto_user_range)  # a bad range: nothing made
    store = container.store
    lock = store.create(container.id)  # first: a taken ID is "already exists"
    try:
        manager, scope = _open_cgroup(container, job, options)
    except BaseException:
        store.remove(container.id)  # nothing else was made
        lock.release()
        raise
    child = None
    written: list[str] = []  # the pid file, once written
    try:
        host_plan = _write_record(container, options, span)
        faults.point("create:after-state-dir")
        _make_cgroup(container, manager, scope)
        faults.point("create:after-cgroup")
        plan, compiled = _plan_process(container)
        _prepare_rootfs(container, options, host_plan, plan.user)
        faults.point("create:after-mount")
        setup = _child_setup(container, options, plan, manager, scope, release_by_pipe)
        points = [p for p in ("prestart", "createRuntime", "createContainer") if job.hooks_for(p)]
        recorded = _recorder(container, options.pid_file, bool(points), written)
        place = None
        if scope:  # systemd starts the scope with the process in it
            from hostjob.cgroups import systemd

            description = f"hostjob container {container.id}"
            place = systemd.placer(job.cgroups_path, description, job.resources, manager)
        child = spawn(setup, after_fork=recorded, place=place)
        faults.point("create:after-fork")
        if points:
            _run_create_hooks(container, points, child.pid)
        faults.point("create:before-created")
        if points:
            _set_phase(container, PHASE_CREATED)
        if compiled is not None:
            compiled.keep()  # for the next create with this profile
        child.keep_decision()  # the image loader's, for the next start of the program
    except BaseException:
        _tear_down(container, child, written)
        raise
    finally:
        lock.release()
    assert child is not None
    return child


def _settle_cgroup_path(container_id: str, job: JobConfig, options: CreateOptions) -> None:
    """The job's cgroup path as the driver names it; with none given, inside the systemd
    unit that runs this command where the unit delegates its cgroup."""
    from hostjob import cgroups

    given = job.cgroups_path
    job.cgroups_path = cgroups.resolve_path(given, container_id, options.systemd_cgroup)
    if not given and not options.systemd_cgroup and paths.isdir("/run/systemd/system"):
        from hostjob.cgroups import systemd

        job.cgroups_path = systemd.job_path_in_unit(container_id) or job.cgroups_path


def _open_cgroup(
    container: Handle, job: JobConfig, options: CreateOptions
) -> tuple[cgroups.Manager, bool]:
    """The job's cgroup manager on the hierarchies as they are now (a cgroup that is
    there already is refused) and whether a systemd scope makes it; the record as it
    will first be written."""
    from hostjob import cgroups
    from hostjob.cgroups.driver import open_manager, refuse_existing
    from hostjob.units import rfc3339_nano

    hierarchies = cgroups.detect()
    manager = open_manager(job.cgroups_path, mounts=hierarchies)
    refuse_existing(job.cgroups_path, manager)
    scope = False
    if options.systemd_cgroup:
        from hostjob.cgroups import systemd

        scope = systemd.usable(hierarchies.version)
    container.record = Record(
        id=container.id,
        pid=0,
        start_time=0,
        phase=PHASE_CREATING,
        created=rfc3339_nano(),
        owner="",
        config=job,
        undo=[],
        # Recorded before the mkdir, as undo entries are; a mkdir that finds the
        # cgroup there already clears it again (``_make_cgroup``).
        cgroup=job.cgroups_path,
        cgroup_mounts=hierarchies.rows(),
        systemd_scope=scope or None,
        daemon=options.daemon,
        restarts=0 if options.daemon is not None else None,
    )
    return manager, scope


def _write_record(
    container: Handle, options: CreateOptions, span: tuple[int, int] | None
) -> HostPlan | None:
    """The record comes first: whatever happens after it, delete --force can undo. What
    the rootfs's set-up will record goes in this first write already (its plan)."""
    record = container.record
    assert record is not None
    host_plan = None
    if options.rootfs is None and _host_setup_due(record.config):
        from hostjob.runtime.sandbox.host import plan_host

        host_plan = plan_host(record.config)
        if host_plan is not None:
            record.undo = list(host_plan.undo)
    if span is None:
        container.store.write(record)
    else:
        from hostjob.runtime import users

        users.assign(container.store, record, span)
    return host_plan


def _make_cgroup(container: Handle, manager: cgroups.Manager, scope: bool) -> None:
    """The job's cgroup, with its limits."""
    record = container.record
    assert record is not None
    try:
        if scope:  # systemd makes the cgroup when it starts the scope, the init in it
            manager.check(record.config.resources)
        else:
            manager.create(record.config.resources, exclusive=True)
    except CgroupExists:
        # Made by someone else since the check before: never ours to touch.
        record.cgroup = ""
        container.store.write(record)
        raise


def _plan_process(container: Handle) -> tuple[LaunchPlan, Compiled | None]:
    """The process's plan (``launch.plan``) and its seccomp program, compiled or from
    the cache (kept there once the create succeeds)."""
    from hostjob.runtime.launch import plan as launch_plan

    job, store = container.config, container.store
    compiled = None
    if job.seccomp is not None:
        from hostjob.seccomp import cache

        compiled = cache.compiled(store.seccomp_cache(), job.seccomp)
    plan = launch_plan.plan(job, job.process, compiled.program if compiled else None)
    if plan.user.uid != 0 and not job.auto_user:
        from hostjob.runtime import users

        users.warn_if_shared(store, container.id, plan.user.uid)
    return plan, compiled


def _child_setup(
    container: Handle,
    options: CreateOptions,
    plan: LaunchPlan,
    manager: cgroups.Manager,
    scope: bool,
    release_by_pipe: bool,
) -> ChildSetup:
    """What the forked process needs, and its files: exec fifo, seccomp, a daemon's FIFOs."""
    from hostjob import cgroups
    from hostjob.runtime.launch.child import ChildSetup

    store, job = container.store, container.config
    fifo = None
    if not release_by_pipe:
        fifo = store.fifo(container.id)
        # Only root may write the start byte (the process opens the read end as root).
        posix.mkfifo(fifo, 0o600)
    if plan.seccomp is not None:
        from hostjob.seccomp import bpf

        bpf.save(plan.seccomp, store.path(container.id, SECCOMP_NAME))
    setup = ChildSetup(plan, cgroups.Entry([], None) if scope else manager.entry())
    setup.fifo, setup.decisions_dir = fifo, store.loader_cache()
    setup.release_by_pipe = release_by_pipe
    setup.console = options.console_socket
    setup.pidfd_socket = options.pidfd_socket
    listen = listen_fds()
    setup.listen_fds = listen
    setup.extra_fds = listen + options.preserve_fds
    setup.set_init_steps(job, container.hook_state(Status.CREATED, None))
    if options.daemon is not None:
        setup.stdio = _prepare_output(container, options.daemon)
    return setup


def _recorder(
    container: Handle, pid_file: str | None, hooks_due: bool, written: list[str]
) -> Callable[[int], None]:
    """What the parent does once it has forked the process: one write of the record
    while the child sets itself up; with no hooks to run it is created once its set-up
    succeeds (a failure undoes the record). And the pid file (a client reads it once
    create has returned; a failed create removes it again: ``written``)."""

    def recorded(pid: int) -> None:
        record = container.record
        assert record is not None
        record.pid = pid
        record.start_time = proc.start_time(pid) or 0
        if not hooks_due:
            record.phase = PHASE_CREATED
        container.store.write(record)
        if pid_file:
            write_pid_file(pid_file, pid)
            written.append(pid_file)

    return recorded


def _run_create_hooks(container: Handle, points: list[str], pid: int) -> None:
    from hostjob.runtime.launch import hooks

    state = container.hook_state(Status.CREATING, pid)
    for point in points:
        hooks.run_hooks(point, container.config.hooks_for(point), state)


def _set_phase(container: Handle, phase: str) -> None:
    record = container.record
    assert record is not None
    record.phase = phase
    container.store.write(record)


def _tear_down(container: Handle, child: Child | None, written: list[str]) -> None:
    """After a failure at any step: the pid file, the process and whatever the record
    says was made."""
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


def _prepare_rootfs(
    container: Handle, options: CreateOptions, host_plan: HostPlan | None, user: Credentials
) -> None:
    job = container.config
    if options.bundle_config is not None:
        from hostjob.boot import jsonio
        from hostjob.linux import fsutil

        # 0600: the directory may be opened to the job's group (open_for_user), and
        # the config holds the --env values.
        path = paths.join(container.store.dir(container.id), "config.json")
        data = jsonio.dumps(options.bundle_config, 2) + "\n"
        fsutil.write_atomic(path, data.encode(), mode=0o600)
    if options.rootfs is not None:
        options.rootfs.prepare(container.id, job, container.record_change)
        from hostjob.runtime.sandbox.provider import keep_to_the_job

        keep_to_the_job(job.rootfs, user.gid)  # it lies in the container's directory:
        if user.uid != 0:  # a non-root job passes that by its group
            container.store.open_for_user(container.id, user.gid)
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
        if job.volumes:
            from hostjob.runtime.sandbox.bindlinks import link_volumes

            # Each volume also under the mount point, as hcsshim links it.
            link_volumes(job, container.record_change)
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


def _host_setup_due(job: JobConfig) -> bool:
    """Whether a host-mode rootfs has anything to bind, link or make read-only; else
    (containerd's default config) it is used where it is, and mounts is not loaded."""
    return job.mount_mode != "bind" and bool(job.bind_rootfs or job.volumes or job.readonly)


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
