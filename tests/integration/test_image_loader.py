"""An image's program runs with the image's own loader and libraries, as root, on real
programs of Debian 13 (glibc 2.41, Python 3.13, jq 1.7) on this older host, and on a
musl-linked program: through a bundle (host and bind mode), ``exec``, and ``run IMAGE``;
what the program starts is the host's; the opt-out; every error, in one line, with
nothing left. (containerd's CRI and docker: ``tests/cri/test_image_loader.py``,
``tests/compat/test_docker.py``.)"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import distro
from tests.elfmaker import EM_AARCH64, write_elf
from tests.helpers import Hostjob, base_config, cgroup_dirs, new_id

HOST_PYTHON = subprocess.run(
    ["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
    capture_output=True, text=True, check=True,
).stdout.strip()  # fmt: skip


@pytest.fixture(scope="module")
def trixie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Debian 13's root, unpacked once for the module's bundles."""
    root = distro.extract(distro.distro_tar(), tmp_path_factory.mktemp("trixie") / "rootfs")
    root.parent.chmod(0o755)
    return root


def config(*args: str, mode: str = "host", **process: Any) -> dict[str, Any]:
    cfg = base_config(*args)
    cfg["process"]["env"] = [f"PATH={distro.IMAGE_PATH}"]
    cfg["process"].update(process)
    if mode == "bind":
        cfg["annotations"] = {"io.hostjob.mount-mode": "bind"}
    return cfg


def bundle_of(tmp_path: Path, root: Path, cfg: dict[str, Any], name: str = "b") -> Path:
    """A bundle whose rootfs is ``root`` (shared by the module's tests)."""
    directory = tmp_path / name
    directory.mkdir()
    cfg = dict(cfg, root={"path": str(root)})
    (directory / "config.json").write_text(json.dumps(cfg))
    return directory


def run(hj: Hostjob, bundle: Path) -> subprocess.CompletedProcess[str]:
    return hj("run", "-b", str(bundle), new_id(), timeout=120)


def out(hj: Hostjob, bundle: Path) -> str:
    done = run(hj, bundle)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("mode", ["host", "bind"])
def test_the_images_programs_run_as_the_image_built_them(
    hj: Hostjob, tmp_path: Path, trixie: Path, mode: str
) -> None:
    mp = str(trixie) if mode == "host" else "/hpc"
    check = (
        "import sys, os; print(sys.version_info[:2] == (3, 13), sys.executable, sys.prefix,"
        " os.path.exists(os.path.join(sys.prefix, 'lib', 'python3.13', 'os.py')))"
    )
    cases = {
        "jq": (config("jq", "--version", mode=mode), "jq-1.7"),
        "python": (config("python3", "-c", check, mode=mode), f"True {mp}/usr/bin/python3 {mp}/usr True"),
        # An absolute path the host lacks, through the image's alternatives link.
        "lua": (config("/usr/bin/lua", "-e", "print(_VERSION)", mode=mode), "Lua 5.4"),
    }  # fmt: skip
    for name, (cfg, expected) in cases.items():
        assert out(hj, bundle_of(tmp_path, trixie, cfg, name)).strip() == expected


def test_what_the_program_starts_is_the_hosts(hj: Hostjob, tmp_path: Path, trixie: Path) -> None:
    """The image's sh runs python3 from the host-first PATH: the host's Python, with the
    host's libraries (nothing inherited: no LD_LIBRARY_PATH, no LD_PRELOAD)."""
    cfg = config("sh", "-c", 'python3 -c "import sys; print(sys.version_info[:2])"; env')
    output = out(hj, bundle_of(tmp_path, trixie, cfg))
    major, minor = HOST_PYTHON.split(".")
    assert output.splitlines()[0] == f"({major}, {minor})"
    assert "LD_LIBRARY_PATH" not in output and "LD_PRELOAD" not in output


def test_argv0_and_a_multicall_link(hj: Hostjob, tmp_path: Path, trixie: Path) -> None:
    """argv[0] is the program's host path, its own name kept: busybox's applet link (an
    absolute one) runs the applet."""
    link = trixie / "usr/local/bin/bb-echo"
    link.symlink_to("/usr/bin/busybox")
    try:
        (trixie / "usr/local/bin/echo").symlink_to("/usr/bin/busybox")
        cfg = config("sh", "-c", 'echo "$0"; echo applet ok')
        lines = out(hj, bundle_of(tmp_path, trixie, cfg)).splitlines()
        assert lines == [f"{trixie}/usr/bin/sh", "applet ok"]
        cfg = config("echo", "from busybox's echo")
        assert out(hj, bundle_of(tmp_path, trixie, cfg, "b2")) == "from busybox's echo\n"
    finally:
        link.unlink()
        (trixie / "usr/local/bin/echo").unlink()


def test_exec_runs_the_images_program(hj: Hostjob, tmp_path: Path, trixie: Path) -> None:
    for mode in ("host", "bind"):
        cid = new_id()
        bundle = bundle_of(tmp_path, trixie, config("sleep", "300", mode=mode), mode)
        hj.ok("run", "-d", "-b", str(bundle), cid)
        try:
            got = hj.ok("exec", cid, "python3", "-c", "import sys; print(sys.version_info[1])")
            assert got == "13\n"
            assert hj.ok("exec", cid, "jq", "-n", "[1, 2] | add") == "3\n"
        finally:
            hj.ok("delete", "--force", cid)


def test_a_script_gets_the_images_interpreter(hj: Hostjob, tmp_path: Path, trixie: Path) -> None:
    script = trixie / "usr/local/bin/which-python"
    script.write_text(
        "#!/usr/bin/env python3\nimport sys\nprint(sys.version_info[:2], sys.argv[1:])\n"
    )
    script.chmod(0o755)
    direct = trixie / "usr/local/bin/which-python-direct"
    direct.write_text("#!/usr/bin/python3 -S\nimport sys\nprint(sys.version_info[:2])\n")
    direct.chmod(0o755)
    try:
        cfg = config("which-python", "a")
        assert out(hj, bundle_of(tmp_path, trixie, cfg)) == "(3, 13) ['a']\n"
        cfg = config("which-python-direct")
        assert out(hj, bundle_of(tmp_path, trixie, cfg, "b2")) == "(3, 13)\n"
    finally:
        script.unlink()
        direct.unlink()


def test_origin_runpath(hj: Hostjob, tmp_path: Path, trixie: Path) -> None:
    distro.origin_program(trixie)
    cfg = config("/opt/origin/bin/greet")
    assert out(hj, bundle_of(tmp_path, trixie, cfg)) == "found through $ORIGIN\n"


def test_a_musl_program(hj: Hostjob, tmp_path: Path, trixie: Path) -> None:
    """Linked by this host's musl-gcc; run with the image's musl (the host has its own)."""
    root = distro.lone_root(
        trixie,
        tmp_path / "musl-root",
        "/usr/lib/x86_64-linux-musl/libc.so",
        "/etc/ld-musl-x86_64.path",
    )
    (root / "usr/lib/ld-musl-x86_64.so.1").symlink_to("x86_64-linux-musl/libc.so")
    distro.musl_program(root / "usr/bin/hello")
    cfg = config("hello", "x")
    done = run(hj, bundle_of(tmp_path, root, cfg))
    assert done.returncode == 3, done.stderr  # its own exit status
    lines = done.stdout.splitlines()
    assert lines[0] == f"argv0={root}/usr/bin/hello"
    assert lines[1] == f"libc={root}/usr/lib/x86_64-linux-musl/libc.so"


def test_the_host_loader_opt_out(hj: Hostjob, tmp_path: Path, trixie: Path) -> None:
    """io.hostjob.loader: host is the kernel's choice, as before: the host's loader and
    libraries, which this image's jq cannot use."""
    cfg = config("jq", "--version")
    cfg["annotations"] = {"io.hostjob.loader": "host"}
    done = run(hj, bundle_of(tmp_path, trixie, cfg))
    assert done.returncode != 0
    assert "GLIBC_2." in done.stderr and "not found" in done.stderr


Expect = Callable[[Path, str], None]


@pytest.fixture
def refused(hj: Hostjob, tmp_path: Path) -> Expect:
    """refused(root, message): create of the root's ``app`` fails with that one line,
    exit 1, and leaves nothing."""

    def check(root: Path, message: str) -> None:
        cid = new_id()
        bundle = bundle_of(tmp_path, root, config("app"), cid)
        done = hj("create", "-b", str(bundle), cid)
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [message], done.stderr
        assert not (hj.root / cid).exists()
        assert cgroup_dirs(f"/hostjob/{cid}") == []

    return check


def test_a_loader_nowhere(refused: Expect, tmp_path: Path) -> None:
    root = tmp_path / "lone"
    write_elf(
        root / "usr/bin/app", interpreter="/lib/ld-hostjob-nowhere.so.1", needed=("libc.so.6",)
    )
    assert not os.path.exists("/lib/ld-hostjob-nowhere.so.1")
    refused(
        root,
        'exec: "app": its loader /lib/ld-hostjob-nowhere.so.1 is in neither the image nor the host',
    )


def test_a_library_the_image_lacks(refused: Expect, tmp_path: Path, trixie: Path) -> None:
    libraries = [f"/{distro.MULTIARCH}/{name}" for name in ("libjq.so.1", "libm.so.6")]
    root = distro.glibc_root(trixie, tmp_path / "partial", *libraries)
    (root / "usr/bin/app").write_bytes((trixie / "usr/bin/jq").read_bytes())
    (root / "usr/bin/app").chmod(0o755)
    refused(
        root,
        f'exec: "app": libonig.so.5, which /{distro.MULTIARCH}/libjq.so.1 needs, is in none of'
        " the image's library directories",
    )


def test_another_architecture(refused: Expect, tmp_path: Path) -> None:
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    handlers = [p.name for p in binfmt.iterdir()] if binfmt.is_dir() else []
    assert not [h for h in handlers if h not in ("register", "status")], (
        f"this host runs other architectures through binfmt_misc: {handlers}"
    )
    root = tmp_path / "arm"
    write_elf(root / "usr/bin/app", machine=EM_AARCH64, interpreter="/lib/ld-linux-aarch64.so.1")
    refused(
        root,
        'exec: "app": /usr/bin/app is an AArch64 program and this host is x86-64 (no'
        " binfmt_misc handler runs it)",
    )


def test_an_interpreter_nowhere(refused: Expect, tmp_path: Path) -> None:
    root = tmp_path / "script"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/app").write_text("#!/usr/bin/python9\nprint(1)\n")
    (root / "usr/bin/app").chmod(0o755)
    refused(
        root,
        'exec: "app": its interpreter /usr/bin/python9 (#!) is in neither the image nor the host',
    )


# --- run IMAGE --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trixie_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    work = tmp_path_factory.mktemp("trixie-image")
    archive = distro.oci_archive(
        distro.distro_tar(), work / "trixie.oci.tar", "localhost/trixie:loader", ["python3"]
    )
    return f"oci-archive:{archive}:loader"


def test_run_image(hj: Hostjob, tmp_path: Path, trixie_image: str) -> None:
    store = ["--store", str(tmp_path / "store")]
    try:
        version = "import sys; print(sys.version_info[:2])"
        assert (
            hj.ok("run", "--rm", "-q", *store, trixie_image, "python3", "-c", version)
            == "(3, 13)\n"
        )
        assert hj.ok("run", "--rm", "-q", *store, trixie_image, "jq", "--version") == "jq-1.7\n"
        host = hj.ok(
            "run", "--rm", "-q", *store, trixie_image, "sh", "-c", f"python3 -c '{version}'"
        )
        assert host.strip() == str(tuple(int(n) for n in HOST_PYTHON.split(".")))
        done = hj("run", "--rm", "-q", *store, "--loader", "host", trixie_image, "jq", "--version")
        assert done.returncode != 0 and "GLIBC_2." in done.stderr
        done = hj("run", "--rm", "-q", *store, "--loader", "musl", trixie_image, "jq")
        assert done.returncode == 1 and "--loader 'musl': expected image or host" in done.stderr
        cid = new_id()
        hj.ok("run", "-d", "-q", *store, "--name", cid, trixie_image, "sleep", "300")
        try:
            assert hj.ok("exec", cid, "python3", "-c", version) == "(3, 13)\n"
        finally:
            hj.ok("delete", "--force", cid)
    finally:
        hj("prune", "--all", "--force", *store)


def test_the_next_container_takes_the_decision_kept(
    hj: Hostjob, tmp_path: Path, trixie_image: str
) -> None:
    """Two containers of one image, two overlay mounts of the same layers: the second
    start takes the decision the first kept in the state root (its file is not written
    again), and so does an exec."""
    store = ["--store", str(tmp_path / "store")]
    try:
        assert hj.ok("run", "--rm", "-q", *store, trixie_image, "jq", "--version") == "jq-1.7\n"
        (kept,) = (hj.root / ".loader").glob("*.run")
        first = kept.stat()
        assert (first.st_mode & 0o777, first.st_uid) == (0o600, 0)
        assert hj.ok("run", "--rm", "-q", *store, trixie_image, "jq", "-n", "1 + 1") == "2\n"
        cid = new_id()
        hj.ok("run", "-d", "-q", *store, "--name", cid, trixie_image, "sleep", "300")
        try:
            assert hj.ok("exec", cid, "jq", "-n", "[1, 2] | add") == "3\n"
        finally:
            hj.ok("delete", "--force", cid)
        assert kept.stat().st_ino == first.st_ino
    finally:
        hj("prune", "--all", "--force", *store)


def test_run_image_of_a_lone_program(hj: Hostjob, tmp_path: Path) -> None:
    """The issue's LONE: an image of one program whose loader is nowhere."""
    src = tmp_path / "lone"
    write_elf(src / "bin/app", interpreter="/lib/ld-hostjob-nowhere.so.1", needed=("libc.so.6",))
    archive = tmp_path / "lone.tar"
    hj("pack", str(src), "--to", f"oci-archive:{archive}:lone", "--entrypoint", "/bin/app")
    store = ["--store", str(tmp_path / "store")]
    err = hj.fail("run", "--rm", "-q", *store, f"oci-archive:{archive}:lone")
    assert (
        err
        == 'exec: "/bin/app": its loader /lib/ld-hostjob-nowhere.so.1 is in neither the image nor the host'
    )
    assert [n for n in os.listdir(hj.root) if not n.startswith(".")] == []
