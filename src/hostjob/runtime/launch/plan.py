"""The job-container rules for a process (README, "What a job container's process
sees"): user, environment, sandbox mount point substitution, PATH and working directory.

All of it is decided here, in the runtime, before the fork (a seccomp profile is compiled
here too); the program is looked up by the child after it has become the target user
(``hostjob.runtime.launch.program``: a bare name in the image's own PATH first), so that
permissions are the user's own.
"""

from __future__ import annotations

import grp
import posix
import pwd

from hostjob.boot import paths
from hostjob.boot.env import environ_copy
from hostjob.errors import ConfigError
from hostjob.linux.capabilities import cap_mask

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.seccomp.bpf import Filter
    from hostjob.specconv.jobconfig import IOPriority, JobConfig, ProcessConfig, Scheduler

SANDBOX_VAR = "CONTAINER_SANDBOX_MOUNT_POINT"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_IDENT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class Credentials:
    __slots__ = ("gid", "groups", "home", "name", "shell", "uid")

    def __init__(
        self, uid: int, gid: int, groups: list[int], home: str, name: str | None, shell: str | None
    ) -> None:
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.home = home
        self.name = name
        self.shell = shell


class LaunchPlan:
    """A process ready to be started: the child executes this, step by step."""

    __slots__ = (
        "args",
        "capabilities",
        "console_height",
        "console_width",
        "create_cwd",
        "cwd",
        "env",
        "image_loader",
        "image_path",
        "io_priority",
        "mount_point",
        "no_new_privileges",
        "oom_score_adj",
        "rlimits",
        "scheduler",
        "seccomp",
        "terminal",
        "umask",
        "user",
    )

    def __init__(self) -> None:
        self.args: list[str] = []
        self.env: list[str] = []
        # The PATH of process.env as given (the image's), before it is extended: where a
        # bare program name is looked for first, under the mount point.
        self.image_path = ""
        self.cwd = "/"
        self.create_cwd = False
        self.mount_point = "/"
        self.user = Credentials(0, 0, [], "/", None, None)
        self.umask: int | None = None
        self.rlimits: list[tuple[int, int, int]] = []
        self.no_new_privileges = False
        # (bounding, effective, permitted, inheritable, ambient) masks, or None to keep
        self.capabilities: tuple[int, int, int, int, int] | None = None
        self.oom_score_adj: int | None = None
        self.scheduler: Scheduler | None = None  # process.scheduler, checked
        self.io_priority: IOPriority | None = None  # process.ioPriority, checked
        # The image's program through the image's loader (io.hostjob.loader: image)
        self.image_loader = True
        self.seccomp: Filter | None = None  # linux.seccomp, compiled
        self.terminal = False
        self.console_height: int | None = None
        self.console_width: int | None = None

    def path_value(self) -> str:
        for entry in self.env:
            if entry.startswith("PATH="):
                return entry[5:]
        return DEFAULT_PATH


def substitute(text: str, mount_point: str) -> str:
    """Replace the five spellings of the sandbox variable by the mount point."""
    if SANDBOX_VAR not in text:
        return text
    value = mount_point.rstrip("/")
    # $(NAME) is Kubernetes' form, which the kubelet leaves as it is for a variable the
    # pod spec does not define.
    forms = ("${" + SANDBOX_VAR + "}", "$(" + SANDBOX_VAR + ")", "%" + SANDBOX_VAR + "%")
    for form in (*forms, "$env:" + SANDBOX_VAR):
        text = text.replace(form, value)
    # The bare $NAME form only when the name ends there ($NAMEX is another variable).
    bare = "$" + SANDBOX_VAR
    out = []
    start = 0
    while True:
        found = text.find(bare, start)
        if found < 0:
            out.append(text[start:])
            break
        end = found + len(bare)
        out.append(text[start:found])
        out.append(value if end == len(text) or text[end] not in _IDENT else bare)
        start = end
    return "".join(out)


def resolve_user(proc: ProcessConfig, inherit: bool) -> Credentials:
    if inherit:
        uid = posix.getuid()
        entry = _passwd(uid)
        return Credentials(
            uid,
            posix.getgid(),
            posix.getgroups(),
            entry.pw_dir if entry else "/",
            entry.pw_name if entry else None,
            entry.pw_shell if entry else None,
        )
    extra = list(proc.additional_gids or [])
    if proc.username and proc.uid is None:
        return _from_username(proc.username, proc.gid, extra)
    uid = proc.uid or 0
    gid = proc.gid or 0
    entry = _passwd(uid)
    home = entry.pw_dir if entry else "/"
    return Credentials(
        uid, gid, extra, home, entry.pw_name if entry else None, entry.pw_shell if entry else None
    )


def _passwd(uid: int) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        return None


def _from_username(name: str, gid: int | None, extra: list[int]) -> Credentials:
    try:
        bad = "\0" in name or not paths.fsencode(name)
    except UnicodeError:
        bad = True
    if bad:  # the passwd lookups would raise ValueError
        raise ConfigError(f"user {name!r} is not a valid name", "process.user.username")
    user, _, group = name.partition(":")
    # ASCII digits alone: isdigit() also takes "²", which int() refuses.
    if user.isdigit() and user.isascii() and len(user) <= 10:
        uid = int(user)
        entry = _passwd(uid)
        numeric = group.isdigit() and group.isascii() and len(group) <= 10
        gid_value = int(group) if numeric else (entry.pw_gid if entry else 0)
        home = entry.pw_dir if entry else "/"
        return Credentials(uid, gid_value, extra, home, entry.pw_name if entry else None, None)
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        entry = None
    if entry is not None:
        primary = gid if gid is not None else entry.pw_gid
        groups = sorted(set(posix.getgrouplist(entry.pw_name, primary)) | set(extra))
        return Credentials(
            entry.pw_uid, primary, groups, entry.pw_dir, entry.pw_name, entry.pw_shell
        )
    # A group's name is a container's own user only: create gives it a uid of its own
    # in that group (hostjob.runtime.users.wants_own_uid); never one shared uid.
    try:
        grp.getgrnam(user)
    except KeyError as err:
        raise ConfigError(
            f"user {user!r} is neither a user nor a group on this host", "process.user.username"
        ) from err
    raise ConfigError(
        f"{user!r} is a group: only a container's own user may name one (create gives it a"
        " uid of its own in that group); run this process as a user",
        "process.user.username",
    )


def build_env(
    proc: ProcessConfig, creds: Credentials, mount_point: str, inherit: bool
) -> list[str]:
    env: dict[str, str] = {}
    if inherit:
        env.update(environ_copy())
    else:
        # A login's: the host's /etc/environment (proxies, locale), the account's
        # identity from passwd, the default PATH unless /etc/environment sets one.
        env.update(host_environment())
        env["HOME"] = creds.home
        if creds.name:
            env["USER"] = creds.name
            env["LOGNAME"] = creds.name
        if creds.shell:
            env["SHELL"] = creds.shell
        env.setdefault("PATH", DEFAULT_PATH)
    for entry in proc.env:
        key, _, value = entry.partition("=")
        env.pop(key, None)  # last wins, and moves to where it was set
        env[key] = substitute(value, mount_point)
    env.pop(SANDBOX_VAR, None)
    path = env.get("PATH", DEFAULT_PATH)
    env["PATH"] = extend_path(path, mount_point)
    env[SANDBOX_VAR] = mount_point.rstrip("/") or "/"
    return [f"{k}={v}" for k, v in env.items()]


HOST_ENVIRONMENT = "/etc/environment"


def host_environment(path: str | None = None) -> dict[str, str]:
    """The host's ``/etc/environment`` as pam_env reads it for a login: ``KEY=VALUE``
    lines (``export`` before one allowed), ``#`` comments, one pair of quotes around a
    value removed, nothing expanded; 64 KiB at most. A file that cannot be read is
    an empty one."""
    try:
        with open(path or HOST_ENVIRONMENT, "rb") as f:
            text = f.read(64 * 1024).decode("utf-8", "surrogateescape")
    except OSError:
        return {}
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, sep, value = line.partition("=")
        if not sep or not key or key[0].isdigit() or not set(key) <= _IDENT:
            continue  # a comment, a blank line, or no variable's name
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        found[key] = value
    return found


def image_path(proc: ProcessConfig, mount_point: str) -> str:
    """The ``PATH`` that ``process.env`` gives (the last one; substituted), or ""."""
    found = ""
    for entry in proc.env:
        if entry.startswith("PATH="):
            found = entry[5:]
    return substitute(found, mount_point)


def extend_path(path: str, mount_point: str) -> str:
    """Host entries first, then the mount point and its copy of each entry."""
    entries = [e for e in path.split(":") if e]
    copies = [paths.join(mount_point, e.lstrip("/")) for e in entries if e.startswith("/")]
    return ":".join([*entries, mount_point, *copies])


def working_dir(
    cwd: str | None, mount_point: str, mode: str, volumes: tuple[str, ...] = ()
) -> tuple[str, bool]:
    """(directory, create it if missing): ``cwd`` is a path of the container's view in
    both modes, so docker's ``-w /etc`` and an image's ``WORKDIR`` are the image's and
    ``/`` is the mount point. In bind mode a path at or under a volume's destination
    (``volumes``) is that volume at its real path, where host mode's link under the
    mount point leads too; a missing one is never made (only the writable layer gets
    a directory)."""
    if not cwd:
        return mount_point, True
    cwd = paths.normpath(substitute(cwd, mount_point))
    root = mount_point.rstrip("/")
    if cwd == root or cwd.startswith(root + "/"):
        return cwd, True
    if mode == "bind" and any(cwd == v or cwd.startswith(v.rstrip("/") + "/") for v in volumes):
        return cwd, False
    return paths.normpath(paths.join(mount_point, cwd.lstrip("/"))), True


def plan(job: JobConfig, proc: ProcessConfig, compiled: Filter | None = None) -> LaunchPlan:
    """The launch plan of ``proc``, a process of the job container ``job`` (``compiled``:
    its seccomp profile compiled already, by the create that ``exec`` follows)."""
    mount_point = job.mount_point
    creds = resolve_user(proc, job.inherit_user)
    result = LaunchPlan()
    result.mount_point = mount_point
    result.user = creds
    result.env = build_env(proc, creds, mount_point, job.inherit_user)
    result.image_path = image_path(proc, mount_point)
    result.args = [substitute(a, mount_point) for a in proc.args]
    volumes = tuple(v.destination for v in job.volumes)
    result.cwd, result.create_cwd = working_dir(proc.cwd, mount_point, job.mount_mode, volumes)
    result.umask = proc.umask
    result.rlimits = [
        (rlimit_number(r.type), rlimit_value(r.soft), rlimit_value(r.hard)) for r in proc.rlimits
    ]
    result.no_new_privileges = proc.no_new_privileges or bool(job.no_new_privileges)
    if proc.capabilities is not None and not job.inherit_user:
        sets = proc.capabilities
        result.capabilities = (
            cap_mask(sets.get("bounding", [])),
            cap_mask(sets.get("effective", [])),
            cap_mask(sets.get("permitted", [])),
            cap_mask(sets.get("inheritable", [])),
            cap_mask(sets.get("ambient", [])),
        )
    result.oom_score_adj = proc.oom_score_adj
    result.scheduler = proc.scheduler
    result.io_priority = proc.io_priority
    result.image_loader = job.loader != "host"
    if job.seccomp is not None:
        from hostjob.seccomp import bpf  # compiled here: its errors are create's (or exec's)

        result.seccomp = compiled or bpf.build(job.seccomp)
    result.terminal = proc.terminal
    result.console_height = proc.console_height
    result.console_width = proc.console_width
    return result


RLIM_INFINITY_U64 = 2**64 - 1


def rlimit_value(value: int) -> int:
    """runtime-spec's uint64 max is RLIM_INFINITY."""
    import resource

    return resource.RLIM_INFINITY if value >= RLIM_INFINITY_U64 else value


def rlimit_number(name: str) -> int:
    """RLIMIT_NOFILE -> its number on this platform (the resource module's)."""
    import resource

    number: int = getattr(resource, name)
    return number
