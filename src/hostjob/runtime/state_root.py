"""A state root's names: the IDs a container may take, and the names hostjob keeps
for itself there. ``hostjob.runtime.record`` keeps the rest (the files of a
container's directory, the record in them, the store that reads and writes them).

A module of its own so that ``delete --force`` of an ID that is not there (docker's
shim sends one after every ``delete``) answers without loading the record's model.
"""

from __future__ import annotations

from hostjob.boot import paths
from hostjob.errors import InvalidArgument

DEFAULT_ROOT = "/run/hostjob"
# A container that is not a job container (hostjob.runtime.delegate): its directory
# holds only a link to the real OCI runtime that runs it, and that runtime keeps its
# state under <root>/DELEGATE_DIR/<its name>.
DELEGATE_DIR = ".delegate"
# Compiled seccomp profiles kept for the next create (hostjob.seccomp.cache).
SECCOMP_CACHE_DIR = ".seccomp"
# The image loader's decisions kept for the next start (hostjob.runtime.launch.recall).
LOADER_CACHE_DIR = ".loader"
# hostjob's own names in the state root: no container may take one.
_RESERVED = (".", "..", DELEGATE_DIR, SECCOMP_CACHE_DIR, LOADER_CACHE_DIR)
MAX_ID_BYTES = 1024
ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")


def validate_id(container_id: str) -> str:
    if (
        not container_id
        or container_id in _RESERVED
        or len(container_id.encode()) > MAX_ID_BYTES
        or not ID_CHARS.issuperset(container_id)
    ):
        raise InvalidArgument(f"invalid container ID format: {container_id!r}")
    return container_id


def container_dir(root: str, container_id: str) -> str:
    """The state directory of ``container_id`` under the absolute state root ``root``."""
    return paths.join(root, validate_id(container_id))


def exists(root: str, container_id: str) -> bool:
    """Whether the state root ``root`` (as given on the command line) has a directory
    for ``container_id``."""
    return paths.isdir(container_dir(paths.abspath(root), container_id))
