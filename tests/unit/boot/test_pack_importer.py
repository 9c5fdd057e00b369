"""hostjob.boot.codepack.PackImporter: a command's ``__import__``, which makes the pack's
modules without importlib's steps. The modules it makes are what importlib would make of
the same spec, an error leaves nothing behind, and everything it does not make -- a
changed source, a relative import, a name that is no module of the pack, any import once
a second thread runs -- is importlib's, on a small package of its own (the package and
finder fixtures of test_codepack.py)."""

from __future__ import annotations

import builtins
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hostjob.boot import codepack, codepack_build
from tests.helpers import REPO
from tests.unit.boot.test_codepack import finders, install, package, run_probe

__all__ = ["finders", "package"]  # the fixtures, used by name


class Counting(codepack.PackImporter):
    """The importer, counting the modules it made itself."""

    __slots__ = ("made",)

    def __init__(self, finder: codepack.PackFinder, fallback: object) -> None:
        super().__init__(finder, fallback)  # type: ignore[arg-type]
        self.made: list[str] = []

    def load(self, name: str) -> object:  # type: ignore[override]
        module = super().load(name)
        if module is not None:
            self.made.append(name)
        return module


@pytest.fixture
def start(package: Path, finders: list[codepack.PackFinder]) -> Iterator[Callable[[], Counting]]:
    """``start()``: the package's pack made (with what the test wrote into it) and the
    importer in place, as ``codepack.start`` puts it; the interpreter's own afterwards."""
    fallback = builtins.__import__

    def started() -> Counting:
        codepack_build.build(str(package))
        counting = Counting(install(package, finders), fallback)
        builtins.__import__ = counting  # type: ignore[assignment]
        return counting

    try:
        yield started
    finally:
        builtins.__import__ = fallback


def test_the_modules_are_importlibs_own(start: Callable[[], Counting], package: Path) -> None:
    importer = start()
    import packpkg.plain  # type: ignore[import-not-found]
    from packpkg.sub import leaf  # type: ignore[import-not-found]

    assert (packpkg.plain.VALUE, leaf.VALUE) == (42, 41)
    assert importer.made == ["packpkg", "packpkg.sub", "packpkg.sub.leaf", "packpkg.plain"]
    finder = importer.finder
    plain, sub = sys.modules["packpkg.plain"], sys.modules["packpkg.sub"]
    assert plain.__spec__ is not None and plain.__spec__.loader is finder
    assert plain.__loader__ is finder
    assert plain.__file__ == str(package / "plain.py")
    assert plain.__cached__ == finder.path
    assert (plain.__package__, sub.__package__) == ("packpkg", "packpkg.sub")
    assert sub.__path__ == [str(package / "sub")]
    assert not hasattr(plain, "__path__")
    assert sys.modules["packpkg"].sub is sub and sub.leaf is leaf  # each on its parent


def test_an_import_that_raises_leaves_nothing(start: Callable[[], Counting], package: Path) -> None:
    (package / "broken.py").write_text("import packpkg.sub.leaf\nraise RuntimeError('no')\n")
    importer = start()
    with pytest.raises(RuntimeError, match="no"):
        import packpkg.broken  # type: ignore[import-not-found]  # noqa: F401
    assert "packpkg.broken" not in sys.modules
    assert "packpkg.sub.leaf" in sys.modules  # what it imported first stays, as importlib's
    assert importer.made == ["packpkg", "packpkg.sub", "packpkg.sub.leaf"]


def test_a_circular_import_fails_as_importlibs(
    start: Callable[[], Counting], package: Path
) -> None:
    (package / "one.py").write_text("from packpkg.two import TWO\nONE = 1\n")
    (package / "two.py").write_text("from packpkg.one import ONE\nTWO = 2\n")
    start()
    with pytest.raises(ImportError, match="cannot import name 'ONE'"):
        import packpkg.one  # type: ignore[import-not-found]  # noqa: F401
    assert "packpkg.one" not in sys.modules and "packpkg.two" not in sys.modules


def test_what_it_does_not_make_is_importlibs(start: Callable[[], Counting], package: Path) -> None:
    importer = start()
    (package / "sub" / "leaf.py").write_text("VALUE = 7  # changed after the pack\n")
    (package / "rel.py").write_text("from .sub import leaf\nVALUE = leaf.VALUE\n")
    import packpkg.rel  # type: ignore[import-not-found]  # not in the pack: importlib

    assert packpkg.rel.VALUE == 7
    assert "packpkg.sub.leaf" not in importer.made  # a changed source
    assert "packpkg.rel" not in importer.made
    import json  # the standard library's, through the fallback

    assert json.loads("1") == 1


def test_with_a_second_thread_every_import_is_importlibs(start: Callable[[], Counting]) -> None:
    importer = start()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        import packpkg.plain  # noqa: F401
    finally:
        stop.set()
        worker.join()
    assert importer.made == []
    assert sys.modules["packpkg.plain"].__spec__.loader is importer.finder  # type: ignore[union-attr]


def installed() -> tuple[Path, str]:
    """The tests' venv and its site-packages, which hold the installed hostjob."""
    venv = REPO / ".venv"
    site = sorted((venv / "lib").glob("python3*/site-packages"))
    if not site or not (site[-1] / "hostjob").is_dir():
        pytest.fail("no installed hostjob (scripts/install --venv)")
    return venv, str(site[-1])


def test_the_command_imports_through_it() -> None:
    """bin/hostjob's start (``codepack.start``) puts the importer in place: the
    command's modules are the pack's, made by it."""
    venv, site = installed()
    probe = textwrap.dedent(
        f"""
        import builtins, sys
        sys.path.insert(0, {site!r})
        from hostjob.boot import codepack
        codepack.start({site!r})
        import hostjob.cli.main
        from hostjob.runtime import container
        importer = builtins.__import__
        print(type(importer).__name__,
              hostjob.cli.main.__spec__.loader is importer.finder,
              container.__spec__.loader is importer.finder,
              container.__package__)
        """
    )
    result = run_probe(venv, probe)
    assert result.stdout.split() == ["PackImporter", "True", "True", "hostjob.runtime"], (
        result.stderr
    )


def test_traced_imports_are_importlibs() -> None:
    """Under ``-X importtime`` (and ``python -v``) every import is importlib's, so that
    its report names each of the command's modules."""
    venv, site = installed()
    probe = textwrap.dedent(
        f"""
        import builtins, sys
        sys.path.insert(0, {site!r})
        from hostjob.boot import codepack
        codepack.start({site!r})
        import hostjob.cli.main
        print(type(builtins.__import__).__name__)
        """
    )
    result = run_probe(venv, probe, "-X", "importtime")
    assert result.stdout.split() == ["builtin_function_or_method"], result.stderr
    assert "| hostjob.cli.main" in result.stderr
