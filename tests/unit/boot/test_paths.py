"""hostjob.boot.paths and hostjob.boot.env give what os.path and os.environ give (the runtime path
uses them instead of ``os``: see hostjob.boot.paths): compared on generated paths, on a real
tree of symlinks (chains, ``..`` through links, loops, dangling links), and on a child's
inherited environment."""

from __future__ import annotations

import itertools
import os
import posixpath
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostjob.boot import env, paths

# Path names built from the parts that make path arithmetic interesting.
PARTS = st.sampled_from(["", "a", "b", "/", "//", "///", ".", "..", "a.b", " ", "é"])
PATHS = st.lists(PARTS, max_size=8).map("".join)
SLASHED = st.lists(st.sampled_from(["a", "b", ".", "..", "", "c"]), max_size=6).map("/".join)


@settings(max_examples=600, deadline=None)
@given(PATHS, st.lists(PATHS, max_size=4))
def test_lexical_functions_match_os_path(path: str, more: list[str]) -> None:
    assert paths.join(path, *more) == posixpath.join(path, *more)
    assert paths.split(path) == posixpath.split(path)
    assert paths.dirname(path) == posixpath.dirname(path)
    assert paths.basename(path) == posixpath.basename(path)
    assert paths.isabs(path) == posixpath.isabs(path)
    assert paths.normpath(path) == posixpath.normpath(path)
    assert paths.abspath(path) == posixpath.abspath(path)


@settings(max_examples=400, deadline=None)
@given(SLASHED, SLASHED, st.booleans(), st.booleans())
def test_relpath_matches_os_path(path: str, start: str, abs_path: bool, abs_start: bool) -> None:
    path = "/" + path if abs_path else path
    start = "/" + start if abs_start else start
    if not path:
        with pytest.raises(ValueError):
            paths.relpath(path, start)
        return
    assert paths.relpath(path, start or ".") == posixpath.relpath(path, start or ".")


@pytest.fixture
def link_tree(tmp_path: Path) -> Path:
    """A tree whose links cover what realpath must resolve."""
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_text("x")
    (tmp_path / "abs").symlink_to(tmp_path / "d")  # absolute
    (tmp_path / "rel").symlink_to("d/e")  # relative
    (tmp_path / "chain").symlink_to("rel")  # a link to a link
    (tmp_path / "up").symlink_to("d/e/..")  # `..` inside the target
    (tmp_path / "d" / "e" / "back").symlink_to("../../abs")  # `..` out of a linked dir
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "self").symlink_to("self/x")
    (tmp_path / "dangling").symlink_to("nowhere/at/all")
    (tmp_path / "root").symlink_to("/")
    return tmp_path


# Through a loop of links, interpreters differ: 3.11 and 3.12 made what follows the loop
# absolute when an empty part came next (`loop1//abs` gave `/abs`), 3.13 goes on resolving
# the loop's parts. hostjob's answer there, the same on every one, is pinned below.
THROUGH_A_LOOP = re.compile(r"(^|/)(loop1|self)(/|$)")

NAMES = ["abs", "rel", "chain", "up", "d", "e", "back", "f", "..", ".", "loop1", "self",
         "dangling", "root", "missing", "", "tmp"]  # fmt: skip


def test_realpath_matches_os_path_on_a_tree_of_links(
    link_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(link_tree / "d")
    checked = 0
    for depth in (1, 2, 3):
        for names in itertools.product(NAMES, repeat=depth):
            rel = "/".join(names)
            for path in (f"{link_tree}/{rel}", rel, f"{link_tree}//{rel}/"):
                if THROUGH_A_LOOP.search(path):
                    continue
                assert paths.realpath(path) == os.path.realpath(path), path
                checked += 1
    assert checked > 10_000


def test_realpath_of_a_loop_stops_where_it_loops(link_tree: Path) -> None:
    loop = str(link_tree / "loop1" / "x")
    assert paths.realpath(loop) == os.path.realpath(loop) == f"{link_tree}/loop1/x"
    # what follows the loop stays under it, an empty part or not: never the root's
    for rest, kept in (("abs", "abs"), ("/abs", "abs"), ("//abs/", "abs"), ("d/../f", "f")):
        assert paths.realpath(f"{link_tree}/loop1/{rest}") == f"{link_tree}/loop1/{kept}"
    assert paths.realpath(f"{link_tree}//loop1//") == f"{link_tree}/loop1"
    assert paths.realpath(f"{link_tree}/self/y") == f"{link_tree}/self/x/y"


def test_existence_and_kind_match_os_path(link_tree: Path) -> None:
    (link_tree / "todir").symlink_to("d")
    for name in ["d", "d/e/f", "abs", "todir", "dangling", "loop1", "missing", "d/e/f/x",
                 "", "bad\0name", "root"]:  # fmt: skip
        path = str(link_tree / name) if name else name
        for ours, theirs in (
            (paths.exists, os.path.exists),
            (paths.lexists, os.path.lexists),
            (paths.isdir, os.path.isdir),
            (paths.isfile, os.path.isfile),
        ):
            assert ours(path) == theirs(path), (ours.__name__, name)


@pytest.mark.parametrize("name", ["plain", "é", "bad\udcffbyte", b"raw\xff"])
def test_fsencode_matches_os(name: str | bytes) -> None:
    assert paths.fsencode(name) == os.fsencode(name)


def test_getenv_sees_what_os_environ_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTJOB_TEST_VALUE", "é \udcff")
    monkeypatch.delenv("HOSTJOB_TEST_MISSING", raising=False)
    assert env.getenv("HOSTJOB_TEST_VALUE") == os.environ["HOSTJOB_TEST_VALUE"]
    assert env.getenv("HOSTJOB_TEST_MISSING") is None
    assert env.getenv("HOSTJOB_TEST_MISSING", "d") == "d"
    assert env.environ_copy() == dict(os.environ)


def test_popenv_removes_it_for_this_process_and_its_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOSTJOB_TEST_POP", "v")
    assert env.popenv("HOSTJOB_TEST_POP") == "v"
    assert "HOSTJOB_TEST_POP" not in os.environ
    assert env.popenv("HOSTJOB_TEST_POP") is None
    # a child started without an explicit env inherits the C environment: it is gone there
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('HOSTJOB_TEST_POP'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == "None"
