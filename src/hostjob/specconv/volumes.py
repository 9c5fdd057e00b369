"""A config's ``mounts`` -> the volumes of a job container, part of the one conversion
step (``hostjob.specconv.convert``): which mounts apply, which are the container's own system
mounts that a job shares with the host (ignored, a debug line), and which are refused.

* A bind mount is a volume of the host's path (``job.BIND``), with its propagation.
* A tmpfs is a volume of its own (``job.TMPFS``) -- ``docker run --tmpfs``, a
  ``podman --tmpfs`` -- unless it is one of the system mounts every client's default
  spec makes: on ``/dev`` (and ``/dev/shm``), under ``/proc`` or ``/sys``, and
  containerd's default ``/run`` (its options exactly). A job shares those trees with
  the host. Its options are checked here; the kernel checks their values at ``create``.
* Mounts of ``proc``, ``sysfs``, ``devpts``, ``mqueue`` and ``cgroup`` are the
  container's own system mounts; any other type is ignored with a warning.

Pure, like the rest of the conversion.
"""

from __future__ import annotations

from hostjob import log
from hostjob.boot import paths
from hostjob.errors import ConfigError
from hostjob.specconv.jobconfig import BIND, PRIVATE, SHARED, SLAVE, TMPFS, Volume

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.spec import runtime as wire

# Mount types that only make sense inside a container's own namespaces.
CONTAINER_INTERNAL_MOUNTS = ("proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2")

# The trees whose mounts a job shares with the host.
_SYSTEM_TREES = ("/dev", "/proc", "/sys")

# The tmpfs on /run that containerd's default spec gives every container (ctr run):
# a job container has the host's /run.
_CONTAINERD_RUN_OPTIONS = frozenset(("nosuid", "strictatime", "mode=755", "size=65536k"))

# A tmpfs's flag words (the mount(2) flags; their opposites clear them) and tmpfs's own
# options: ``key=value`` of these keys, and the bare ones. ``tmpcopyup`` (podman's,
# runc's extension) copies the image's directory into the new tmpfs.
TMPFS_FLAG_WORDS = frozenset(
    (
        "nosuid", "suid", "nodev", "dev", "noexec", "exec", "sync", "async", "dirsync",
        "noatime", "atime", "nodiratime", "diratime", "relatime", "norelatime",
        "strictatime", "nostrictatime",
    )
)  # fmt: skip
TMPFS_KEYS = frozenset(("size", "nr_blocks", "nr_inodes", "mode", "uid", "gid", "huge", "mpol"))
TMPFS_BARE = frozenset(("inode64", "inode32", "noswap"))
TMPCOPYUP = "tmpcopyup"
_SKIPPED_WORDS = frozenset(("rw", "ro", "notmpcopyup", "defaults"))

# A mount's propagation options (runc's names; the last one given wins, as in runc).
# Unbindable mounts cannot be bound again, which nothing in a job's namespace does:
# private is all they need.
_PROPAGATION_OPTIONS = {
    "private": PRIVATE,
    "rprivate": PRIVATE,
    "unbindable": PRIVATE,
    "runbindable": PRIVATE,
    "slave": SLAVE,
    "rslave": SLAVE,
    "shared": SHARED,
    "rshared": SHARED,
}


def volumes(mounts: list[wire.Mount], bundle: str) -> list[Volume]:
    """The volumes of ``mounts`` (a config's, relative sources against ``bundle``)."""
    found = []
    for i, mount in enumerate(mounts):
        options = mount.options or []
        if not mount.destination:
            raise ConfigError("destination is required", f"mounts[{i}].destination")
        destination = paths.normpath(paths.join("/", mount.destination))
        if mount.type == "bind" or "bind" in options or "rbind" in options:
            if not mount.source:
                raise ConfigError("a bind mount needs a source", f"mounts[{i}].source")
            found.append(
                Volume(
                    source=paths.normpath(paths.join(bundle, mount.source)),
                    destination=destination,
                    readonly="ro" in options,
                    propagation=_propagation(options),
                    kind=BIND,
                )
            )
        elif mount.type == "tmpfs" and not _system_tmpfs(destination, options):
            found.append(
                Volume(
                    source="tmpfs",
                    destination=destination,
                    readonly="ro" in options,
                    propagation=PRIVATE,
                    kind=TMPFS,
                    options=_tmpfs_options(options, f"mounts[{i}].options"),
                )
            )
        elif mount.type == "tmpfs" or mount.type in CONTAINER_INTERNAL_MOUNTS:
            log.debug(f"mounts[{i}] ({mount.type} on {mount.destination}) is container-internal")
        else:
            log.warning(
                f"mounts[{i}] ({mount.type} on {mount.destination}) is ignored:"
                " only bind and tmpfs mounts apply to job containers"
            )
    return found


def _system_tmpfs(destination: str, options: list[str]) -> bool:
    if any(destination == t or destination.startswith(t + "/") for t in _SYSTEM_TREES):
        return True
    return destination == "/run" and frozenset(options) == _CONTAINERD_RUN_OPTIONS


def _tmpfs_options(options: list[str], path: str) -> list[str]:
    """The options a tmpfs volume keeps (``ro``/``rw`` become ``readonly``; propagation
    means nothing for a new mount); an unknown word is refused."""
    kept = []
    for i, word in enumerate(options):
        key, equals, _value = word.partition("=")
        if equals:
            if key not in TMPFS_KEYS:
                raise ConfigError(f"unknown tmpfs option {word!r}", f"{path}[{i}]")
            kept.append(word)
        elif word in TMPFS_FLAG_WORDS or word in TMPFS_BARE or word == TMPCOPYUP:
            kept.append(word)
        elif word not in _SKIPPED_WORDS and word not in _PROPAGATION_OPTIONS:
            raise ConfigError(f"unknown tmpfs option {word!r}", f"{path}[{i}]")
    return kept


def _propagation(options: list[str]) -> str:
    """A bind-mode volume's propagation: ``rprivate`` unless its options ask otherwise."""
    found = PRIVATE
    for option in options:
        found = _PROPAGATION_OPTIONS.get(option, found)
    return found
