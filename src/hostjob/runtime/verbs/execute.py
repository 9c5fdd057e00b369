"""``exec``: another process in a running job container, as runc's ``exec``.

``process_for_exec`` makes the process of ``exec ID CMD...``: the container's own,
with runc's overrides (``--env``, ``--cwd``, ``--user``, ``--cap`` ...) applied.

The process gets the init's treatment (``launch.plan``: environment, sandbox
substitution, PATH, cwd, program, user), joins the job's cgroup before it
execs, and in bind mode the init's mount namespace. ``detach`` returns once it
runs (pid file written); otherwise the runtime stays attached and returns its
exit status.
"""

from __future__ import annotations

import posix

from hostjob.errors import ConfigError, HostjobError, InvalidArgument
from hostjob.runtime import proc, status
from hostjob.runtime.launch import plan as launch_plan
from hostjob.runtime.launch.child import ChildSetup
from hostjob.runtime.launch.foreground import TerminalPair, wait_attached
from hostjob.runtime.launch.spawn import spawn
from hostjob.runtime.record import SECCOMP_NAME, write_pid_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.handle import Handle
    from hostjob.specconv.jobconfig import ProcessConfig


class ExecOptions:
    __slots__ = ("console_socket", "detach", "pid_file", "pidfd_socket", "preserve_fds")

    def __init__(
        self,
        detach: bool = False,
        pid_file: str | None = None,
        console_socket: str | None = None,
        preserve_fds: int = 0,
        pidfd_socket: str | None = None,
    ) -> None:
        self.detach = detach
        self.pidfd_socket = pidfd_socket
        self.pid_file = pid_file
        self.console_socket = console_socket
        self.preserve_fds = preserve_fds


def process_for_exec(
    base: ProcessConfig,
    args: list[str],
    *,
    env: tuple[str, ...] | list[str] = (),
    cwd: str | None = None,
    user: str | None = None,
    additional_gids: list[int] | None = None,
    tty: bool | None = None,
    no_new_privileges: bool | None = None,
    capabilities: tuple[str, ...] | list[str] = (),
) -> ProcessConfig:
    """``exec ID CMD...``: the container's own process, with runc's overrides applied."""
    if not args:
        raise ConfigError("exec needs a command to run")
    for entry in env:
        if "=" not in entry:
            raise ConfigError(f"--env {entry!r} is not KEY=VALUE")
    from hostjob.specconv.jobconfig import ProcessConfig

    process: ProcessConfig = ProcessConfig.decode(base.to_json())
    process.args = list(args)
    process.env = [*process.env, *env]
    if cwd:
        process.cwd = cwd
    process.terminal = bool(tty)
    if no_new_privileges is not None:
        process.no_new_privileges = no_new_privileges
    if user:
        from hostjob.units import parse_id

        uid_text, sep, gid_text = user.partition(":")
        uid, gid = parse_id(uid_text), parse_id(gid_text) if sep else 0
        if uid is not None and gid is not None:
            process.uid, process.gid, process.username = uid, gid, None
        elif any(t.isascii() and t.isdigit() and parse_id(t) is None for t in (uid_text, gid_text)):
            raise InvalidArgument(f"--user {user!r}: a number out of range for an ID")
        else:  # names (user[:group]), resolved on the host's passwd as any username
            process.uid, process.gid, process.username = None, None, user
        process.additional_gids = []
    if additional_gids is not None:
        process.additional_gids = list(additional_gids)
    if capabilities and process.capabilities is not None:
        from hostjob.linux.capabilities import CAP_NUMBERS

        for cap in capabilities:
            if cap not in CAP_NUMBERS:
                raise ConfigError(f"unknown capability {cap!r}")
        for name in ("bounding", "effective", "inheritable", "permitted", "ambient"):
            process.capabilities[name] = [*process.capabilities.get(name, []), *capabilities]
    return process


def exec_in_job(
    container: Handle, process: ProcessConfig, options: ExecOptions | None = None
) -> int:
    """Start ``process`` in the running job of ``container``."""
    options = options or ExecOptions()
    status.require_exec(container.id, container.status())
    record = container.record
    assert record is not None
    job = record.config
    entry = container.cgroup().entry()
    terminal = None
    console: str | int | None = options.console_socket
    if process.terminal and console is None:
        if options.detach:
            raise HostjobError("cannot allocate a tty for a detached exec without --console-socket")
        terminal = TerminalPair()
        console = terminal.child_fd
    compiled = None
    if job.seccomp is not None:
        from hostjob.seccomp import bpf

        compiled = bpf.load(container.store.path(container.id, SECCOMP_NAME))
    setup = ChildSetup(launch_plan.plan(job, process, compiled), entry)
    setup.console = console
    setup.decisions_dir = container.store.loader_cache()
    setup.pidfd_socket, setup.pidfd_kind = options.pidfd_socket, "setns"
    setup.extra_fds = options.preserve_fds
    # The init's namespaces: bind mode's mount namespace, a pod's that it joined.
    kinds: tuple[str, ...] = ("mnt",) if job.mount_mode == "bind" else ()
    kinds += tuple(ns.type for ns in job.pod_namespaces or [])
    if kinds:
        from hostjob.runtime.sandbox.join import join_namespace

        setup.enter_namespace = join_namespace(record.pid, record.start_time, kinds)
    master = -1
    child = None
    try:
        child = spawn(setup)
        child.keep_decision()
        if terminal is not None:
            terminal.spawned()
            master = terminal.receive_master()
        if options.detach:
            child.wait_exec()
            if options.pid_file:
                write_pid_file(options.pid_file, child.pid)
            return 0
        if options.pid_file:
            write_pid_file(options.pid_file, child.pid)
        return proc.exit_code(wait_attached(child, master))
    finally:
        if child is not None:
            child.close()
        if terminal is not None:
            terminal.close()
        if master >= 0:
            posix.close(master)
