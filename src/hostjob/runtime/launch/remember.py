"""Keeping the image loader's decisions (``hostjob.runtime.launch.recall`` says what
an entry holds and how a start checks it): the entry a container process learned, made
by it (``learned``) and written by the runtime (``keep``). Only a start that missed
loads this module.
"""

from __future__ import annotations

import marshal
import posix

from hostjob.runtime.launch.program import (
    DECISIONS_MAX_BYTES,
    DECISIONS_SUFFIX,
    MARK,
    decision_file,
    decision_request,
    signature,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.runtime.launch.plan import LaunchPlan

    Entry = tuple[Any, ...]

MAX_FILES = 256
MAX_PER_FILE = 4
MAX_PAYLOAD = 256 * 1024
MAX_DEPENDENCIES = 4096


def keep(directory: str, payload: bytes) -> None:
    """Keep the entry the container process sent (``decide``'s), newest first, beside
    the file's others of other images (runs in the runtime, after the child is ready)."""
    if len(payload) > MAX_PAYLOAD:
        return
    try:
        entry = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return
    if not _well_formed(entry):
        return
    name = decision_file(entry[0])
    from hostjob.linux import fsutil

    try:
        dir_fd = fsutil.open_private_dir(directory, create=True)
    except OSError:
        return
    try:
        if not fsutil.private(dir_fd):
            return
        old = _read_at(dir_fd, name) or b""
        others = [e for e in _entries(old) if e[:3] != entry[:3]]
        data = marshal.dumps([entry, *others[: MAX_PER_FILE - 1]])
        if len(data) > DECISIONS_MAX_BYTES:
            return
        # By path, as the state records are: the state root is this user's alone.
        fsutil.write_atomic(f"{directory}/{name}", data, mode=0o600)
        fsutil.trim_oldest(dir_fd, DECISIONS_SUFFIX, MAX_FILES)
    except OSError:
        pass  # a cache: the container runs all the same
    finally:
        posix.close(dir_fd)


def learned(
    plan: LaunchPlan,
    program: str,
    named: str,
    path: str,
    args: list[str],
    seen: list[str],
) -> bytes | None:
    """The entry for this decision, or None when it cannot be kept: it read a path
    outside the image (the host's may change unseen), its program is not the image's,
    or it does not end in the program's own arguments."""
    root = plan.mount_point.rstrip("/")
    wanted = decision_request(plan)
    rest = len(plan.args) - 1
    if wanted is None or len(args) < rest + 1 or args[len(args) - rest :] != plan.args[1:]:
        return None
    prefix = args[: len(args) - rest]
    words = (program, named, path, *prefix)
    if any(MARK in word for word in words) or not path.startswith(root + "/"):
        return None
    inside = root + "/"
    dependencies: list[tuple[str, Any]] = []
    for where in dict.fromkeys(seen):
        if not where.startswith(inside) or len(dependencies) >= MAX_DEPENDENCIES:
            return None
        dependencies.append((where[len(root) :], signature(where)))
    entry = (
        wanted,
        program.replace(root, MARK),
        named.replace(root, MARK),
        path.replace(root, MARK),
        tuple(word.replace(root, MARK) for word in prefix),
        tuple(dependencies),
    )
    payload = marshal.dumps(entry)
    return payload if len(payload) <= MAX_PAYLOAD else None


def _well_formed(entry: Any) -> bool:
    """Whether a payload is an entry: strings, ints and tuples of them, as ``_learned``
    makes it."""
    if type(entry) is not tuple or len(entry) != 6 or type(entry[0]) is not tuple:
        return False
    if not all(type(entry[i]) is str for i in (1, 2, 3)):
        return False
    if type(entry[4]) is not tuple or not all(type(w) is str for w in entry[4]):
        return False
    deps = entry[5]
    return type(deps) is tuple and all(
        type(d) is tuple and len(d) == 2 and type(d[0]) is str and _plain(d[1]) for d in deps
    )


def _plain(value: Any) -> bool:
    if type(value) in (int, str) or value is None:
        return True
    return type(value) is tuple and all(_plain(v) for v in value)


def _entries(data: bytes) -> list[Entry]:
    try:
        found = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return []
    if type(found) is not list:
        return []
    return [e for e in found if _well_formed(e)]


def _read_at(dir_fd: int, name: str) -> bytes | None:
    try:
        fd = posix.open(name, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        from hostjob.linux import fsutil

        if not fsutil.private(fd, DECISIONS_MAX_BYTES):
            return None
        return posix.read(fd, DECISIONS_MAX_BYTES)
    except OSError:
        return None
    finally:
        posix.close(fd)
