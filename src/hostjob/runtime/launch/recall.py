"""The image loader's decisions, kept between starts in the state root.

Working out how an image's program is started (``hostjob.runtime.launch.loader``:
its ELF headers, its loader's, each library's, the image's ``ld.so.conf``) costs a
fresh interpreter more than the rest of its start: the modules that do it must load
too. Yet a node starts the same few programs of the same images again and again. So
the decision -- the path to execute and the words that come before the program's own
arguments -- is kept, with every path of the image it read and what that path was,
and a later start of the same program with the same request checks those paths with
``lstat`` (no ELF is read, no module of the look-up loaded) and takes the decision.

What a decision depends on, and so what an entry records and a hit checks:

- the request: the user and groups the look-up ran as, the capabilities, the name the
  program was called by, the working directory, ``PATH``, the image's ``PATH`` and
  ``LD_LIBRARY_PATH`` -- compared whole, each path with the mount point as a marker,
  because another container of the same image has another mount point;
- the program and the name it was found as (``find_program_named`` runs every time);
- every path of the image the look-up touched: a directory by its type and owner (a
  listed one, ``ld.so.conf.d``, by its inode and change time too), a file by its inode,
  change time and size, a symlink by its target and what that leads to, a missing
  path by its error. The change time (``ctime``) is set by the kernel on every write,
  rename, chmod or chown and cannot be set back by anyone, so a library replaced,
  added earlier in the search, or removed is a miss. An overlay mount shows a lower
  layer's file with that layer's inode number and times, so every container of an
  image shares its entries until it changes a file of its own.

An entry is a cache, never the truth: anything that does not read back whole and
matching is a miss, and the look-up runs as if there were no cache. Entries are
written by the runtime (``remember.keep``), never by the container process, which looks
up as the container's user: it sends what it learned over the report pipe before it
says it is ready. The directory is the state root's (``<root>/.loader/``), read
fd-relative, each entry a file this user owns that nobody else may write. This module
is what every start with the image's loader loads; ``remember``, what only a miss does.
"""

from __future__ import annotations

import marshal

from hostjob.runtime.launch import program as launch_program

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.runtime.launch.plan import LaunchPlan

    Entry = tuple[Any, ...]

MARK = launch_program.MARK


def decide(
    plan: LaunchPlan, program: str, named: str, kept: bytes | None
) -> tuple[str, list[str], bytes | None]:
    """(path, argv) to execute for ``program`` (``loader.prepare``'s), from an entry of
    ``kept`` (the request's file, as ``spawn`` read it; None: nothing is kept) that still
    holds, else worked out now -- then also the entry to keep (runs in the container
    process, as its user, after ``find_program_named``)."""
    root = plan.mount_point.rstrip("/")
    if kept:
        found = _recall(_entries(kept, plan), root, program, named, plan.args)
        if found is not None:
            return found[0], found[1], None
    from hostjob.runtime.launch import loader

    seen = launch_program.seen
    seen.clear()
    path, args = loader.prepare(plan, program, named)
    if kept is None:
        return path, args, None
    from hostjob.runtime.launch import remember

    return path, args, remember.learned(plan, program, named, path, args, seen)


def _recall(
    kept: list[Entry], root: str, program: str, named: str, args: list[str]
) -> tuple[str, list[str]] | None:
    marked = (program.replace(root, MARK), named.replace(root, MARK))
    for entry in kept:
        try:
            if entry[1:3] != marked:
                continue
            if all(launch_program.signature(root + rel) == sig for rel, sig in entry[5]):
                prefix = [word.replace(MARK, root) for word in entry[4]]
                return entry[3].replace(MARK, root), [*prefix, *args[1:]]
        except (TypeError, ValueError, IndexError, AttributeError):
            continue  # not an entry of this version: a miss
    return None


def _entries(data: bytes, plan: LaunchPlan) -> list[Entry]:
    """The file's entries for ``plan``'s request (another request may share a file)."""
    wanted = launch_program.decision_request(plan)
    try:
        found = marshal.loads(data)
        return [e for e in found if e[0] == wanted] if type(found) is list else []
    except (ValueError, EOFError, TypeError, IndexError, KeyError):
        return []
