"""The job: one cgroup per container, on cgroup v1, hybrid and v2 hosts.

This module is imported by every runtime command, so it holds only what finds a job's
cgroup: ``detect()`` (which hierarchies are mounted where, from
``/proc/self/mountinfo``, parsed once per process), ``resolve_path()`` (the
container's cgroup path from ``linux.cgroupsPath``), and the few questions that need
no manager (``frozen``, ``remove_if_empty``). ``hostjob.cgroups.driver.open_manager``
picks a manager; the managers themselves (``v1``, ``v2``) and their controller modules
are imported only when one is opened.

How the runtime uses a manager::

    cg = open_manager(resolve_path(cfg.cgroups_path, cid, systemd))
    cg.create(cfg.resources)     # mkdir in every hierarchy, limits applied
    entry = cg.entry()           # before fork: plain paths, no syscalls
    # fork, or clone3(CLONE_INTO_CGROUP) into entry.unified (hostjob.runtime.launch.spawn);
    # in the child, before anything else:
    entry.join(unified=not started_in_unified)   # the init is in the job
    ...
    cg.terminate(grace)          # the job ends: SIGTERM, SIGKILL after grace
    cg.destroy()                 # SIGKILL leftovers, rmdir everywhere

See ``hostjob.cgroups._manager.Manager`` for the whole interface.
"""

from __future__ import annotations

import errno
import posix

from hostjob.boot import paths
from hostjob.errors import CgroupError, ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.cgroups._manager import Entry, Manager

__all__ = [
    "CGROUP_PARENT",
    "Entry",
    "Hierarchy",
    "Manager",
    "Mounts",
    "clean_path",
    "detect",
    "expand_slice",
    "frozen",
    "mounts_at",
    "parse_mountinfo",
    "resolve_path",
]

# Parent of every container cgroup whose linux.cgroupsPath is empty or relative.
CGROUP_PARENT = "/hostjob"
# The unit prefix of a --systemd-cgroup container whose cgroupsPath is empty.
SYSTEMD_PREFIX = "hostjob"

# Superblock options of a v1 cgroup mount that are not controllers.
_V1_FLAGS = frozenset(
    ("rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode", "favordynmods")
)


class Hierarchy:
    """One mounted cgroup hierarchy.

    ``controllers``: the v1 controllers bound to it (``("cpu", "cpuacct")``, a named
    hierarchy as ``("name=systemd",)``); empty for cgroup2, whose controllers are
    listed in its ``cgroup.controllers``. ``root`` is the mount's root inside the
    hierarchy (not ``/`` under a cgroup namespace or for a bind mount of a
    sub-cgroup); cgroup paths are taken relative to the mount point, as runc does.
    """

    __slots__ = ("controllers", "mountpoint", "root", "version")

    def __init__(
        self, mountpoint: str, controllers: tuple[str, ...] = (), root: str = "/", version: int = 1
    ) -> None:
        self.mountpoint = mountpoint
        self.controllers = controllers
        self.root = root
        self.version = version

    def __repr__(self) -> str:
        what = ",".join(self.controllers) if self.version == 1 else "cgroup2"
        return f"Hierarchy({what} at {self.mountpoint}, root {self.root})"


class Mounts:
    """What ``detect()`` found: ``version`` 2 (unified), 1 (v1 or hybrid) or 0 (none)."""

    __slots__ = ("hierarchies", "unified", "version")

    def __init__(self, hierarchies: list[Hierarchy], unified: Hierarchy | None) -> None:
        self.hierarchies = hierarchies
        self.unified = unified
        if any(not c.startswith("name=") for h in hierarchies for c in h.controllers):
            self.version = 1
        else:
            self.version = 2 if unified is not None else 0

    def hierarchy(self, controller: str) -> Hierarchy | None:
        """The v1 hierarchy a controller is bound to."""
        for h in self.hierarchies:
            if controller in h.controllers:
                return h
        return None

    def __repr__(self) -> str:
        return f"Mounts(v{self.version}, {self.hierarchies!r}, unified={self.unified!r})"

    def rows(self) -> list[list[str]]:
        """As a container's record keeps them (``[version, mount point, root,
        controllers]``): later commands on it then need no look at mountinfo, as runc's
        state.json keeps its cgroup paths."""
        every = [*self.hierarchies, *([self.unified] if self.unified is not None else [])]
        return [[str(h.version), h.mountpoint, h.root, ",".join(h.controllers)] for h in every]

    @classmethod
    def from_rows(cls, rows: list[list[str]]) -> Mounts:
        hierarchies: list[Hierarchy] = []
        unified = None
        for row in rows:
            if len(row) != 4:
                continue
            version, mountpoint, root, controllers = row
            if version == "2":
                unified = Hierarchy(mountpoint, (), root, 2)
            else:
                hierarchies.append(Hierarchy(mountpoint, tuple(controllers.split(",")), root, 1))
        return cls(hierarchies, unified)


def parse_mountinfo(text: str) -> Mounts:
    """The cgroup hierarchies in a ``/proc/<pid>/mountinfo`` text.

    A hierarchy mounted twice (bind mounts) is taken once, preferring a mount of its
    root; the cgroup2 mount at ``/sys/fs/cgroup`` (v2) or ``/sys/fs/cgroup/unified``
    (hybrid) wins over others.
    """
    from hostjob.linux import mountinfo

    # A node running many containers has hundreds of mounts: only the cgroup ones are
    # parsed (" - " then the type can only be the separator: a path's spaces are \040).
    text = "\n".join(line for line in text.splitlines() if " - cgroup" in line)
    v1: dict[tuple[str, ...], Hierarchy] = {}
    unified: Hierarchy | None = None
    for mount in mountinfo.parse(text):
        if mount.fstype not in ("cgroup", "cgroup2"):
            continue
        root, mountpoint = mount.root, mount.point
        if mount.fstype == "cgroup2":
            h = Hierarchy(mountpoint, (), root, 2)
            if unified is None or _better_unified(h, unified):
                unified = h
            continue
        controllers = tuple(
            sorted(
                opt
                for opt in mount.options.split(",")
                if opt not in _V1_FLAGS and ("=" not in opt or opt.startswith("name="))
            )
        )
        if not controllers:
            continue
        known = v1.get(controllers)
        if known is None or (known.root != "/" and root == "/"):
            v1[controllers] = Hierarchy(mountpoint, controllers, root, 1)
    return Mounts(list(v1.values()), unified)


def _better_unified(new: Hierarchy, old: Hierarchy) -> bool:
    rank = {"/sys/fs/cgroup": 0, "/sys/fs/cgroup/unified": 1}

    def key(h: Hierarchy) -> tuple[int, int]:
        return (rank.get(h.mountpoint, 2), 0 if h.root == "/" else 1)

    return key(new) < key(old)


_detected: Mounts | None = None


def detect() -> Mounts:
    """This process's cgroup mounts (parsed once per process)."""
    global _detected
    if _detected is None:
        try:
            with open("/proc/self/mountinfo", "rb") as f:
                text = f.read().decode("utf-8", "surrogateescape")
        except OSError as err:
            raise CgroupError(f"cannot read /proc/self/mountinfo: {err.strerror}") from err
        _detected = parse_mountinfo(text)
    return _detected


def mounts_at(root: str) -> Mounts:
    """Mounts for a directory laid out like ``/sys/fs/cgroup`` (tests, fake trees).

    A directory with ``cgroup.controllers`` is a cgroup2 root; otherwise each
    subdirectory is a v1 hierarchy named by its controllers (``cpu,cpuacct``,
    ``memory``, ``systemd`` for ``name=systemd``) and ``unified`` a hybrid cgroup2.
    Symlinks (``cpu -> cpu,cpuacct``) are skipped.
    """
    root = root.rstrip("/") or "/"
    if paths.exists(paths.join(root, "cgroup.controllers")):
        return Mounts([], Hierarchy(root, (), "/", 2))
    hierarchies: list[Hierarchy] = []
    unified: Hierarchy | None = None
    with posix.scandir(root) as it:
        for entry in sorted(it, key=lambda e: e.name):
            if not entry.is_dir(follow_symlinks=False):
                continue
            if paths.exists(paths.join(entry.path, "cgroup.controllers")):
                unified = Hierarchy(entry.path, (), "/", 2)
                continue
            names = entry.name.split(",")
            if entry.name == "systemd":
                names = ["name=systemd"]
            hierarchies.append(Hierarchy(entry.path, tuple(sorted(names)), "/", 1))
    return Mounts(hierarchies, unified)


def __getattr__(name: str) -> object:
    # The Manager base class and Entry live with the managers; importing them here
    # would cost every runtime command a module.
    if name in ("Entry", "Manager"):
        from hostjob.cgroups import _manager

        return getattr(_manager, name)
    raise AttributeError(f"module 'hostjob.cgroups' has no attribute {name!r}")


# --- paths ---------------------------------------------------------------------------------


def clean_path(path: str, what: str) -> str:
    parts = [p for p in path.split("/") if p and p != "."]
    if ".." in parts:
        raise ConfigError(f"cgroup path {path!r} must not contain '..'", what)
    if not parts:
        raise ConfigError(
            f"cgroup path {path!r} is the root cgroup; a job needs its own cgroup", what
        )
    return "/" + "/".join(parts)


def expand_slice(slice_name: str) -> str:
    """``a-b-c.slice`` -> ``/a.slice/a-b.slice/a-b-c.slice``, as systemd nests slices."""
    suffix = ".slice"
    if not slice_name.endswith(suffix) or len(slice_name) == len(suffix) or "/" in slice_name:
        raise ConfigError(f"invalid systemd slice name {slice_name!r}", "linux.cgroupsPath")
    stem = slice_name[: -len(suffix)]
    if stem == "-":
        return "/"
    path = ""
    prefix = ""
    for component in stem.split("-"):
        if not component:  # "a--b.slice", "-a.slice", "a-.slice"
            raise ConfigError(f"invalid systemd slice name {slice_name!r}", "linux.cgroupsPath")
        path += f"/{prefix}{component}{suffix}"
        prefix += component + "-"
    return path


def resolve_path(cgroups_path: str, container_id: str, systemd: bool = False) -> str:
    """The container's cgroup path inside each hierarchy (always absolute, normalised).

    Empty -> ``/hostjob/<id>``; relative -> ``/hostjob/<relative>``; absolute -> as
    given. With ``systemd`` (``--systemd-cgroup``) the runc form ``slice:prefix:name``
    maps to ``<slice path>/<prefix>-<name>.scope`` on cgroupfs (an empty slice is
    ``system.slice``; a name ending in ``.slice`` is used as is).
    """
    what = "linux.cgroupsPath"
    if systemd:
        if cgroups_path:
            parts = cgroups_path.split(":")
            if len(parts) != 3:
                raise ConfigError(
                    f'expected "slice:prefix:name" for a systemd cgroup, got {cgroups_path!r}',
                    what,
                )
            slice_name, prefix, name = parts
        else:
            slice_name, prefix, name = "", SYSTEMD_PREFIX, container_id
        if not name or "/" in name or "/" in prefix:
            raise ConfigError(f"invalid systemd unit in {cgroups_path!r}", what)
        if name.endswith(".slice"):
            unit = name
        else:
            unit = f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
        return clean_path(expand_slice(slice_name or "system.slice") + "/" + unit, what)
    if not cgroups_path:
        return clean_path(f"{CGROUP_PARENT}/{container_id}", what)
    if cgroups_path.startswith("/"):
        return clean_path(cgroups_path, what)
    return clean_path(f"{CGROUP_PARENT}/{cgroups_path}", what)


def frozen(path: str, mounts: Mounts | None = None) -> bool:
    """Whether the job at ``path`` is frozen itself (``paused``), not merely through an
    ancestor; False where nothing can freeze it.

    The question every status check asks (``state``, ``list``, ``start``, ``kill``...):
    answered with one or two reads, without a manager and the modules it loads. Same
    answer as ``Manager.frozen()``: the v1 freezer where there is one, else the
    cgroup2 ``cgroup.freeze``.
    """
    path = clean_path(path, "cgroup path")
    mounts = mounts or detect()
    freezer = mounts.hierarchy("freezer") if mounts.version == 1 else None
    if freezer is not None:
        base = freezer.mountpoint.rstrip("/") + path
        own = _read_optional(base + "/freezer.self_freezing")
        if own is not None:
            return own.strip() == b"1"
        return (_read_optional(base + "/freezer.state") or b"").strip() == b"FROZEN"
    if mounts.unified is not None:
        value = _read_optional(mounts.unified.mountpoint.rstrip("/") + path + "/cgroup.freeze")
        return (value or b"").strip() == b"1"
    return False


def remove_if_empty(path: str, mounts: Mounts, top: str) -> bool:
    """Remove the job's cgroup ``path`` in every hierarchy, then its ancestors up to
    ``top`` where they are empty (``remove_empty_ancestors``); True once none of the
    job's directories is left. What ``delete`` does once the job has ended, with one
    rmdir a hierarchy and without a manager and the modules it loads (as ``frozen``).

    The kernel refuses to remove a cgroup that holds a process or a sub-cgroup
    (EBUSY): then False, the job's directories that are left stay as they are, and
    the manager's ``terminate``/``destroy`` end and remove the rest."""
    from hostjob.cgroups import _fs  # its rmdir, as the managers' (a fake tree's too)

    path = clean_path(path, "cgroup path")
    dirs = job_dirs(path, mounts)
    left = False
    for d in dirs:
        try:
            _fs.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError:
            left = True
    if left:
        return False
    remove_empty_ancestors(dirs, path, top)
    return True


def job_dirs(path: str, mounts: Mounts) -> list[str]:
    """The job's directory in each hierarchy, as ``open_manager``'s manager has them
    (``Manager.dirs()``; a test holds the two together): cgroup2 alone on a v2 host,
    every v1 hierarchy and the unified one on a v1 or hybrid host."""
    mountpoints = [] if mounts.version == 2 else [h.mountpoint for h in mounts.hierarchies]
    if mounts.unified is not None:
        mountpoints.append(mounts.unified.mountpoint)
    return [mountpoint.rstrip("/") + path for mountpoint in mountpoints]


def remove_empty_ancestors(dirs: list[str], path: str, top: str) -> None:
    """rmdir the ancestors of the job's cgroup ``path`` (``dirs``: its directory in each
    hierarchy) up to and including ``top`` (the runtime's shared parent, /hostjob) where
    they are now empty, so that no empty cgroup is left behind; one that another
    container still uses stays (EBUSY). Nothing for a path outside ``top``."""
    from hostjob.cgroups import _fs

    if not path.startswith(top.rstrip("/") + "/"):
        return
    parents = []
    parent = paths.dirname(path)
    while len(parent) >= len(top):
        parents.append(parent)
        parent = paths.dirname(parent)
    for d in dirs:
        mountpoint = d[: len(d) - len(path)]
        for ancestor in parents:
            try:
                _fs.rmdir(mountpoint + ancestor)
            except OSError:
                break


def _read_optional(path: str) -> bytes | None:
    """A small cgroupfs file; None if it (or its cgroup) does not exist."""
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CgroupError(f"cannot read {path}: {err.strerror}") from err
    try:
        return posix.read(fd, 4096)
    except OSError as err:
        if err.errno == errno.ENODEV:  # the cgroup was removed under us
            return None
        raise CgroupError(f"cannot read {path}: {err.strerror}") from err
    finally:
        posix.close(fd)
