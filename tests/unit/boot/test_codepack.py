"""hostjob.boot.codepack: the pack of byte code bin/hostjob imports from, and every way it
steps aside (a changed source, a foreign or broken pack, a pack replaced under it,
HOSTJOB_NO_CODEPACK=1), on a small package of its own; when a command is to have one
made (``wanted``); and what only site.py finds, under ``python -S``. bin/hostjob itself,
in each install's layout, and the first command's build: test_codepack_build.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob.boot import codepack, codepack_build
from tests.helpers import REPO


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    """``packpkg`` with a subpackage, importable from tmp_path; forgotten afterwards."""
    top = tmp_path / "packpkg"
    (top / "sub").mkdir(parents=True)
    (top / "__init__.py").write_text("VALUE = 'init'\n")
    (top / "plain.py").write_text("from packpkg.sub import leaf\nVALUE = leaf.VALUE + 1\n")
    (top / "sub" / "__init__.py").write_text("")
    (top / "sub" / "leaf.py").write_text("VALUE = 41\n")
    (top / "boot").mkdir()  # where hostjob keeps its pack's slot
    (top / "boot" / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    yield top
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m == "packpkg" or m.startswith("packpkg.")]:
        del sys.modules[name]


@pytest.fixture
def finders() -> Iterator[list[codepack.PackFinder]]:
    installed: list[codepack.PackFinder] = []
    yield installed
    for finder in installed:
        sys.meta_path.remove(finder)
        if finder.fd >= 0:
            os.close(finder.fd)


def install(top: Path, installed: list[codepack.PackFinder]) -> codepack.PackFinder:
    finder = codepack.install(str(top))
    assert finder is not None
    installed.append(finder)
    return finder


def test_modules_come_from_the_pack(package: Path, finders: list[codepack.PackFinder]) -> None:
    count = codepack_build.build(str(package))
    finder = install(package, finders)
    # and where _json & co. lie
    ours = {"packpkg", "packpkg.plain", "packpkg.sub", "packpkg.sub.leaf", "packpkg.boot"}
    assert set(finder.index) - ours <= {
        *codepack.STDLIB_EXTENSIONS,
    }
    assert len(finder.index) == count
    import packpkg.plain  # type: ignore[import-not-found]

    assert packpkg.plain.VALUE == 42
    for name in ("packpkg", "packpkg.plain", "packpkg.sub", "packpkg.sub.leaf"):
        module = sys.modules[name]
        assert module.__spec__ is not None and module.__spec__.loader is finder, name
    # as from a .pyc: __file__ is the source, a package has its __path__
    assert packpkg.plain.__file__ == str(package / "plain.py")
    assert packpkg.plain.__cached__ == finder.path  # the code's file: the pack
    assert sys.modules["packpkg.sub"].__path__ == [str(package / "sub")]


def test_a_changed_source_is_imported_the_ordinary_way(
    package: Path, finders: list[codepack.PackFinder]
) -> None:
    codepack_build.build(str(package))
    leaf = package / "sub" / "leaf.py"
    leaf.write_text("VALUE = 99  # an upgrade after the pack was made\n")
    finder = install(package, finders)
    import packpkg.plain

    assert packpkg.plain.VALUE == 100
    assert sys.modules["packpkg.sub.leaf"].__spec__.loader is not finder  # type: ignore[union-attr]
    assert packpkg.plain.__spec__.loader is finder


def test_no_pack_a_foreign_pack_a_broken_pack_or_turned_off(
    package: Path, finders: list[codepack.PackFinder], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = list(sys.meta_path)
    assert codepack.install(str(package)) is None  # none made
    codepack_build.build(str(package))
    path = Path(codepack.pack_path(str(package)))
    good = path.read_bytes()
    path.write_bytes(good[:4] + b"\0\0\0\0" + good[8:])  # another Python's magic
    assert codepack.install(str(package)) is None
    path.write_bytes(good[:40])  # cut short
    assert codepack.install(str(package)) is None
    codepack_build.mark_attempt(str(package), "an attempt's mark: no module in it")
    assert codepack.install(str(package)) is None
    path.write_bytes(good)
    monkeypatch.setenv("HOSTJOB_NO_CODEPACK", "1")
    assert codepack.install(str(package)) is None
    assert sys.meta_path == before


def test_a_closed_or_reused_fd_is_reopened(
    package: Path, finders: list[codepack.PackFinder], tmp_path: Path
) -> None:
    """A forked container process closes the fds it does not keep, and the number may
    come back as another file: the pack is read again from its path, never from that."""
    codepack_build.build(str(package))
    finder = install(package, finders)
    os.close(finder.fd)
    other = tmp_path / "other"
    other.write_bytes(b"\0" * 4096)
    fd = os.open(other, os.O_RDONLY)
    try:
        assert fd == finder.fd  # the lowest free number: the pack's old one
        import packpkg.plain

        assert packpkg.plain.VALUE == 42
        assert finder.fd != fd
    finally:
        os.close(fd)


def test_a_pack_replaced_under_a_live_finder_is_not_used(
    package: Path, finders: list[codepack.PackFinder], tmp_path: Path
) -> None:
    """A reinstall renames another pack over this one while a command runs: the index
    in hand says where this pack's code lies, not the other's. Once the fd is lost (as
    a forked container process loses it) the file is opened again, found to be another,
    and every module from then on is imported from its source."""
    codepack_build.build(str(package))
    finder = install(package, finders)
    other = tmp_path / "other" / "packpkg"
    shutil.copytree(package, other, ignore=shutil.ignore_patterns("__pycache__"))
    (other / "sub" / "leaf.py").write_text("VALUE = 77\n")  # as long as the source's
    codepack_build.build(str(other))
    os.replace(codepack.pack_path(str(other)), codepack.pack_path(str(package)))
    os.close(finder.fd)
    import packpkg.plain

    assert packpkg.plain.VALUE == 42  # leaf's source (41), not the other pack's code (77)
    assert finder.index == {} and finder.fd == -1
    assert finder.find_spec("packpkg.sub.leaf") is None


def test_a_live_finder_keeps_reading_its_own_pack_after_a_replacement(
    package: Path, finders: list[codepack.PackFinder], tmp_path: Path
) -> None:
    """While its fd is open, the finder reads the file its index came from (renamed
    away, not changed), whatever now lies at the path."""
    codepack_build.build(str(package))
    finder = install(package, finders)
    os.replace(codepack.pack_path(str(package)), tmp_path / "renamed")
    codepack_build.mark_attempt(str(package))
    import packpkg.plain

    assert packpkg.plain.VALUE == 42
    assert packpkg.plain.__spec__.loader is finder and finder.index


def test_a_pack_is_wanted_when_missing_and_writable(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command has a pack made when there is none (or a real .pyc in its place), no
    attempt began in the last hour, and Python may write bytecode here."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.delenv("HOSTJOB_NO_CODEPACK", raising=False)
    assert codepack.wanted(str(package))  # no __pycache__ yet: the package dir is writable
    slot = Path(codepack.pack_path(str(package)))
    slot.parent.mkdir()
    slot.write_bytes(codepack.MAGIC_NUMBER + bytes(12))  # what pip's compile leaves there
    assert codepack.wanted(str(package))
    codepack_build.mark_attempt(str(package), "OSError: an attempt that failed")
    assert not codepack.wanted(str(package))
    long_ago = slot.stat().st_mtime - codepack.RETRY_AFTER - 1
    os.utime(slot, (long_ago, long_ago))
    assert codepack.wanted(str(package))
    monkeypatch.setenv("HOSTJOB_NO_CODEPACK", "1")
    assert not codepack.wanted(str(package))
    monkeypatch.delenv("HOSTJOB_NO_CODEPACK")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE=1
    assert not codepack.wanted(str(package))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    codepack_build.build(str(package))
    assert not codepack.wanted(str(package))


def test_under_python_s_a_module_only_site_finds_is_found() -> None:
    """bin/hostjob, once specialised, starts as ``python -S``: a module outside the
    package's directory and the standard library (here pytest, in the test venv's
    site-packages, or the system's that a venv of a guest's Python sees) is found after
    site.py's work, done then, once."""
    probe = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO / "src")!r})
        from hostjob.boot import codepack
        sys.meta_path.append(codepack.SiteFallback())
        before = "site" in sys.modules
        import pytest
        try:
            import hostjob_no_such_module
        except ModuleNotFoundError:
            missing = True
        import site
        found_by_site = any(pytest.__file__.startswith(d) for d in site.getsitepackages())
        print(before, "site" in sys.modules, found_by_site, missing)
        """
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.split() == ["False", "True", "True", "True"], result.stderr


def run_probe(venv: Path, probe: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """``probe`` run by the venv's Python as bin/hostjob runs (``-S``), the pack on."""
    return subprocess.run(
        [str(venv / "bin" / "python"), "-S", *flags, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "HOSTJOB_NO_CODEPACK"},
    )


def test_the_installed_command_imports_from_its_pack() -> None:
    """scripts/install made the pack of the installed hostjob, and bin/hostjob uses it,
    for hostjob's modules (whose pack code does not import __future__) and to find
    the standard extensions it uses (_json, resource), loaded with their calls bound
    lazily and the process's dlopen flags left as they were."""
    venv = REPO / ".venv"
    site = sorted((venv / "lib").glob("python3*/site-packages"))
    if not site or not (site[-1] / "hostjob").is_dir():
        pytest.fail("no installed hostjob (scripts/install --venv)")
    assert Path(codepack.pack_path(str(site[-1] / "hostjob"))).is_file()
    probe = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(site[-1])!r})
        from hostjob.boot import codepack
        finder = codepack.install(os.path.dirname(os.path.dirname(codepack.__file__)))
        flags = sys.getdlopenflags()
        import hostjob.cli.main, hostjob.runtime.container
        import importlib, _json
        # the first of the runtime path's extensions that this Python has as a file
        # (Debian's 3.13 and 3.14 build _json in: it is found as a built-in then)
        name = next(n for n in codepack.STDLIB_EXTENSIONS if n in finder.index)
        ext = importlib.import_module(name)
        print(hostjob.cli.main.__spec__.loader is finder,
              hostjob.runtime.container.__spec__.loader is finder,
              "__future__" not in sys.modules,
              ext.__spec__.origin == finder.index[name][1],
              type(ext.__spec__.loader) is codepack.LazyBindingLoader,
              sys.getdlopenflags() == flags,
              _json.scanstring('"ab"', 1) == ("ab", 4))
        """
    )
    result = run_probe(venv, probe)
    assert result.stdout.split() == ["True"] * 7, result.stderr


def test_a_changed_extension_is_found_the_ordinary_way(
    package: Path, finders: list[codepack.PackFinder]
) -> None:
    """An extension module's entry is only where it lies: another file there (an upgrade
    of Python) is found by the ordinary finders."""
    codepack_build.build(str(package))
    finder = install(package, finders)
    name = next(iter(n for n in codepack.STDLIB_EXTENSIONS if n in finder.index), None)
    if name is None:
        pytest.skip("this Python has the extensions built in")
    kind, origin, mtime, size, offset, length = finder.index[name]
    spec = finder.find_spec(name)
    assert spec is not None and spec.origin == origin and spec.loader is not finder
    finder.index[name] = (kind, origin, mtime, size + 1, offset, length)
    assert finder.find_spec(name) is None


def test_the_installed_command_runs_through_a_symlink(tmp_path: Path) -> None:
    """docs/operators.md links the command to a stable path (/usr/local/bin/hostjob): it
    finds its site-packages and pack from where the link leads (sys.path[0], symlinks
    resolved), not from the link's directory (it failed with No module named 'hostjob')."""
    venv = REPO / ".venv"
    link = tmp_path / "hostjob"
    link.symlink_to(venv / "bin" / "hostjob")
    result = subprocess.run(
        [str(link), "--root", str(tmp_path / "state"), "delete", "--force", "missing"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    version = subprocess.run([str(link), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("hostjob version "), version.stderr


def test_the_pack_leaves_docstrings_out_and_asserts_in(
    package: Path, finders: list[codepack.PackFinder]
) -> None:
    """The command never reads a docstring (~15% of the bytes each import unmarshals):
    the pack's code has none; everything else runs as compiled by CPython, asserts too,
    with the source's line numbers."""
    (package / "documented.py").write_text(
        textwrap.dedent(
            '''
            """The module's docstring."""


            class Thing:
                """A class's."""


            def only_a_docstring():
                """A function whose body is its docstring."""


            def checked(value):
                """A function's."""
                assert value > 0, "positive"
                return value
            '''
        )
    )
    codepack_build.build(str(package))
    install(package, finders)
    import packpkg.documented as documented  # type: ignore[import-not-found]

    assert documented.__doc__ is None and documented.Thing.__doc__ is None
    assert documented.only_a_docstring() is None and documented.only_a_docstring.__doc__ is None
    assert documented.checked(3) == 3
    with pytest.raises(AssertionError, match="positive"):
        documented.checked(0)
    assert documented.checked.__code__.co_firstlineno == 13


def test_the_pack_leaves_annotations_out_and_values_in(
    package: Path, finders: list[codepack.PackFinder]
) -> None:
    """Type annotations are the type checker's (~7% of the bytes, a fifth of a class-heavy
    module's run): the pack's code has none, nor the future import that deferred them, and
    every annotated value is still assigned, at any depth; one in a function body stays
    (it makes its name local)."""
    (package / "annotated.py").write_text(
        textwrap.dedent(
            """
            from __future__ import annotations

            LIMIT: int = 3
            NAMES: list[str]
            if LIMIT:
                GUARDED: Undefined = 1
                ONLY: Undefined


            class Point:
                __slots__ = ("x", "y")
                x: int
                y: int
                ORIGIN: tuple[int, int] = (0, 0)

                def __init__(self, x: int, y: int = 0) -> None:
                    self.x = x
                    self.y = y


            class OnlyAnnotations:
                a: int


            def total(*values: int, scale: float = 1.0, **rest: str) -> float:
                count: int
                count = len(values)
                return sum(values) * scale + count - count


            def shadow() -> int:
                LIMIT: int = 7
                return LIMIT


            def local_class() -> type:
                class Inner:
                    size: Undefined = 2
                    bare: Undefined
                return Inner


            def docstring_only() -> None:
                "Only a docstring."
            """
        )
    )
    codepack_build.build(str(package))
    install(package, finders)
    import packpkg.annotated as annotated  # type: ignore[import-not-found]

    assert annotated.__spec__.loader is finders[0]
    # no annotation is evaluated (`Undefined` names nothing), nor the future import run
    assert "__annotations__" not in vars(annotated) and "annotations" not in vars(annotated)
    assert annotated.GUARDED == 1 and not hasattr(annotated, "ONLY")
    assert annotated.local_class().size == 2
    assert "__annotations__" not in vars(annotated.local_class())
    assert annotated.docstring_only() is None and annotated.docstring_only.__doc__ is None
    assert annotated.LIMIT == 3 and not hasattr(annotated, "NAMES")
    assert "__annotations__" not in vars(annotated.Point)
    assert "__annotations__" not in vars(annotated.OnlyAnnotations)
    assert annotated.Point.ORIGIN == (0, 0)
    point = annotated.Point(2)
    assert (point.x, point.y) == (2, 0)
    assert annotated.total(1, 2, scale=2.0) == 6.0
    assert annotated.total.__annotations__ == {} and annotated.Point.__init__.__annotations__ == {}
    assert annotated.shadow() == 7 and annotated.LIMIT == 3


# What reads annotations at run time, which the pack's code has not got.
ANNOTATION_READERS = {"dataclass", "dataclasses", "NamedTuple", "TypedDict", "get_type_hints",
                      "__annotations__", "get_annotations", "singledispatch"}  # fmt: skip


def test_nothing_of_hostjob_reads_annotations_at_run_time() -> None:
    """The pack drops annotations (above): that holds only while no module of hostjob
    reads them when it runs (outside ``if TYPE_CHECKING:``)."""
    import ast

    found = []
    for path in sorted((REPO / "src" / "hostjob").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        typing_only: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
                typing_only |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            names = []
            if isinstance(node, ast.Name):
                names = [node.id]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name.split(".")[0] for a in node.names]
                names += (
                    [node.module.split(".")[0]]
                    if isinstance(node, ast.ImportFrom) and node.module
                    else []
                )
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n in ANNOTATION_READERS]
    assert found == []


def test_every_folder_of_hostjob_is_a_regular_package() -> None:
    # A folder without __init__.py is a namespace package: the pack cannot hold it, and
    # every command that imports it searches site-packages for its parts (~0.2 ms).
    top = REPO / "src" / "hostjob"
    folders = {p.parent for p in top.rglob("*.py") if "__pycache__" not in p.parts}
    namespace = [str(f.relative_to(top)) for f in folders if not (f / "__init__.py").exists()]
    assert namespace == []
