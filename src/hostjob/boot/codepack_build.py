"""Making hostjob's code pack, which ``hostjob.boot.codepack`` reads (why it exists, where it
lies and when it is used: see there).

At install, ``python -m hostjob.boot.codepack_build`` (scripts/install runs it) makes the
pack of the installed package it is imported from; ``--script PATH`` also specialises
that script (``specialise``). An install that did not, as a plain ``pip install`` does
not, gets both from its first command that may write them: ``codepack.start`` starts a
detached ``build_detached``. Two such commands at once make one pack (a lock, then a
second look); each write is whole or none (a rename); and a build that fails is tried
again only after ``codepack.RETRY_AFTER`` seconds. Nothing of this module runs in a
command's process.
"""

from __future__ import annotations

import marshal
import sys
from _frozen_importlib_external import MAGIC_NUMBER

from hostjob.boot import codepack

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ast
    from types import CodeType

# bin/hostjob's second line: what ``specialise`` recognises the script by.
SCRIPT_MARK = b"# hostjob's command."
# Longer interpreter lines are cut by older kernels (127 bytes before Linux 5.1).
SHEBANG_MAX = 127
# A builder never lingers: its attempt's mark stays, and the next one is an hour away.
BUILD_TIMEOUT = 300


def build_detached(site_packages: str, script: str) -> None:
    """The detached builder (``codepack.BUILDER``): after any builder before it (a lock on the
    package's directory), if the pack is still wanted, the mark of an attempt, the pack,
    then the script specialised. Bounded in time; silent."""
    import os
    import signal

    from hostjob.linux import flock

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(BUILD_TIMEOUT)
    package_dir = f"{site_packages}/hostjob"
    try:
        fd = os.open(package_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        lock = flock.lock_fd(fd)
    except OSError:
        return
    with lock:
        if not codepack.wanted(package_dir):
            return  # that one made it, or failed a moment ago
        try:
            mark_attempt(package_dir)
        except OSError:
            return
        try:
            build(package_dir)
        except Exception as err:
            try:
                mark_attempt(package_dir, f"{type(err).__name__}: {err}")
            except OSError:
                pass
            return
        specialise(script, site_packages)


def mark_attempt(package_dir: str, reason: str = "") -> None:
    """Put the mark of an attempt where the pack goes: a pack with no module, then
    why the attempt failed, for a reader of the file (``codepack.RETRY_AFTER``)."""
    _write(package_dir, _pack({}, reason.encode(errors="replace")[:4096]))


def _pack(index: codepack.Index, code: bytes) -> bytes:
    head = marshal.dumps(index)
    return codepack.HEAD + MAGIC_NUMBER + len(head).to_bytes(4, "little") + head + code


def _write(package_dir: str, data: bytes) -> None:
    from hostjob.linux import fsutil

    fsutil.ensure_dir(codepack.pack_path(package_dir).rpartition("/")[0])
    fsutil.write_atomic(codepack.pack_path(package_dir), data, mode=0o644)


def build(package_dir: str) -> int:
    """Write the pack of every module under ``package_dir`` (the installed package),
    compiled from its source by ``_compile_for_pack``; the number of modules. Written whole
    or not at all."""
    import importlib.util
    import os

    package_dir = os.path.abspath(package_dir)
    top = os.path.basename(package_dir)
    index: codepack.Index = {}
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
            with open(source, "rb") as f:
                st = os.fstat(f.fileno())  # of the very file read (an install may be replacing it)
                code = marshal.dumps(_compile_for_pack(f.read(), source))
            mtime, size = int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF
            kind = codepack.PACKAGE if stem == "__init__" else codepack.MODULE
            index[module] = (kind, source, mtime, size, len(blob), len(code))
            blob += code
    if top not in index:
        raise ValueError(f"{package_dir} is not a package")
    for name in codepack.STDLIB_EXTENSIONS:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".so"):
            continue  # built in, or missing in this Python
        st = os.stat(spec.origin)
        mtime, size = int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF
        index[name] = (codepack.EXTENSION, spec.origin, mtime, size, 0, 0)
    _write(package_dir, _pack(index, bytes(blob)))
    return len(index)


def _is_this_python(path: str) -> bool:
    import os

    if path == sys.executable:
        return True
    if os.path.dirname(path) != os.path.dirname(sys.executable):
        return False  # (a venv's python is the system's file too, but not its site)
    try:
        return os.path.samefile(path, sys.executable)
    except OSError:
        return False


def specialise(script: str, site_packages: str) -> bool:
    """Write into ``script`` (bin/hostjob as pip wrote it) what its first run found out,
    as scripts/install does at install: where the package lies, in the place of the
    search (its code cost 0.4 M instructions a command to compile: every run compiles the
    script), and ``python -S`` on its first line, since bin/hostjob finds its package
    itself (site.py is 2-3 ms of every command: 2.3 ms in a venv of Debian's python3, 3 ms
    for the system's with its dist-packages; what only site.py's directories hold is
    still found, ``codepack.SiteFallback``). The directory is written relative to the
    script's when it lies below it (a tree moved whole still works), else whole.

    Only ``script`` as pip writes bin/hostjob (``#!``, the path of this interpreter or
    of another name for it in the same directory, as a venv's ``python3`` is for its
    ``python``, and no argument), only this user's own (root running another's script
    leaves it to them) and only if they may replace it; its mode kept. A reinstall
    writes the plain script again, and resets the pack with it. True if done."""
    import os
    import stat

    from hostjob.linux import fsutil

    script = os.path.realpath(script)  # the file, not a link to it
    try:
        with open(script, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(65536)  # bin/hostjob is 2 kB
    except OSError:
        return False
    first, _, rest = data.partition(b"\n")
    body = _specialised(rest, os.path.dirname(os.path.dirname(script)), site_packages)
    if (
        body is None
        or not stat.S_ISREG(st.st_mode)
        or len(data) == 65536
        or not first.startswith(b"#!/")
        or len(first) + 3 > SHEBANG_MAX
        or not _is_this_python(os.fsdecode(first[2:]))
        or st.st_uid != os.geteuid()
        or not os.access(os.path.dirname(script), os.W_OK)
    ):
        return False
    with fsutil.AtomicFile(script, mode=stat.S_IMODE(st.st_mode)) as f:
        f.write(first + b" -S\n" + body)
    return True


# The first and the last of bin/hostjob's lines that ``specialise`` replaces: the
# search for the package's directory.
SEARCH = (b"# The directory that holds the package", b"    where = PathFinder")


def _specialised(body: bytes, top: str, site_packages: str) -> bytes | None:
    """bin/hostjob's ``body`` (but its first line) with ``site_packages`` written in, if
    it is bin/hostjob's; ``top``: the directory above the script's."""
    lines = body.split(b"\n")
    if not lines[0].startswith(SCRIPT_MARK):
        return None
    found = [[i for i, line in enumerate(lines) if line.startswith(mark)] for mark in SEARCH]
    if [len(f) for f in found] != [1, 1] or found[0][0] > found[1][0]:
        return None
    (first,), (last,) = found
    if site_packages.startswith(f"{top}/"):
        where = f"sys.path[0].rpartition('/')[0] + {site_packages[len(top) :]!a}"
    else:
        where = ascii(site_packages)
    line = f"where = {where}  # (codepack_build wrote it in)"
    return b"\n".join([*lines[:first], line.encode(), *lines[last + 1 :]])


def _compile_for_pack(source: bytes, path: str) -> CodeType:
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
    TypedDict bodies, no ``get_type_hints`` (``tests/unit/boot/test_codepack.py`` holds the
    source to that). The ordinary imports (library users, the tests' ``src/``) keep it all.
    """
    import ast

    tree = ast.parse(source, path)
    tree.body = _for_pack(_without_docstring(tree.body), in_function=False)
    return compile(ast.fix_missing_locations(tree), path, "exec", dont_inherit=True)


def _for_pack(block: list[ast.stmt], in_function: bool) -> list[ast.stmt]:
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


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    import ast

    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return body[1:]
    return body


def main(argv: list[str]) -> int:
    """``python -m hostjob.boot.codepack_build [--script PATH]``: the pack of the hostjob this
    module is imported from (and that script specialised)."""
    import os

    if argv and (argv[0] != "--script" or len(argv) != 2):
        print("usage: python -m hostjob.boot.codepack_build [--script PATH]", file=sys.stderr)
        return 2
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(codepack.__file__)))
    count = build(package_dir)
    print(f"codepack: {count} modules")
    if argv:
        done = specialise(argv[1], os.path.dirname(package_dir))
        print(f"codepack: {argv[1]}: {'now started as python -S' if done else 'left as it was'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
