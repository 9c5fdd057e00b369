"""One file of hostjob's compiled modules, for the ``hostjob`` command's imports.

Every runtime command is a fresh interpreter importing 20-40 of hostjob's modules, and
the standard path finder pays per module: a stat of the package directory, stats of
the source, an open, fstat, read and close of its ``.pyc``, and its own Python-level
steps (measured: ~55 us an empty module, against ~35 us through a finder that has the
code at hand; 1.7 ms of a ``run``, 1 ms of a ``state``). ``hostjob.boot.codepack_build``
compiles every module into one file, the pack (without what only readers and the type
checker use: docstrings and annotations, see there), and ``bin/hostjob`` loads this
module from its file and puts ``PackFinder`` first on ``sys.meta_path`` (``start``): a
module then costs one ``stat`` of its source and one ``pread``.

It also knows where the C extension modules of the runtime path lie (``_json``, which
every command loads, ``resource``, ``_ctypes``): found without a search of
``lib-dynload`` (~0.2 ms), loaded by the standard extension loader.

Where the pack lies: where Python would cache the code of ``hostjob/boot/codepack_slot.py``,
an empty module nothing imports (``__pycache__/codepack_slot.<cache tag>.pyc``). pip
records that file, so an uninstall removes the pack with the package, and the compile
that ends every install puts a real ``.pyc`` there: after a reinstall or an upgrade the
next command finds no pack, and one is made again.

Who makes it: ``scripts/install``, at install; otherwise the first command of a user who
may write the package's ``__pycache__``, as Python writes its ``.pyc`` files there, in a
detached process that leaves the command alone (``build_in_background``).
A command that may not write there (another user, a read-only /usr) imports the ordinary
way, as does every command while the pack is being made.

The pack is a cache, never the truth: a module whose source's size or mtime is not the
one recorded (an edit) is left to the ordinary finders, as a stale ``.pyc`` is; an
unreadable or foreign pack (another Python's magic) is not used at all, nor one that is
not the file its index was read from (a reinstall replaced it under a running command);
``HOSTJOB_NO_CODEPACK=1`` turns it off. Library users and the tests' ``src/`` imports
never see it. Whoever may write beside the package's sources writes the pack: it is
trusted as they are.
"""

# No ``from __future__ import annotations`` here: this module is loaded before the pack,
# the ordinary way. The annotations that name what only type checkers import are strings.
import _thread
import builtins
import marshal
import posix
import sys
from _frozen_importlib import ModuleSpec
from _frozen_importlib_external import (
    MAGIC_NUMBER,
    ExtensionFileLoader,
    PathFinder,
    SourceFileLoader,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Mapping, Sequence
    from types import ModuleType

# The standard library's C extensions of the runtime path, found without a search.
STDLIB_EXTENSIONS = ("_json", "resource", "_ctypes")

MODULE, PACKAGE, EXTENSION = 0, 1, 2  # an entry's kind

HEAD = b"HJCP"  # then importlib's MAGIC_NUMBER (4), the index's length (4), the index

# A pack whose index is empty marks an attempt to make one (``codepack_build``): no
# command starts another before this many seconds have passed since, even if that one
# died half-way (killed with the cgroup of the command that started it).
RETRY_AFTER = 3600

# module -> (kind, source or extension path, its mtime, its size, offset, length)
Index = dict[str, tuple[int, str, int, int, int, int]]


def pack_path(package_dir: str) -> str:
    """The pack of the hostjob package at ``package_dir``: the cache file of
    ``hostjob/boot/codepack_slot.py``."""
    return f"{package_dir}/boot/__pycache__/codepack_slot.{sys.implementation.cache_tag}.pyc"


class PackFinder:
    """A meta path finder and loader over one pack (``install`` makes it)."""

    def __init__(
        self, path: str, fd: int, identity: tuple[int, int, int, int], base: int, index: Index
    ) -> None:
        self.path = path
        self.fd = fd
        # the file the index was read from (``identity``): the fd is checked to still be
        # it before each read, and so is the file a lost fd is reopened from
        self.identity = identity
        self.base = base  # where the code objects start
        self.index = index

    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        entry = self.index.get(name)
        if entry is None:
            return None
        kind, origin, mtime, size, offset, length = entry
        try:
            st = posix.stat(origin)
        except OSError:
            return None
        if (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF) != (mtime, size):
            return None  # changed since the pack was made: the ordinary way
        if kind == EXTENSION:
            spec = ModuleSpec(name, LazyBindingLoader(name, origin), origin=origin)
            spec.has_location = True
            return spec
        is_package = kind == PACKAGE
        # The stubs want an importlib.abc.Loader; the import system wants the two methods.
        spec = ModuleSpec(name, self, origin=origin, is_package=is_package)  # type: ignore[arg-type]
        spec.has_location = True  # __file__ is the source, as for a .pyc
        # __cached__: the compiled code's file, the pack (else importlib works it out from
        # the source's name, in Python, for every module: ~1.9 M instructions of a `state`)
        spec.cached = self.path
        if is_package:
            spec.submodule_search_locations = [origin.rpartition("/")[0]]
        spec.loader_state = (offset, length)
        return spec

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: "ModuleType") -> None:
        spec = module.__spec__
        assert spec is not None and spec.origin is not None
        offset, length = spec.loader_state
        data = self._read(offset, length)
        if data is None:
            # Not the pack the index came from (or cut short): this module from its
            # source, and every later one the ordinary way (they come from one install,
            # and this index no longer says where anything is).
            self.index = {}
            code = SourceFileLoader(spec.name, spec.origin).get_code(spec.name)
            if code is None:
                raise ImportError(f"no code for {spec.name}", name=spec.name)
        else:
            code = marshal.loads(data)
        exec(code, module.__dict__)

    def _read(self, offset: int, length: int) -> "bytes | None":
        """The bytes at ``offset`` of the pack the index was read from; None if that
        file is no longer to be had."""
        try:
            st = posix.fstat(self.fd)
            same = identity(st) == self.identity
        except OSError:
            same = False
        if not same:
            # A forked container process closes every fd it does not keep: the number
            # may be gone, or name another file by now. The pack is opened again, and
            # used only if it is still the same file: a reinstall renames another over
            # it, whose bytes at this index's offsets are other code.
            self.fd = -1  # the number is not this finder's any more
            try:
                fd = posix.open(self.path, posix.O_RDONLY | posix.O_CLOEXEC)
            except OSError:
                return None
            st = posix.fstat(fd)
            if identity(st) != self.identity:
                posix.close(fd)
                return None
            self.fd = fd
        data = posix.pread(self.fd, length, self.base + offset)
        return data if len(data) == length else None


class PackImporter:
    """``builtins.__import__`` of a command (``start``): a module of the pack is made
    here, without importlib's steps, which cost ~0.11 M instructions an import before
    the module's own code runs (its locks, the search of ``sys.meta_path``, the
    module's attributes set one by one, in Python): ~29 modules of a ``start``. The
    module is what importlib would make of the finder's spec -- ``__spec__``,
    ``__loader__``, ``__file__``, ``__cached__``, ``__package__``, a package's
    ``__path__``; in ``sys.modules`` while its code runs, taken out if that raises.

    Everything else is importlib's (``fallback``, the interpreter's own
    ``__import__``): a relative import, a module the pack does not hold or whose
    source changed, an extension, a name of ``fromlist`` that is not a module of the
    pack; and every import once a second thread runs, since only importlib's module
    locks make another thread wait for a module that is still being made. While imports
    are traced (``python -v``, ``-X importtime``) ``start`` leaves importlib all of them."""

    __slots__ = ("fallback", "finder")

    def __init__(self, finder: PackFinder, fallback: "Callable[..., ModuleType]") -> None:
        self.finder = finder
        self.fallback = fallback

    def __call__(
        self,
        name: str,
        globals: "Mapping[str, object] | None" = None,
        locals: "Mapping[str, object] | None" = None,
        fromlist: "Sequence[str] | None" = (),
        level: int = 0,
    ) -> "ModuleType":
        if level or _thread._count():
            return self.fallback(name, globals, locals, fromlist, level)
        module = sys.modules.get(name)
        if module is None:
            module = self.load(name)
            if module is None:
                return self.fallback(name, globals, locals, fromlist, level)
        if fromlist:
            if hasattr(module, "__path__"):
                for item in fromlist:
                    if not hasattr(module, item) and (
                        item == "*" or self.load(f"{name}.{item}") is None
                    ):
                        return self.fallback(name, globals, locals, fromlist, level)
            return module
        return sys.modules[name.partition(".")[0]] if "." in name else module

    def load(self, name: str) -> "ModuleType | None":
        """The pack's module ``name`` made, its parents first; None when importlib is
        to make it."""
        entry = self.finder.index.get(name)
        if entry is None or entry[0] == EXTENSION:
            return None
        parent, _, child = name.rpartition(".")
        if parent and parent not in sys.modules and self.load(parent) is None:
            return None
        spec = self.finder.find_spec(name)
        if spec is None:
            return None
        module = _Module(name)
        module.__spec__ = spec
        module.__loader__ = self.finder  # type: ignore[assignment]
        module.__file__ = spec.origin
        module.__cached__ = spec.cached  # type: ignore[attr-defined]
        if spec.submodule_search_locations is not None:
            module.__path__ = spec.submodule_search_locations
            module.__package__ = name
        else:
            module.__package__ = parent
        sys.modules[name] = module
        try:
            self.finder.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        module = sys.modules[name]  # a module may put another in its place, as importlib allows
        if parent:
            setattr(sys.modules[parent], child, module)
        return module


_Module = type(sys)


class LazyBindingLoader(ExtensionFileLoader):
    """The standard extension loader, but the module's calls into the interpreter bound
    at their first use (``RTLD_LAZY``), not all of them as it loads (Python's default,
    ``RTLD_NOW``): a command calls few of them, and binding them all is most of a load
    (measured, median of 40: ``_json`` 184 -> 152 us, ``_ctypes`` 354 -> 246 us). Only
    for the standard library's own extensions of this very Python (``STDLIB_EXTENSIONS``):
    every symbol they name is the interpreter's, so none can be missing at a later call."""

    def create_module(self, spec: ModuleSpec) -> "ModuleType":
        flags = sys.getdlopenflags()
        sys.setdlopenflags((flags & ~posix.RTLD_NOW) | posix.RTLD_LAZY)
        try:
            return super().create_module(spec)
        finally:
            sys.setdlopenflags(flags)


def identity(st: "os.stat_result") -> tuple[int, int, int, int]:
    """Which file ``st`` is: its inode, and its size and mtime, since a file system hands
    a freed inode's number to the next new file (two replacements may bring it back)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def read_index(path: str) -> "tuple[int, os.stat_result, int, Index] | None":
    """The pack at ``path`` opened: its fd, stat, where its code starts and its index
    (empty: the mark of an attempt); None when there is no pack of this Python there
    (none, a real ``.pyc``, another Python's, a damaged one)."""
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = posix.pread(fd, 12, 0)
        if len(head) != 12 or head[:4] != HEAD or head[4:8] != MAGIC_NUMBER:
            raise ValueError("not a pack for this Python")
        size = int.from_bytes(head[8:12], "little")
        index = marshal.loads(posix.pread(fd, size, 12))
        if type(index) is not dict:
            raise ValueError("no index")
        return fd, posix.fstat(fd), 12 + size, index
    except (OSError, ValueError, EOFError, TypeError):
        posix.close(fd)
        return None


def install(package_dir: str) -> "PackFinder | None":
    """Put the pack of the hostjob package at ``package_dir`` first on ``sys.meta_path``;
    None (and nothing changed) when there is none or it is not for this Python."""
    # posix, not os, all through the runtime path (see hostjob.boot.paths); posix.environ is
    # the bytes dict under os.environ
    if posix.environ.get(b"HOSTJOB_NO_CODEPACK") == b"1":
        return None
    path = pack_path(package_dir)
    opened = read_index(path)
    if opened is None:
        return None
    fd, st, base, index = opened
    if not index:  # an attempt's mark
        posix.close(fd)
        return None
    finder = PackFinder(path, fd, identity(st), base, index)
    sys.meta_path.insert(0, finder)
    return finder


def wanted(package_dir: str) -> bool:
    """Whether the pack of the package at ``package_dir`` is to be made now: there is
    none, no attempt began in the last ``RETRY_AFTER`` seconds, and this user may write
    the package's ``__pycache__`` (or make it), as Python would its ``.pyc`` files.
    Never while Python writes none (``PYTHONDONTWRITEBYTECODE``), nor with the pack
    turned off."""
    if sys.dont_write_bytecode or posix.environ.get(b"HOSTJOB_NO_CODEPACK") == b"1":
        return False
    from time import time

    path = pack_path(package_dir)
    opened = read_index(path)
    if opened is not None:
        fd, st, _, index = opened
        posix.close(fd)
        if index or time() - st.st_mtime < RETRY_AFTER:
            return False  # a pack (made meanwhile), or a recent attempt
    cache = path.rpartition("/")[0]
    if posix.access(cache, posix.F_OK):
        return posix.access(cache, posix.W_OK)  # False on a read-only file system too
    return posix.access(cache.rpartition("/")[0], posix.W_OK)


class SiteFallback:
    """Last on ``sys.meta_path`` of a command started as ``python -S``: a top-level
    module found nowhere on ``sys.path`` (the package's directory and the standard
    library) is looked for once more after site.py's work, done then and only then
    (a dependency that Debian's packages or a ``.pth`` provide: the image side's)."""

    def find_spec(
        self, name: str, path: "Sequence[str] | None" = None, target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if path is not None or "site" in sys.modules:
            return None
        import site

        site.main()
        return PathFinder.find_spec(name)


def start(site_packages: str) -> None:
    """bin/hostjob's start, once it has loaded this module from its file (so neither
    ``site_packages``, the directory that holds the hostjob package, nor the package is
    searched for it): that directory first on ``sys.path``, in the place of the
    script's own (which no import should search), then the pack of the package there
    first on ``sys.meta_path``, and its modules made by ``PackImporter``; with no pack,
    one made in the background if this command may (``wanted``, ``build_in_background``).

    Under ``python -S`` (bin/hostjob's line once specialised: site.py is 2-3 ms of
    every command) ``site_packages`` is all of site.py's directories that ``sys.path``
    holds; ``SiteFallback`` finds what only the others would."""
    sys.path[0] = site_packages
    if sys.flags.no_site:
        sys.meta_path.append(SiteFallback())
    package = f"{site_packages}/hostjob"
    finder = install(package)
    if finder is not None:
        if not _tracing_imports():
            builtins.__import__ = PackImporter(finder, builtins.__import__)
    elif wanted(package):
        build_in_background(site_packages)


def _tracing_imports() -> bool:
    """Whether importlib is to report each import (``python -v``, ``-X importtime``,
    ``PYTHONPROFILEIMPORTTIME``): then it makes every module, so that its report is whole."""
    return bool(
        sys.flags.verbose
        or "importtime" in sys._xoptions
        or posix.environ.get(b"PYTHONPROFILEIMPORTTIME")
    )


# The detached builder's program (``codepack_build.build_detached``): a fresh
# interpreter, ``-I -S``, given the directory that holds the package and the script.
BUILDER = (
    "import sys; sys.path.insert(0, sys.argv[1]);"
    " from hostjob.boot.codepack_build import build_detached; build_detached(*sys.argv[1:])"
)
# How long a builder waits for the command that started it to end before it works.
COMMAND_GRACE = 2.0


def build_in_background(site_packages: str) -> None:
    """Start a detached process that makes the pack of the hostjob package in
    ``site_packages`` and specialises the script this command runs (``BUILDER``), and
    return at once.

    The command goes on with the ordinary imports, and its client must see nothing of
    the builder: a runtime command is run by containerd's shim, conmon or docker, which
    read its stdout and stderr to their end, and it may wait for any child of its own (a
    foreground ``run`` reaps with ``waitpid(-1)``). So the builder is a grandchild (its
    parent ends at once and is reaped here), in a session of its own (no terminal's
    signals reach it), with its stdio on /dev/null and no other fd of the command's, in
    /, at a low CPU priority (``_low_priority``; SCHED_IDLE could starve it for good on
    a loaded node). It waits for the command to
    end (``COMMAND_GRACE`` at most: a foreground ``run`` lasts) before it becomes a
    fresh interpreter and works: on this 2-core VM a builder at work beside
    the command, even at nice 19, made a first ``state`` 3 ms slower. Until then it is
    a fork of the command, through ``posix`` alone (the command imports nothing more,
    and none of ``codepack_build``)."""
    script = sys.argv[0]
    command = posix.getpid()
    try:
        pid = posix.fork()
    except OSError:
        return
    if pid == 0:
        try:
            posix.setsid()
            if posix.fork() == 0:
                _low_priority()
                if not script.startswith("/"):
                    script = f"{posix.getcwd()}/{script}"
                try:
                    ended = [posix.pidfd_open(command)]  # readable once it has ended
                except OSError:
                    ended = []  # before Linux 5.3: no wait
                null = posix.open("/dev/null", posix.O_RDWR)
                for fd in (0, 1, 2):
                    posix.dup2(null, fd)
                for fd in ended:
                    posix.dup2(fd, 3)
                posix.closerange(3 + len(ended), 2**31 - 1)  # one close_range call
                posix.chdir("/")  # no mount kept busy
                if ended:
                    import select

                    select.select([3], [], [], COMMAND_GRACE)
                    posix.close(3)
                python = sys.executable
                posix.execv(python, [python, "-I", "-S", "-c", BUILDER, site_packages, script])
        finally:
            posix._exit(0)  # whatever happened: never back into the command's code
    try:
        posix.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _low_priority() -> None:
    posix.nice(19)
    # A new session is a new autogroup where the kernel has them (most distributions
    # do), and a task's nice counts only inside its group, which competes with the
    # others as its own nice says: 10, a tenth of an ordinary group's share (19 let a
    # loaded 2-core VM starve a build of 0.3 s of CPU for over a minute).
    try:
        fd = posix.open("/proc/self/autogroup", posix.O_WRONLY | posix.O_CLOEXEC)
    except OSError:
        return
    try:
        posix.write(fd, b"10")
    except OSError:
        pass
    finally:
        posix.close(fd)
