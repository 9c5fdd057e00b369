"""The runtime path, declared once: the hostjob modules a runtime command may import,
and the rules they keep that the rest of the code does not.

Every runtime command -- ``create``, ``start``, ``state``, ``kill``, ``delete`` (and
``delete --force``), ``exec``, ``run`` of a bundle, ``list``, ``ps``, ``pause``,
``resume``, ``update``, ``events``, ``features``, ``spec`` and a cached ``run IMAGE``
(the image in the store, nothing to pull) -- is a fresh interpreter, and its imports
dominate its cost. The modules of ``RUNTIME_PACKAGES`` and ``RUNTIME_MODULES`` are
written in the start-up dialect:

* No ``typing`` at run time: the pattern ``TYPE_CHECKING = False`` /
  ``if TYPE_CHECKING:`` for typing-only imports (mypy takes any name
  ``TYPE_CHECKING`` as true; Python never imports ``typing``).
* No ``os`` (``NOT_OS``) but in the modules only a cached ``run IMAGE`` loads (the
  image store's and the supervisor's: that command mounts an overlay, and pays far
  more): ``import os`` is ~1 ms, most of it ``_collections_abc`` for ``os.environ``, a
  third to a half of what ``state`` costs above the bare interpreter. The others call
  the system through
  ``posix`` (``posix.open is os.open``) and take path names from
  ``hostjob.boot.paths`` and the environment from ``hostjob.boot.env``
  (``tests/unit/boot/test_paths.py`` holds them to ``os.path``'s and ``os.environ``'s
  results). A test that injects a fault into such a call patches ``posix.<name>``.
* None of ``FORBIDDEN``: no ``json`` (``hostjob.boot.jsonio`` over ``_json``), no ``re``
  (``reference.is_*``), no ``hashlib`` for metadata (the built-in ``_sha256``,
  ``content.hexdigest``), no ``tempfile`` (``fsutil``'s temp files), never the
  ``ctypes`` package: ``hostjob.linux.syscalls`` binds libc through ``_ctypes`` (~0.5 ms
  rather than 2-4 ms), lazily, only where a syscall the standard library lacks is due.
  Heavy libraries (httpx, rich, isal, zstandard) only inside the image code that needs
  them. Classes are plain classes with ``__slots__``.

A detached container's watcher (``WATCHER_MODULES`` on top of the runtime path's) runs
for the container's whole life, one per container: it uses ``os`` as usual but no
``typing`` either (importing it raises the watcher's PSS from 4.3 to 5.8 MiB,
``python -I -S``, medians of 7).

Everything else -- the image code off the cached run's path (pull, push, pack, the
registry client, unpacking), the commands only an operator types and their rendering,
the rest of the supervisor, the tests and the benchmarks -- is ordinary Python:
``os``, ``os.environ`` and ``os.path``, ``from typing import TYPE_CHECKING`` and plain
``typing`` imports.

Held by ``tests/unit/test_imports.py`` (the runtime commands without root, the watcher,
the dialect read from every file's syntax tree) and
``tests/integration/test_runtime_imports.py`` (a whole lifecycle and a cached
``run IMAGE``, as root): every hostjob module a runtime command (or the watcher)
imports is declared here, so the declaration cannot fall behind the code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

# Never on a runtime command's path (`_ctypes` only where a syscall the standard library
# lacks is due: tests/integration/test_runtime_imports.py).
FORBIDDEN = {
    "typing", "logging", "subprocess", "dataclasses", "argparse", "enum", "re", "json",
    "signal", "socket", "ctypes", "_ctypes", "asyncio", "threading", "httpx", "rich", "zstandard",
    "isal", "tarfile", "hashlib", "email", "http", "urllib", "pathlib", "shutil",
    "tempfile", "inspect", "datetime", "uuid", "random",
}  # fmt: skip

# Nor ``os`` (the commands that read or signal a container, and the bundle's create and
# run: what tests/unit/test_imports.py and tests/integration/test_runtime_imports.py
# measure).
NOT_OS = {"os", "posixpath", "genericpath", "_collections_abc"}

# Whole packages on the runtime path (the package and every module under it). The
# builder of the code pack (hostjob.boot.codepack_build) is a process a runtime
# command starts.
RUNTIME_PACKAGES = (
    "hostjob.boot",
    "hostjob.linux",
    "hostjob.seccomp",
    "hostjob.spec",
    "hostjob.specconv",
    "hostjob.cgroups",
    "hostjob.runtime",
)

RUNTIME_COMMANDS = (
    "create", "delete", "events", "exec", "features", "kill", "list", "pause", "ps",
    "resume", "run", "spec", "start", "state", "update",
)  # fmt: skip

# Single modules on the runtime path, where their package also holds other code.
RUNTIME_MODULES = (
    "hostjob",
    "hostjob.errors",
    "hostjob.faults",
    "hostjob.log",
    "hostjob.units",
    "hostjob.cli",
    "hostjob.cli.main",
    "hostjob.cli.args",
    "hostjob.cli.image_flags",
    "hostjob.cli.commands",
    *(f"hostjob.cli.commands.{name}" for name in RUNTIME_COMMANDS),
    # `run` checks the detached-only flags (supervisor.options) in either form.
    "hostjob.supervisor",
    "hostjob.supervisor.options",
    "hostjob.supervisor.crilog",
    "hostjob.supervisor.restart",
    # A cached `run IMAGE`: the store read, the overlay mounted, the config built.
    "hostjob.images",
    "hostjob.images.errors",
    "hostjob.images.options",
    "hostjob.images.reference",
    "hostjob.images.imagespec",
    "hostjob.images.progress",
    "hostjob.images.root",
    "hostjob.images.content",
    "hostjob.images.layers",
    "hostjob.images.names",
    "hostjob.images.gc",
    "hostjob.images.resolve",
    "hostjob.images.store",
    "hostjob.images.overlay",
    "hostjob.images.rootfs",
    "hostjob.images.runspec",
    "hostjob.images.run_image",
)

# What a detached container's watcher imports beyond the runtime path.
WATCHER_MODULES = ("hostjob.supervisor.watcher", "hostjob.supervisor.logwriter")


def on_runtime_path(module: str) -> bool:
    """Whether ``module`` (a dotted hostjob name) is declared on the runtime path."""
    if module in RUNTIME_MODULES:
        return True
    return any(module == p or module.startswith(p + ".") for p in RUNTIME_PACKAGES)


def lean(module: str) -> bool:
    """Whether ``module`` keeps ``typing`` out at run time: the runtime path's, and the
    watcher's."""
    return on_runtime_path(module) or module in WATCHER_MODULES


def undeclared(modules: set[str], declared: Callable[[str], bool] = on_runtime_path) -> list[str]:
    """The hostjob modules of ``modules`` (a command's ``sys.modules``) not ``declared``."""
    return sorted(m for m in modules if m.split(".")[0] == "hostjob" and not declared(m))
