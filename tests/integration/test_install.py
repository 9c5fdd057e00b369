"""hostjob installed each ordinary way, as a new user would, with Debian's python3 and
pip, offline, from one wheel of this work tree: a venv, ``pip install --user``,
``--prefix``, a system install into /usr/local's dist-packages, and pipx.

The pip installs take no dependencies (httpx, rich, zstandard): a bundle's ``run`` and
``--version`` need none. For each: the first command, a ``run`` of a tiny bundle, runs
the ordinary way and has the pack made in the background; then ``--version`` and another
``run`` import from it, the script started as ``python -S``.

The host is left as it was: every install lies in tmp directories, but for the system
one, made in a private mount namespace whose /usr/local is a tmpfs (where a read-only
/usr/local is tried first: no pack, no error)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import pytest

from tests.helpers import REPO, base_config, containers_left, make_bundle, new_id, require_peer
from tests.installs import builders, built, imports_from_the_pack, pack_index

PYTHON = "/usr/bin/python3"  # Debian's, which a new user has
VERSION = "{}.{}".format(*sys.version_info[:2])
DEPENDENCIES = ("httpx", "rich", "zstandard")
SYSTEM_SITE = Path(f"/usr/local/lib/python{VERSION}/dist-packages")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """No Python or hostjob settings of this suite's (PYTHONDONTWRITEBYTECODE would keep
    the pack from being made); pip offline, its cache off, HOME in tmp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HOSTJOB_", "PIP"))}
    env.update(
        HOME=str(home),
        PIP_NO_INDEX="1",
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_ROOT_USER_ACTION="ignore",
        PIP_BREAK_SYSTEM_PACKAGES="1",  # Debian 12's python3 is "externally managed"
    )
    env.update(extra)
    return env


def check(argv: list[str | Path], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hostjob's wheel, built once from a copy of this work tree."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "bin", "src"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    check([*pip, "-w", out, src], clean_env(tmp_path_factory.mktemp("home")))
    [found] = out.glob("hostjob-*.whl")
    return found


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_bundle(tmp_path / "bundle", base_config("echo", "job ran"))


def pip_install(python: str, wheel: Path, env: dict[str, str], *options: str) -> None:
    check([python, "-m", "pip", "install", "-q", "--no-deps", *options, wheel], env)


def exercise(
    script: Path,
    package: Path,
    bundle: Path,
    state: Path,
    env: dict[str, str],
    words: tuple[str, ...] = (),
    view: Path = Path("/"),
) -> None:
    """The first command (a bundle's ``run``), the pack it has made, then ``--version``
    and a ``run`` from the pack, the script started as ``python -S``. ``words`` run each
    command (in a namespace), whose file system ``view`` shows."""

    def seen(path: Path) -> Path:
        return view / path.relative_to("/")

    def run() -> None:
        done = check([*words, script, "--root", state, "run", "--bundle", bundle, new_id()], env)
        assert (done.stdout, done.stderr) == ("job ran\n", "")

    assert pack_index(seen(package)) is None  # what pip leaves: a real .pyc in its place
    run()
    assert "hostjob.cli.main" in built(script, seen(package))
    line = seen(script).read_text().partition("\n")[0]
    assert line.startswith("#!/") and line.endswith(" -S"), line
    version = check([*words, script, "--version"], env)
    assert version.stdout.startswith(f"hostjob version {metadata.version('hostjob')}\n")
    run()
    assert imports_from_the_pack(line[2:].split()[0], script, list(words), env)
    assert containers_left(state) == []  # each run deleted its container


def without_dependencies(
    python: str, site: Path, env: dict[str, str], words: tuple[str, ...] = ()
) -> None:
    """None of hostjob's dependencies can be imported beside the install: the bundle
    runs without them."""
    probe = (
        f"import sys; sys.path.insert(0, {str(site)!r}); import importlib.util as u;"
        f" print([n for n in {DEPENDENCIES!r} if u.find_spec(n)])"
    )
    assert check([*words, python, "-c", probe], env).stdout == "[]\n"


def test_a_venv(tmp_path: Path, wheel: Path, bundle: Path) -> None:
    env = clean_env(tmp_path / "home")
    venv = tmp_path / "venv"
    check([PYTHON, "-m", "venv", venv], env)
    pip_install(str(venv / "bin" / "python"), wheel, env)
    site = venv / "lib" / f"python{VERSION}" / "site-packages"
    without_dependencies(str(venv / "bin" / "python"), site, env)
    exercise(venv / "bin" / "hostjob", site / "hostjob", bundle, tmp_path / "state", env)


def test_pip_install_user(tmp_path: Path, wheel: Path, bundle: Path) -> None:
    env = clean_env(tmp_path / "home")
    pip_install(PYTHON, wheel, env, "--user")
    local = tmp_path / "home" / ".local"
    site = local / "lib" / f"python{VERSION}" / "site-packages"
    without_dependencies(PYTHON, site, env)
    exercise(local / "bin" / "hostjob", site / "hostjob", bundle, tmp_path / "state", env)


def test_pip_install_prefix(tmp_path: Path, wheel: Path, bundle: Path) -> None:
    """Debian's pip puts a ``--prefix P`` install under P/local, in dist-packages: the
    command died there with FileNotFoundError, looking for site-packages."""
    env = clean_env(tmp_path / "home")
    pip_install(PYTHON, wheel, env, "--prefix", str(tmp_path / "prefix"))
    local = tmp_path / "prefix" / "local"
    site = local / "lib" / f"python{VERSION}" / "dist-packages"
    without_dependencies(PYTHON, site, env)
    exercise(local / "bin" / "hostjob", site / "hostjob", bundle, tmp_path / "state", env)


@contextmanager
def private_usr_local() -> Iterator[tuple[tuple[str, ...], Path]]:
    """A mount namespace (private propagation) whose /usr/local is an empty tmpfs, held
    by a sleeping process of its own: the words that run a command in it, and the
    file system as it sees it."""
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs -o mode=0755 hostjob-test /usr/local && echo ready && exec sleep 3600"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        yield ("nsenter", "-t", str(holder.pid), "-m"), Path(f"/proc/{holder.pid}/root")
    finally:
        holder.kill()
        holder.wait()


def test_a_system_install_into_dist_packages(tmp_path: Path, wheel: Path, bundle: Path) -> None:
    """``pip install`` as root into /usr/local (dist-packages, /usr/local/bin), in a
    namespace of its own. Read-only first, as a /usr mounted so: a command runs the
    ordinary way and makes nothing; then writable."""
    script, package = Path("/usr/local/bin/hostjob"), SYSTEM_SITE / "hostjob"
    on_host = package.exists(), script.exists()
    env = clean_env(tmp_path / "home")
    state = tmp_path / "state"
    with private_usr_local() as (ns, view):
        check([*ns, PYTHON, "-m", "pip", "install", "-q", "--no-deps", wheel], env)
        without_dependencies(PYTHON, SYSTEM_SITE, env, ns)
        check([*ns, "mount", "-o", "remount,ro", "/usr/local"], env)
        done = check([*ns, script, "--root", state, "run", "--bundle", bundle, new_id()], env)
        assert (done.stdout, done.stderr) == ("job ran\n", "")
        assert builders(script) == []
        assert (view / "usr/local/bin/hostjob").read_text().startswith(f"#!{PYTHON}\n")
        check([*ns, "mount", "-o", "remount,rw", "/usr/local"], env)
        exercise(script, package, bundle, state, env, ns, view)
    assert (package.exists(), script.exists()) == on_host


def repack(dist: metadata.Distribution, scratch: Path, wheelhouse: Path) -> None:
    """A wheel of an installed distribution, from its files (its RECORD's, but for
    compiled code and what pip wrote at install)."""
    root = scratch / f"{dist.metadata['Name']}-{dist.version}"
    for file in dist.files or []:
        if file.parts[0] == ".." or "__pycache__" in file.parts:
            continue
        if file.parts[0].endswith(".dist-info") and file.name in (
            "RECORD", "INSTALLER", "REQUESTED", "direct_url.json"
        ):  # fmt: skip
            continue
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file.locate(), root / file)
    check([sys.executable, "-m", "wheel", "pack", "-d", wheelhouse, root], dict(os.environ))


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """hostjob's wheel and its dependencies' (all the way down), packed again from this
    test venv, where scripts/install put them: pipx reads every dependency's metadata
    in the venv it made and fails without them (``--no-deps`` is not for pipx 1.1)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    house = tmp_path_factory.mktemp("wheelhouse")
    shutil.copy2(wheel, house)
    scratch = tmp_path_factory.mktemp("repack")
    seen: set[str] = set()
    todo = ["hostjob"]
    while todo:
        for text in metadata.requires(todo.pop()) or []:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            name = canonicalize_name(requirement.name)
            if name not in seen:
                seen.add(name)
                todo.append(name)
                repack(metadata.distribution(name), scratch, house)
    return house


def test_pipx(tmp_path: Path, wheelhouse: Path, wheel: Path, bundle: Path) -> None:
    """Debian's pipx: a venv of its own under PIPX_HOME, and a symlink in PIPX_BIN_DIR to
    its script, which finds the package where the link leads."""
    require_peer("pipx", "pipx")
    env = clean_env(
        tmp_path / "home",
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIP_FIND_LINKS=str(wheelhouse),
    )
    # pipx also tries to upgrade its own pip, which fails offline: said, and not fatal
    check(["pipx", "install", wheelhouse / wheel.name], env)
    link = tmp_path / "bin" / "hostjob"
    venv = tmp_path / "pipx" / "venvs" / "hostjob"
    assert link.is_symlink() and link.resolve() == (venv / "bin" / "hostjob").resolve()
    package = venv / "lib" / f"python{VERSION}" / "site-packages" / "hostjob"
    exercise(link, package, bundle, tmp_path / "state", env)
