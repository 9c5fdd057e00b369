"""A job's volumes cannot break the runtime installed beside them.

On a node, hostjob lies under /opt or /usr/local (the installer's directory, pip's), and a
pod may mount a volume there: the job's private mount namespace then hides hostjob's own
files, and its interpreter's standard library, from the runtime's processes that enter it
(the init's child half, every exec's). Each imports everything it will need before it
enters; the tests mount empty volumes over the command's install directory and over its
interpreter's standard library, then start and exec, with and without a terminal."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import Hostjob, base_config, hostjob_cmd, hostjob_env, new_id


def installed_dirs() -> list[str]:
    """The directory the command under test is installed in (its bin/'s parent: a venv,
    /opt/hostjob, /usr/local; src/ when the tests import the tree), and the standard
    library of the interpreter it runs."""
    command = hostjob_cmd()
    if command[0] == sys.executable:  # `python -m hostjob` from src/
        from tests.helpers import REPO

        prefix, python = REPO / "src", sys.executable
    else:
        script = Path(command[0]).resolve()
        prefix = script.parent.parent
        first = script.read_bytes().split(b"\n", 1)[0]
        assert first.startswith(b"#!"), first
        python = first[2:].split()[0].decode()
    stdlib = subprocess.run(
        [python, "-S", "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return [str(prefix), str(Path(stdlib).resolve())]


def covering_config(empty: Path, *args: str) -> dict:  # type: ignore[type-arg]
    config = base_config(*args)
    config["annotations"] = {"io.hostjob.mount-mode": "bind"}
    config["mounts"] = [
        {"destination": target, "type": "bind", "source": str(empty), "options": ["rbind", "ro"]}
        for target in installed_dirs()
    ]
    return config


@pytest.mark.parametrize("terminal", [False, True], ids=["pipes", "terminal"])
def test_start_and_exec_with_a_volume_over_the_install_dir(
    hj: Hostjob, bundle, tmp_path: Path, terminal: bool
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    targets = installed_dirs()
    listing = "; ".join(f"ls -A {t} | wc -l" for t in targets)
    config = covering_config(empty, "sh", "-c", f"{listing}; exec sleep 300")
    cid = new_id()
    out = tmp_path / "out"
    err = tmp_path / "err"
    # files, not pipes: the detached job inherits them
    with open(out, "w") as stdout, open(err, "w") as stderr:
        started = subprocess.run(
            hj.argv("run", "-d", "-b", str(bundle(config)), cid),
            stdout=stdout,
            stderr=stderr,
            env=hostjob_env(),
        )
    assert started.returncode == 0, err.read_text()
    deadline = time.monotonic() + 10
    while out.read_text().count("\n") < len(targets) and time.monotonic() < deadline:
        time.sleep(0.02)
    # the job sees the empty volumes where the runtime is installed
    assert out.read_text().split() == ["0"] * len(targets)
    exec_args = (
        ["exec", "-t", cid, "sh", "-c", listing] if terminal else ["exec", cid, "sh", "-c", listing]
    )
    seen = hj(*exec_args)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split() == ["0"] * len(targets), seen.stdout
    # an exec that fails after the join still reports its error in one line
    missing = hj("exec", cid, "/no/such/program")
    assert missing.returncode != 0
    assert "/no/such/program" in missing.stderr and "ImportError" not in missing.stderr
    hj.ok("delete", "--force", cid)


def test_create_then_start_with_a_volume_over_the_install_dir(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    """The two-step life cycle of containerd's shim: the child half waits in the private
    namespace between create and start, then runs the steps after the start there."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result_file = tmp_path / "result"
    config = covering_config(empty, "sh", "-c", f"echo started > {result_file}")
    config["mounts"].append(
        {
            "destination": str(tmp_path),
            "type": "bind",
            "source": str(tmp_path),
            "options": ["rbind"],
        }
    )
    cid = new_id()
    hj.ok("create", "-b", str(bundle(config)), cid)
    hj.ok("start", cid)
    # the shell makes the file before it writes to it: wait for the line, not the file
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if result_file.exists() and result_file.read_text() == "started\n":
            break
        time.sleep(0.02)
    assert result_file.read_text() == "started\n"
    hj.ok("delete", "--force", cid)


def test_an_images_program_with_a_volume_over_the_install_dir(hj: Hostjob, tmp_path: Path) -> None:
    """A dynamically linked program of the image (Debian 13's jq) in bind mode: the
    look-up through the image's loader runs after the entry, and so does the keeping of
    its decision on a first start, then the check of it on the next."""
    import json
    import shutil

    from tests import distro

    root = distro.extract(distro.distro_tar(), tmp_path / "rootfs")
    empty = tmp_path / "empty"
    empty.mkdir()
    config = covering_config(empty, "jq", "--version")
    config["process"]["env"] = [f"PATH={distro.IMAGE_PATH}"]
    config["root"] = {"path": str(root)}
    bundle_dir = tmp_path / "b"
    bundle_dir.mkdir()
    (bundle_dir / "config.json").write_text(json.dumps(config))
    shutil.rmtree(hj.root / ".loader", ignore_errors=True)  # a first start, then another
    for _ in range(2):
        done = hj("run", "-b", str(bundle_dir), new_id(), timeout=120)
        assert (done.returncode, done.stdout, done.stderr) == (0, "jq-1.7\n", "")
    assert len(list((hj.root / ".loader").glob("*.run"))) == 1
