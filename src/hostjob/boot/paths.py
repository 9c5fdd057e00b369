"""Path names for the runtime path, without ``os``.

Every runtime command is a fresh interpreter, and ``import os`` is ~1 ms of it: most of
that is ``_collections_abc``, which ``os`` imports for ``os.environ``'s mapping class, and
it was a third to a half of what ``state``, ``start``, ``kill`` and ``delete`` cost above
the bare interpreter. So the modules a runtime command loads call the system through
``posix`` (the module ``os`` re-exports its system calls from: ``posix.open is os.open``),
take path arithmetic from here and the environment from ``hostjob.boot.env``. The results are
``os.path``'s for ``str`` paths; ``tests/unit/boot/test_paths.py`` compares them on generated
paths and on real trees of symlinks.

Nothing here makes a path safe to open in a tree someone else can write (SECURITY.md): that
is ``fsutil``'s fd-relative walk. ``realpath`` is for the host's own paths (a bundle, a
state root), as ``os.path.realpath`` was.
"""

from __future__ import annotations

import posix
import sys

_S_IFMT = 0o170000
_S_IFDIR = 0o040000
_S_IFREG = 0o100000
_S_IFLNK = 0o120000
_ENCODING = sys.getfilesystemencoding()


def join(first: str, *rest: str) -> str:
    """``os.path.join``: an absolute part starts over."""
    path = first
    for part in rest:
        if part.startswith("/"):
            path = part
        elif not path or path.endswith("/"):
            path += part
        else:
            path += "/" + part
    return path


def split(path: str) -> tuple[str, str]:
    """``os.path.split``: (head, tail), the head without trailing slashes unless all slash."""
    cut = path.rfind("/") + 1
    head, tail = path[:cut], path[cut:]
    if head and head != "/" * len(head):
        head = head.rstrip("/")
    return head, tail


def dirname(path: str) -> str:
    return split(path)[0]


def basename(path: str) -> str:
    return path[path.rfind("/") + 1 :]


def isabs(path: str) -> bool:
    return path.startswith("/")


def normpath(path: str) -> str:
    """``os.path.normpath``: lexical, so ``a/link/..`` is ``a`` whatever ``link`` is."""
    if not path:
        return "."
    # POSIX keeps exactly two leading slashes as they are; one or three and more are one.
    lead = 2 if path.startswith("//") and not path.startswith("///") else int(path[0] == "/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part != ".." or (not lead and not parts) or (parts and parts[-1] == ".."):
            parts.append(part)
        elif parts:
            parts.pop()
    return "/" * lead + "/".join(parts) or "."


def abspath(path: str) -> str:
    if not path.startswith("/"):
        path = join(posix.getcwd(), path)
    return normpath(path)


def relpath(path: str, start: str = ".") -> str:
    """``os.path.relpath``, lexical: ``path`` from the directory ``start``."""
    if not path:
        raise ValueError("no path specified")
    to = [part for part in abspath(path).split("/") if part]
    base = [part for part in abspath(start).split("/") if part]
    same = 0
    for a, b in zip(to, base, strict=False):  # up to the shorter
        if a != b:
            break
        same += 1
    parts = [".."] * (len(base) - same) + to[same:]
    return join(*parts) if parts else "."


def realpath(path: str) -> str:
    """``os.path.realpath`` (not strict): every symlink resolved, ``..`` after it; a part that
    does not exist is kept as written, and a loop of links stops resolving where it loops."""
    resolved, _ = _resolve("", path, {})
    return abspath(resolved)


def _resolve(done: str, rest: str, seen: dict[str, str | None]) -> tuple[str, bool]:
    # ``seen`` maps a link to what it resolved to, or None while it is being resolved: met
    # again then, it is a loop. Returns (path, False) when one was met.
    if rest.startswith("/"):
        done, rest = "/", rest[1:]
    while rest:
        name, _, rest = rest.partition("/")
        if not name or name == ".":
            continue
        if name == "..":
            if not done:
                done = ".."
                continue
            done, last = split(done)
            if last == "..":
                done = join(done, "..", "..")
            continue
        candidate = join(done, name)
        try:
            is_link = posix.lstat(candidate).st_mode & _S_IFMT == _S_IFLNK
        except OSError:
            is_link = False
        if not is_link:
            done = candidate
            continue
        if candidate in seen:
            target = seen[candidate]
            if target is None:  # what is left is kept as written, as a relative path
                return join(candidate, rest.lstrip("/")), False
            done = target
            continue
        seen[candidate] = None
        done, ok = _resolve(done, posix.readlink(candidate), seen)
        if not ok:
            return join(done, rest.lstrip("/")), False
        seen[candidate] = done
    return done, True


def _mode(path: str, follow: bool = True) -> int:
    try:
        return (posix.stat(path) if follow else posix.lstat(path)).st_mode
    except (OSError, ValueError):
        return 0


def exists(path: str) -> bool:
    return _mode(path) != 0


def lexists(path: str) -> bool:
    return _mode(path, follow=False) != 0


def isdir(path: str) -> bool:
    return _mode(path) & _S_IFMT == _S_IFDIR


def isfile(path: str) -> bool:
    return _mode(path) & _S_IFMT == _S_IFREG


def fsencode(path: str | bytes) -> bytes:
    """``os.fsencode``."""
    return path if isinstance(path, bytes) else path.encode(_ENCODING, "surrogateescape")
