"""The image store's directory: where it is, that it is root's alone, its locks.

Layout (each part documented by the module that owns it)::

    blobs/<alg>/<hex>           content: every blob, verified         (images.content)
    layers/<alg>/<diffhex>/     the unpacked-layer cache, by diffID   (images.layers)
    images.json, images.lock    the name index and its lock           (images.names)
    containers/<id>.json        what a container uses (kept by prune) (images.gc)
    gc.lock                     pulls share it, prune takes it alone  (images.gc)
    rw/<id>/                    a container's writable layer          (images.rootfs)
    locks/                      per-blob and per-layer lock files

The store is root's alone (SECURITY.md): its root is 0700 and owned by hostjob's user,
so no other local user can reach a blob of a private image, or run a setuid-root
file or open a device node of any layer. Below the root, modes are the images' own.
"""

from __future__ import annotations

import os
import stat

from hostjob.boot import jsonio
from hostjob.errors import PermissionDenied
from hostjob.linux import fsremove, fsutil

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.linux.fsutil import FileLock

DEFAULT_ROOT = "/var/lib/hostjob"
STORE_ENV = "HOSTJOB_STORE"
SUBDIRS = ("blobs/sha256", "layers/sha256", "containers", "locks")


def default_root() -> str:
    """The store when none is given: ``$HOSTJOB_STORE``, else ``/var/lib/hostjob``."""
    return os.environ.get(STORE_ENV) or DEFAULT_ROOT


class StoreRoot:
    """The store's top directory, shared by its parts (content, layers, names, gc)."""

    __slots__ = ("_checked", "path")

    def __init__(self, path: str | None = None) -> None:
        self.path = os.path.abspath(path or default_root())
        self._checked = False  # the root was seen to be ours and 0700

    def join(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def check(self) -> None:
        """Make sure the root is ours and 0700 (closing a store an older hostjob made
        0755): the root's mode closes everything below it. A missing root is fine."""
        if self._checked:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return  # nothing stored yet; ensure() makes it 0700
        except PermissionError as err:
            raise PermissionDenied(
                f"cannot open the image store {self.path}: it is root's"
            ) from err
        if st.st_uid != os.geteuid():
            raise PermissionDenied(
                f"image store {self.path} belongs to uid {st.st_uid}, not to hostjob's user;"
                " refusing it"
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(self.path, 0o700)
        self._checked = True

    def ensure(self) -> None:
        """Make the root (0700) and its subdirectories, as a writer needs them."""
        if not self._checked:
            fsutil.ensure_dir(self.path, 0o700)
            self.check()
        for sub in SUBDIRS:
            fsutil.ensure_dir(self.join(sub), 0o700)

    def lock(self, name: str, shared: bool = False) -> FileLock:
        """Take an ``flock`` on the file ``name`` below the root (made if missing); it is
        held until the returned lock is released (``with``)."""
        return fsutil.lock_file(self.join(name), shared=shared)


def write_json(path: str, data: object, *, durable: bool = True) -> None:
    """Replace ``path`` by ``data`` as indented, key-sorted JSON (stable, diffable store
    files); durably unless told otherwise (``fsutil``'s rule: the store's names and
    metadata are what nothing else records)."""
    text = jsonio.dumps(_sorted_keys(data), 1) + "\n"
    fsutil.write_atomic(path, text.encode(), durable=durable)


def read_json(path: str) -> Any:
    """The JSON at ``path``; ``FileNotFoundError`` and ``ValueError`` as they come."""
    with open(path, "rb") as f:
        return jsonio.loads(f.read())


def _sorted_keys(value: Any) -> Any:
    """``value`` with every object's keys in order (stable, diffable store files)."""
    if type(value) is dict:
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if type(value) is list:
        return [_sorted_keys(v) for v in value]
    return value


def listdir(path: str) -> list[str]:
    """The sorted entries of ``path``; none when it is missing."""
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def remove_stale(folder: str, prefix: str) -> None:
    """Remove the entries of ``folder`` named ``prefix*`` (temps of a killed writer;
    their owner's lock is held, so none of them is being written)."""
    for entry in listdir(folder):
        if entry.startswith(prefix):
            fsremove.remove_tree(os.path.join(folder, entry))
