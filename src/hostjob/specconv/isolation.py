"""What keeps one job from another, as the operator asks for it in annotations (a
bundle's, a pod's, or ``hostjob run``'s ``--user auto`` and ``--secret``):

* ``io.hostjob.user: auto`` -- the job runs as a uid and gid of its own, allocated at
  create from a reserved range (``hostjob.runtime.users``), with no supplementary
  groups;
* ``io.hostjob.secrets: SRC:DST[,SRC:DST...]`` -- each host file SRC becomes the file DST
  of the container's view, readable by the job's user only (0400, its own), written at
  create into the container's rootfs (an image container's writable layer): never
  the job's environment, which every process of the same uid can read.

Pure, as ``hostjob.specconv.convert`` is: it reads no file.
"""

from __future__ import annotations

from hostjob.boot import paths
from hostjob.errors import ConfigError
from hostjob.linux.fsutil import under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.specconv.jobconfig import Volume

ANNOTATION_USER = "io.hostjob.user"
ANNOTATION_SECRETS = "io.hostjob.secrets"
AUTO = "auto"


def auto_user(annotations: dict[str, str], inherit_user: bool) -> bool:
    """Whether the annotations ask for a uid of the container's own."""
    value = annotations.get(ANNOTATION_USER)
    if value is None:
        return False
    where = f"annotations.{ANNOTATION_USER}"
    if value != AUTO:
        raise ConfigError(f"must be {AUTO!r}, not {value!r}", where)
    if inherit_user:
        raise ConfigError(
            f"{AUTO!r} and an inherit-user annotation ask for two different users", where
        )
    return True


def secrets(annotations: dict[str, str], volumes: list[Volume]) -> list[list[str]] | None:
    """The ``[source, destination]`` pairs of the secrets annotation, both absolute and
    normalised; None without one."""
    value = annotations.get(ANNOTATION_SECRETS)
    if value is None:
        return None
    where = f"annotations.{ANNOTATION_SECRETS}"
    pairs: list[list[str]] = []
    for entry in value.split(","):
        source, destination = check_secret(entry, where)
        for volume in volumes:
            if under(destination, volume.destination):
                raise ConfigError(
                    f"{entry!r}: {destination} lies on the volume at {volume.destination};"
                    " a secret goes into the container's own files",
                    where,
                )
        if any(destination == d for _s, d in pairs):
            raise ConfigError(f"{entry!r}: {destination} is given twice", where)
        pairs.append([source, destination])
    return pairs


def check_secret(entry: str, where: str = "--secret") -> tuple[str, str]:
    """``SRC:DST`` -> (SRC, DST), both absolute paths; DST not ``/`` nor with ``..``."""
    source, sep, destination = entry.strip().partition(":")
    if not sep or not source or not destination or ":" in destination:
        raise ConfigError(f"{entry!r} is not SRC:DST", where)
    if not paths.isabs(source) or not paths.isabs(destination):
        raise ConfigError(f"{entry!r}: both paths must be absolute", where)
    if ".." in destination.split("/"):
        raise ConfigError(f"{entry!r}: the destination must not hold '..'", where)
    destination = paths.normpath(destination)
    if destination == "/":
        raise ConfigError(f"{entry!r}: the destination must name a file", where)
    return paths.normpath(source), destination
