"""bin/hostjob in the layout of each ordinary install, and hostjob.boot.codepack_build: the
first command of an install that has no pack has one made, in a detached process that
holds nothing of the command's, one at a time, whole or not at all, tried again only an
hour after a failure; a command that may not write beside the package imports the
ordinary way; the script is started as ``python -S`` from then on.

Each test lays out a copy of the package and the script as pip does (compiled, so a
real ``.pyc`` lies where the pack goes) under its own directory, whose version says
which copy answered, and runs it with the test venv's base interpreter (Debian's
python3 here: no site-packages of the test venv, where another hostjob lies)."""

from __future__ import annotations

import compileall
import fcntl
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hostjob.boot import codepack, codepack_build
from tests.helpers import REPO, alive, wait_for
from tests.installs import builders, built, imports_from_the_pack, pack_index

PYTHON = os.path.realpath(sys.executable)
VERSION = "{}.{}".format(*sys.version_info[:2])

# Where pip puts the script and the package, under the install's root.
LAYOUTS = {
    "venv": ("bin", f"lib/python{VERSION}/site-packages"),  # and pipx's venvs
    "user": ("home/.local/bin", f"home/.local/lib/python{VERSION}/site-packages"),
    "system": ("usr/local/bin", f"usr/local/lib/python{VERSION}/dist-packages"),  # Debian
    "prefix": ("prefix/local/bin", f"prefix/local/lib/python{VERSION}/dist-packages"),
    "deb": ("usr/bin", "usr/lib/python3/dist-packages"),
}


def lay_out(root: Path, layout: tuple[str, str], tag: str) -> tuple[Path, Path]:
    """The script and a compiled copy of the package (whose version ends in ``+tag``)
    where ``layout`` puts them under ``root``: (script, package directory)."""
    bindir, sitedir = layout
    package = root / sitedir / "hostjob"
    shutil.copytree(REPO / "src" / "hostjob", package, ignore=shutil.ignore_patterns("__pycache__"))
    init = package / "__init__.py"
    init.write_text(re.sub(r'(__version__ = "[^"]+)"', rf'\1+{tag}"', init.read_text(), count=1))
    compileall.compile_dir(str(package), quiet=2)  # as pip does at the end of an install
    script = root / bindir / "hostjob"
    script.parent.mkdir(parents=True, exist_ok=True)
    source = (REPO / "bin" / "hostjob").read_text()
    assert source.startswith("#!python\n")  # what pip replaces by its interpreter
    script.write_text(f"#!{PYTHON}\n" + source.partition("\n")[2])
    script.chmod(0o755)
    return script, package


def env(**extra: str) -> dict[str, str]:
    """The environment without Python's or hostjob's settings (this suite's shell sets
    PYTHONDONTWRITEBYTECODE, which keeps any pack from being made), and ``extra``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HOSTJOB_"))}
    return {**clean, **extra}


def run(argv: list[str | Path], environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=60, env=environ
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done


def version_tag(done: subprocess.CompletedProcess[str]) -> str:
    first = done.stdout.splitlines()[0]
    assert first.startswith("hostjob version "), done.stdout
    return first.rpartition("+")[2]


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_the_command_finds_its_package_in_each_layout(tmp_path: Path, name: str) -> None:
    """``pip install --prefix P`` put the package in P/local/lib/python3.11/dist-packages
    (Debian's scheme), where the command looked for site-packages and died with
    FileNotFoundError; every layout's own copy answers, with site.py and without, and
    from the script its first run specialised."""
    script, package = lay_out(tmp_path, LAYOUTS[name], name)
    environ = env(HOSTJOB_NO_CODEPACK="1", HOME=str(tmp_path / "home"))
    assert version_tag(run([script, "--version"], environ)) == name
    assert version_tag(run([PYTHON, "-S", script, "--version"], environ)) == name
    specialised(script, package, env(HOME=str(tmp_path / "home")), name)
    assert "where = sys.path[0].rpartition('/')[0] + " in script.read_text()  # relative


def specialised(script: Path, package: Path, environ: dict[str, str], tag: str) -> None:
    """The first run: its builder writes the pack and specialises the script, which
    answers from the pack as python -S, with no search for its package left in it."""
    assert version_tag(run([script, "--version"], environ)) == tag
    assert "hostjob.cli.main" in built(script, package)
    text = script.read_text()
    assert text.startswith(f"#!{PYTHON} -S\n") and "for where in" not in text
    assert version_tag(run([script, "--version"], environ)) == tag
    assert imports_from_the_pack(PYTHON, script, env=environ)


def test_a_symlinked_script_finds_the_package_where_the_link_leads(tmp_path: Path) -> None:
    """pipx links ~/.local/bin/hostjob to its venv's script (an operator links a stable
    path the same way): the package is found beside the script the link leads to."""
    script, package = lay_out(tmp_path / "pipx" / "venvs" / "hostjob", LAYOUTS["venv"], "pipx")
    (tmp_path / "bin").mkdir()
    absolute = tmp_path / "bin" / "hostjob"
    absolute.symlink_to(script)
    relative = tmp_path / "bin" / "runtime"
    relative.symlink_to(os.path.relpath(script, relative.parent))
    for link in (absolute, relative):
        assert version_tag(run([link, "--version"], env(HOSTJOB_NO_CODEPACK="1"))) == "pipx"
    specialised(absolute, package, env(), "pipx")
    assert absolute.is_symlink() and version_tag(run([relative, "--version"], env())) == "pipx"


def test_a_package_in_no_known_layout_is_found_on_sys_path(tmp_path: Path) -> None:
    """``pip install --target DIR`` (on PYTHONPATH) or a copied script: the package is
    wherever imports find it, with site.py and without."""
    script, package = lay_out(tmp_path / "a", ("scripts", "target"), "target")
    environ = env(HOSTJOB_NO_CODEPACK="1", PYTHONPATH=str(tmp_path / "a" / "target"))
    assert version_tag(run([script, "--version"], environ)) == "target"
    assert version_tag(run([PYTHON, "-S", script, "--version"], environ)) == "target"
    moved = tmp_path / "b"
    (moved / "scripts").mkdir(parents=True)
    script = script.rename(moved / "scripts" / "hostjob")  # the package stays
    specialised(script, package, env(PYTHONPATH=str(package.parent)), "target")
    assert f"where = {str(package.parent)!a}" in script.read_text()  # whole: elsewhere


# ---- the first command's build -------------------------------------------------------------


def open_fds(pid: int) -> list[str]:
    return [os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")]


def leftovers(*folders: Path) -> list[str]:
    return [p.name for folder in folders for p in folder.iterdir() if ".tmp-" in p.name]


@contextmanager
def builder_lock(package: Path) -> Iterator[None]:
    """The lock a builder takes on the package's directory, held here meanwhile."""
    fd = os.open(package, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_the_first_command_has_the_pack_made_by_a_detached_builder(tmp_path: Path) -> None:
    """A plain pip install has no pack. Its first command runs as ever and ends, its
    client reading its stdout and stderr to their end, while the builder it started
    waits for the lock held here: that builder holds only /dev/null and the package's
    directory, in a session of its own, in /, at the lowest priority. Released, it writes
    the pack whole and starts the script as ``python -S``; the next command imports
    from the pack."""
    script, package = lay_out(tmp_path, LAYOUTS["venv"], "first")
    with builder_lock(package):
        assert version_tag(run([script, "--version"], env())) == "first"  # to EOF
        [pid] = builders(script)
        assert wait_for(lambda: str(package) in open_fds(pid), codepack_build.BUILD_TIMEOUT)
        assert sorted(open_fds(pid)) == [*["/dev/null"] * 3, str(package)]
        assert os.getsid(pid) != os.getsid(0)
        assert os.readlink(f"/proc/{pid}/cwd") == "/"
        assert os.getpriority(os.PRIO_PROCESS, pid) == 19
        assert pack_index(package) is None  # nothing written before the lock
    assert "hostjob.cli.main" in built(script, package)
    assert script.read_text().startswith(f"#!{PYTHON} -S\n")
    assert leftovers(package / "__pycache__", script.parent) == []
    assert imports_from_the_pack(PYTHON, script, env=env())
    assert builders(script) == []  # a pack there: no builder


def test_first_commands_at_once_make_one_whole_pack(tmp_path: Path) -> None:
    """Four first commands at once start four builders; they take the lock in turn, and
    the first makes the pack while the others find it made."""
    script, package = lay_out(tmp_path, LAYOUTS["venv"], "many")
    with builder_lock(package):
        runs = [
            subprocess.Popen([script, "--version"], stdout=subprocess.DEVNULL, env=env())
            for _ in range(4)
        ]
        assert [r.wait(timeout=60) for r in runs] == [0] * 4
        pids = builders(script)
        assert len(pids) == 4
        assert pack_index(package) is None
    assert wait_for(lambda: not any(map(alive, pids)), codepack_build.BUILD_TIMEOUT)
    assert "hostjob.cli.main" in built(script, package)
    assert leftovers(package / "__pycache__", script.parent) == []


def test_a_failed_build_is_tried_again_only_after_an_hour(tmp_path: Path) -> None:
    """A module the pack cannot compile (never imported by a command) fails the build:
    the attempt's mark says why, the next commands start no builder, and one does once
    the mark is older than ``RETRY_AFTER``. The commands themselves never notice."""
    script, package = lay_out(tmp_path, LAYOUTS["venv"], "fail")
    (package / "broken.py").write_text("def (:\n")
    run([script, "--version"], env())
    assert wait_for(lambda: not builders(script), codepack_build.BUILD_TIMEOUT)
    slot = Path(codepack.pack_path(str(package)))
    assert pack_index(package) == {} and b"SyntaxError" in slot.read_bytes()
    first = codepack.identity(slot.stat())
    run([script, "--version"], env())
    assert builders(script) == [] and codepack.identity(slot.stat()) == first
    long_ago = time.time() - codepack.RETRY_AFTER - 1
    os.utime(slot, (long_ago, long_ago))
    run([script, "--version"], env())
    assert wait_for(lambda: not builders(script), codepack_build.BUILD_TIMEOUT)
    assert slot.stat().st_mtime > long_ago + 1 and pack_index(package) == {}
    assert script.read_text().startswith(f"#!{PYTHON}\n")  # not specialised either


def test_no_pack_is_made_while_python_writes_no_bytecode(tmp_path: Path) -> None:
    script, package = lay_out(tmp_path, LAYOUTS["venv"], "nowrite")
    run([script, "--version"], env(PYTHONDONTWRITEBYTECODE="1"))
    assert builders(script) == [] and pack_index(package) is None


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can read (tmp_path's parents are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="codepack-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def as_other_user() -> list[str]:
    """The words that run a command as a user who may not write root's files (for a
    test run as root); none when this user already may not."""
    return (
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.getuid() == 0 else []
    )


def test_a_user_who_may_not_write_beside_the_package_imports_the_ordinary_way(
    shared_dir: Path,
) -> None:
    """A system install run by another user, or a read-only /usr: no builder, no
    error, nothing written; and a pack made by the owner is used all the same."""
    script, package = lay_out(shared_dir, LAYOUTS["system"], "ro")
    if not as_other_user():  # not root: the package read-only to its owner too
        for folder in (package, package / "__pycache__", script.parent):
            folder.chmod(0o555)
    slot = Path(codepack.pack_path(str(package)))
    before = slot.read_bytes()
    assert version_tag(run([*as_other_user(), script, "--version"], env())) == "ro"
    assert builders(script) == [] and slot.read_bytes() == before
    assert script.read_text().startswith(f"#!{PYTHON}\n")
    assert not imports_from_the_pack(PYTHON, script, as_other_user(), env())
    if as_other_user():
        codepack_build.build(str(package))
        assert imports_from_the_pack(PYTHON, script, as_other_user(), env())


# ---- specialise ----------------------------------------------------------------------------


def test_the_script_is_specialised_only_as_pip_wrote_it(tmp_path: Path) -> None:
    """specialise rewrites a script only as pip wrote bin/hostjob, for this interpreter
    (under any of its names in its directory), owned by this user; through a link, the
    file it leads to; mode kept."""
    body = (REPO / "bin" / "hostjob").read_bytes().partition(b"\n")[2]
    assert body.startswith(codepack_build.SCRIPT_MARK)
    exe = os.fsencode(sys.executable)
    script = tmp_path / "bin" / "hostjob"
    script.parent.mkdir()
    site = str(tmp_path / "lib" / "site")

    def write(first: bytes, rest: bytes = body) -> bytes:
        script.write_bytes(first + b"\n" + rest)
        return first + b"\n" + rest

    write(b"#!" + exe)
    script.chmod(0o750)
    link = tmp_path / "link"
    link.symlink_to(script)
    assert codepack_build.specialise(str(link), site)
    first, _, rest = script.read_bytes().partition(b"\n")
    assert first == b"#!" + exe + b" -S" and b"where = sys.path[0]" in rest
    assert b"for where in" not in rest
    assert stat.S_IMODE(script.stat().st_mode) == 0o750 and link.is_symlink()
    assert not codepack_build.specialise(str(script), site)  # already
    alias = Path(sys.executable).parent / ("python" if exe.endswith(b"3") else "python3")
    if alias.exists():  # a venv's other name for its interpreter
        write(b"#!" + os.fsencode(alias))
        assert codepack_build.specialise(str(script), site)
    base = os.fsencode(os.path.realpath(sys.executable))  # the same file, not this venv
    for first in (b"#!/usr/bin/env python3", b"#!" + exe + b" -E", b"#!" + base):
        before = write(first)
        assert not codepack_build.specialise(str(script), site)
        assert script.read_bytes() == before
    for rest in (b"# another program\n", body.replace(codepack_build.SEARCH[1], b"    pass  #")):
        before = write(b"#!" + exe, rest)
        assert not codepack_build.specialise(str(script), site)
        assert script.read_bytes() == before
    if os.geteuid() == 0:  # root running another user's script leaves it to them
        before = write(b"#!" + exe)
        os.chown(script, 65534, 65534)
        assert not codepack_build.specialise(str(script), site)
        assert script.read_bytes() == before
    assert leftovers(tmp_path, script.parent) == []
