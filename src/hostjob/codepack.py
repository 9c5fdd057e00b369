"""One file of hostjob's compiled modules, for the ``hostjob`` command's imports.

Every runtime command is a fresh interpreter importing 20-40 of hostjob's modules, and
the standard path finder pays per module: a stat of the package directory, stats of
the source, an open, fstat, read and close of its ``.pyc``, and its own Python-level
steps (measured: ~55 us an empty module, against ~35 us through a finder that has the
code at hand; 1.7 ms of a ``run``, 1 ms of a ``state``). ``scripts/install`` compiles
every module (as CPython does, but without what only readers and the type checker use:
docstrings, ~15% of the bytes an import unmarshals, 0.2 ms of a ``state``; type
annotations, another 7% of the bytes and a fifth of the time a module's body takes to
define its classes and functions; and so ``from __future__ import annotations``, which
would import ``__future__`` into every command) into
``hostjob/__pycache__/codepack.<cache tag>.bin``
(``build``), and ``bin/hostjob`` loads this module from its file and puts ``PackFinder``
first on ``sys.meta_path`` (``start``): a module then costs one ``stat`` of its source
and one ``pread``.

It also knows where the C extension modules of the runtime path lie (``_json``, which
every command loads, ``resource``, ``_ctypes``): found without a search of
``lib-dynload`` (~0.2 ms), loaded by the standard extension loader.

The pack is a cache, never the truth: a module whose source's size or mtime is not the
one recorded (an upgrade, an edit) is left to the ordinary finders, as a stale ``.pyc``
is; an unreadable or foreign pack (another Python's magic) is not used at all, and
``HOSTJOB_NO_CODEPACK=1`` turns it off. Library users and the tests' ``src/`` imports
never see it. The pack lives beside the ``.pyc`` files, written by whoever installs
them (root, for a system install): it is trusted as they are.
"""

# No ``from __future__ import annotations`` here: this module is loaded before the pack,
# the ordinary way. The annotations that name what only type checkers import are strings.
import marshal
import posix
import sys
from _frozen_importlib import ModuleSpec
from _frozen_importlib_external import MAGIC_NUMBER, ExtensionFileLoader

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from collections.abc import Sequence
    from types import CodeType, ModuleType

# The standard library's C extensions of the runtime path, found without a search.
STDLIB_EXTENSIONS = ("_json", "resource", "_ctypes")

MODULE, PACKAGE, EXTENSION = 0, 1, 2  # an entry's kind

_HEAD = b"HJCP"  # then importlib's MAGIC_NUMBER (4), the index's length (4), the index

# module -> (kind, source or extension path, its mtime, its size, offset, length)
Index = dict[str, tuple[int, str, int, int, int, int]]


def pack_path(package_dir: str) -> str:
    return f"{package_dir}/__pycache__/codepack.{sys.implementation.cache_tag}.bin"


class PackFinder:
    """A meta path finder and loader over one pack (``install`` makes it)."""

    def __init__(self, path: str, fd: int, ino: int, base: int, index: Index) -> None:
        self.path = path
        self.fd = fd
        self.ino = ino  # the fd is checked to still be the pack's before each read
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
            spec = ModuleSpec(name, ExtensionFileLoader(name, origin), origin=origin)
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
        assert spec is not None
        offset, length = spec.loader_state
        code = marshal.loads(self._read(offset, length))
        exec(code, module.__dict__)

    def _read(self, offset: int, length: int) -> bytes:
        # A forked container process closes every fd it does not keep: the number may
        # be gone, or name another file by now. Reopened then.
        try:
            if posix.fstat(self.fd).st_ino != self.ino:
                raise OSError
        except OSError:
            self.fd = posix.open(self.path, posix.O_RDONLY | posix.O_CLOEXEC)
            self.ino = posix.fstat(self.fd).st_ino
        data = posix.pread(self.fd, length, self.base + offset)
        if len(data) != length:
            raise ImportError(f"{self.path} is truncated")
        return data


def install(package_dir: str) -> "PackFinder | None":
    """Put the pack of the hostjob package at ``package_dir`` first on ``sys.meta_path``;
    None (and nothing changed) when there is none or it is not for this Python."""
    # posix, not os, all through the runtime path (see hostjob.paths); posix.environ is
    # the bytes dict under os.environ
    if posix.environ.get(b"HOSTJOB_NO_CODEPACK") == b"1":
        return None
    path = pack_path(package_dir)
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = posix.pread(fd, 12, 0)
        if len(head) != 12 or head[:4] != _HEAD or head[4:8] != MAGIC_NUMBER:
            raise ValueError("not a pack for this Python")
        size = int.from_bytes(head[8:12], "little")
        index = marshal.loads(posix.pread(fd, size, 12))
        if type(index) is not dict:
            raise ValueError("no index")
        finder = PackFinder(path, fd, posix.fstat(fd).st_ino, 12 + size, index)
    except (OSError, ValueError, EOFError, TypeError):
        posix.close(fd)
        return None
    sys.meta_path.insert(0, finder)
    return finder


def start(site_packages: str) -> None:
    """bin/hostjob's start, once it has loaded this module from its file (so neither
    site-packages nor the package is searched for it): site-packages on ``sys.path``,
    then the pack of the hostjob package there first on ``sys.meta_path``.

    Under ``python -S`` (scripts/install starts the command so: site.py is ~1.5 ms)
    site-packages takes the place of the script's directory, which would otherwise be
    searched first for every import; with site.py it is there already."""
    if sys.flags.no_site:
        sys.path[0] = site_packages
    install(f"{site_packages}/hostjob")


def build(package_dir: str) -> int:
    """Write the pack of every module under ``package_dir`` (the installed package),
    compiled from its source by ``_compile_for_pack``; the number of modules. Written whole
    or not at all."""
    import importlib.util
    import os

    from hostjob import fsutil

    package_dir = os.path.abspath(package_dir)
    top = os.path.basename(package_dir)
    index: Index = {}
    blob = bytearray()
    for folder, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        relative = os.path.relpath(folder, os.path.dirname(package_dir))
        prefix = relative.replace(os.sep, ".")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            source = os.path.join(folder, name)
            stem = name[:-3]
            module = prefix if stem == "__init__" else f"{prefix}.{stem}"
            st = os.stat(source)
            mtime, size = int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF
            with open(source, "rb") as f:
                code = marshal.dumps(_compile_for_pack(f.read(), source))
            kind = PACKAGE if stem == "__init__" else MODULE
            index[module] = (kind, source, mtime, size, len(blob), len(code))
            blob += code
    if top not in index:
        raise ValueError(f"{package_dir} is not a package")
    for name in STDLIB_EXTENSIONS:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".so"):
            continue  # built in, or missing in this Python
        st = os.stat(spec.origin)
        index[name] = (
            EXTENSION,
            spec.origin,
            int(st.st_mtime) & 0xFFFFFFFF,
            st.st_size & 0xFFFFFFFF,
            0,
            0,
        )
    head = marshal.dumps(index)
    data = _HEAD + MAGIC_NUMBER + len(head).to_bytes(4, "little") + head + bytes(blob)
    os.makedirs(os.path.join(package_dir, "__pycache__"), exist_ok=True)
    fsutil.write_atomic(pack_path(package_dir), data, mode=0o644)
    return len(index)


def _compile_for_pack(source: bytes, path: str) -> "CodeType":
    """``source`` compiled as CPython would, asserts kept and line numbers the source's,
    but without what only readers and the type checker use:

    * the docstrings of the module, its classes and functions;
    * the annotations of functions' parameters and returns, and every annotation in a
      module's or class's body (``uid: int | None`` beside ``__slots__``: each fills the
      class's ``__annotations__``); an annotated value becomes a plain assignment. A
      function body's annotations stay: Python never evaluates them, and a bare one makes
      its name local;
    * with no annotation left to defer, ``from __future__ import annotations``.

    Nothing of hostjob reads annotations when it runs: no dataclasses, NamedTuple or
    TypedDict bodies, no ``get_type_hints`` (``tests/unit/test_codepack.py`` holds the
    source to that). The ordinary imports (library users, the tests' ``src/``) keep it all.
    """
    import ast

    tree = ast.parse(source, path)
    tree.body = _for_pack(_without_docstring(tree.body), in_function=False)
    return compile(ast.fix_missing_locations(tree), path, "exec", dont_inherit=True)


def _for_pack(block: "list[ast.stmt]", in_function: bool) -> "list[ast.stmt]":
    """``block``'s statements as ``_compile_for_pack`` keeps them, at any depth."""
    import ast

    kept: list[ast.stmt] = []
    for statement in block:
        if isinstance(statement, ast.AnnAssign) and not in_function:
            if statement.value is None:
                continue
            statement = ast.copy_location(
                ast.Assign(targets=[statement.target], value=statement.value), statement
            )
        elif isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
            if [alias.name for alias in statement.names] == ["annotations"]:
                continue
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            statement.returns = None
            arguments = statement.args
            variadic = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, *variadic):
                arg.annotation = None
            body = _for_pack(_without_docstring(statement.body), in_function=True)
            statement.body = body or [ast.Pass()]
        elif isinstance(statement, ast.ClassDef):
            body = _for_pack(_without_docstring(statement.body), in_function=False)
            statement.body = body or [ast.Pass()]
        else:  # if, for, while, with, try, match: their blocks, in the same scope
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if inner:
                    setattr(statement, field, _for_pack(inner, in_function) or [ast.Pass()])
            for part in (*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())):
                part.body = _for_pack(part.body, in_function) or [ast.Pass()]
        kept.append(statement)
    return kept  # the caller puts a ``pass`` where a block may not be empty


def _without_docstring(body: "list[ast.stmt]") -> "list[ast.stmt]":
    import ast

    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return body[1:]
    return body


if __name__ == "__main__":  # python -m hostjob.codepack: the pack of this installed hostjob
    import os

    count = build(os.path.dirname(os.path.abspath(__file__)))
    print(f"codepack: {count} modules")
