"""Registry credentials never stay where every local user reads them: the command line.

``/proc/PID/cmdline`` is world-readable, so ``--creds user:pass`` on it is every
local user's for as long as the process lives: the whole pull, or a container's life
with a foreground ``run --creds IMAGE``. First shown (a process with such arguments,
read as ``nobody``), then harmless: hostjob overwrites them in its own argument
memory once parsed, before the pull and before the job is forked; ``--creds -``
reads them from stdin and ``--authfile`` from a file, never argv.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hostjob.images.pack import pack
from tests.fixtures.hostile_registry import Drip
from tests.fixtures.registry import FakeRegistry
from tests.helpers import Hostjob, hostjob_cmd, hostjob_env, make_rootfs, new_id

USER, PASSWORD = "alice", "s3cret-in-argv"
CREDS = f"{USER}:{PASSWORD}"
Nobody = Callable[..., subprocess.CompletedProcess[str]]


def cmdline_as_nobody(as_nobody: Nobody, pid: int) -> str:
    done = as_nobody('tr "\\0" " " < /proc/$1/cmdline', "sh", str(pid))
    assert done.returncode == 0, done.stderr
    return done.stdout


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        found += [int(c) for c in children]
        todo += [int(c) for c in children]
    return found


def wait_for(predicate: Callable[[], object], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def running() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; each killed (by its pid) and reaped at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def start(running: list[subprocess.Popen[bytes]], argv: list[str], stdin: bytes = b"") -> int:
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=hostjob_env(),
    )  # fmt: skip
    running.append(proc)
    assert proc.stdin is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    return proc.pid


def test_argv_is_every_users_to_read(
    as_nobody: Nobody, running: list[subprocess.Popen[bytes]]
) -> None:
    """The attack, where nothing hides them: any process's arguments, read as nobody."""
    pid = start(running, [sys.executable, "-c", "import time; time.sleep(30)", "--creds", CREDS])
    wait_for(lambda: PASSWORD in cmdline_as_nobody(as_nobody, pid))


@pytest.mark.parametrize("form", [["--creds", CREDS], [f"--creds={CREDS}"]], ids=["two", "one"])
def test_a_pulls_creds_leave_its_command_line(
    tmp_path: Path, as_nobody: Nobody, running: list[subprocess.Popen[bytes]], form: list[str]
) -> None:
    with Drip(interval=1.0) as slow:
        argv = [*hostjob_cmd(), "pull", "--store", str(tmp_path / "store"), "--plain-http",
                *form, f"{slow.host}/test/img:v1"]  # fmt: skip
        pid = start(running, argv)
        wait_for(lambda: slow.requests)  # the pull runs
        shown = cmdline_as_nobody(as_nobody, pid)
        assert "pull" in shown and f"{slow.host}/test/img:v1" in shown
        assert PASSWORD not in shown and USER not in shown and "***" in shown


def test_creds_from_stdin_never_reach_the_command_line(
    tmp_path: Path, as_nobody: Nobody, running: list[subprocess.Popen[bytes]]
) -> None:
    with Drip(interval=1.0) as slow:
        argv = [*hostjob_cmd(), "pull", "--store", str(tmp_path / "store"), "--plain-http",
                "--creds", "-", f"{slow.host}/test/img:v1"]  # fmt: skip
        pid = start(running, argv, stdin=f"{CREDS}\n".encode())
        wait_for(lambda: slow.requests)
        shown = cmdline_as_nobody(as_nobody, pid)
        assert "--creds -" in shown and PASSWORD not in shown


@pytest.fixture
def private_registry(tmp_path: Path) -> Iterator[FakeRegistry]:
    """A registry that demands alice's password, serving a busybox image."""
    layout = tmp_path / "layout"
    pack(str(make_rootfs(tmp_path / "tree")), f"oci:{layout}:v1", cmd=["/bin/true"],
         env=["PATH=/bin"])  # fmt: skip
    with FakeRegistry(str(layout), users={USER: PASSWORD}) as registry:
        yield registry


def test_creds_from_stdin_and_an_authfile_are_used(
    tmp_path: Path, private_registry: FakeRegistry
) -> None:
    ref = f"{private_registry.host}/test/img:v1"

    def pull(*extra: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*hostjob_cmd(), "pull", "-q", "--store", str(tmp_path / "store"), "--plain-http",
             *extra, ref], input=stdin, capture_output=True, text=True, env=hostjob_env(),
            timeout=120, check=False,
        )  # fmt: skip

    refused = pull()
    assert refused.returncode == 1 and "no credentials" in refused.stderr
    wrong = pull("--creds", "-", stdin=f"{USER}:wrong\n")
    assert wrong.returncode == 1 and "HTTP 401" in wrong.stderr
    done = pull("--creds", "-", stdin=f"{CREDS}\n")
    assert done.returncode == 0, done.stderr
    authfile = tmp_path / "auth.json"
    entry = {"auth": base64.b64encode(CREDS.encode()).decode()}
    authfile.write_text(json.dumps({"auths": {private_registry.host: entry}}))
    subprocess.run([*hostjob_cmd(), "rmi", "--store", str(tmp_path / "store"), ref],
                   check=True, capture_output=True, env=hostjob_env())  # fmt: skip
    done = pull("--authfile", str(authfile))
    assert done.returncode == 0, done.stderr


def test_containers_auth_json_comes_before_dockers_config(
    tmp_path: Path, private_registry: FakeRegistry
) -> None:
    """podman's order: --creds, then $XDG_RUNTIME_DIR/containers/auth.json (its most
    specific key: the repository's namespace), then ~/.docker/config.json; the first
    file with an entry for the image decides."""
    ref = f"{private_registry.host}/test/img:v1"
    home, runtime = tmp_path / "home", tmp_path / "run"
    (home / ".docker").mkdir(parents=True)
    (runtime / "containers").mkdir(parents=True)
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    for key in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG", "XDG_CONFIG_HOME"):
        env[key] = ""

    def auths(path: Path, creds: dict[str, str]) -> None:
        entries = {k: {"auth": base64.b64encode(v.encode()).decode()} for k, v in creds.items()}
        path.write_text(json.dumps({"auths": entries}))

    def pull(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*hostjob_cmd(), "pull", "-q", "--store", str(tmp_path / "store"), "--plain-http",
             *extra, ref], capture_output=True, text=True, env=hostjob_env(env), timeout=120,
        )  # fmt: skip

    auths(home / ".docker" / "config.json", {private_registry.host: f"{USER}:docker-is-wrong"})
    assert "HTTP 401" in pull().stderr  # docker's file alone: its (wrong) credentials
    auths(runtime / "containers" / "auth.json", {
        private_registry.host: f"{USER}:host-key-is-wrong",
        f"{private_registry.host}/test": CREDS,  # the namespace's entry wins
    })  # fmt: skip
    done = pull()
    assert done.returncode == 0, done.stderr
    auths(runtime / "containers" / "auth.json", {private_registry.host: f"{USER}:wrong"})
    subprocess.run([*hostjob_cmd(), "rmi", "--store", str(tmp_path / "store"), ref],
                   check=True, capture_output=True, env=hostjob_env())  # fmt: skip
    assert "HTTP 401" in pull().stderr  # auth.json has an entry: docker's is not read
    done = subprocess.run(
        [*hostjob_cmd(), "pull", "-q", "--store", str(tmp_path / "store"), "--plain-http",
         "--creds", "-", ref], input=f"{CREDS}\n", capture_output=True, text=True,
        env=hostjob_env(env), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # --creds before every file


def test_a_foreground_run_keeps_no_creds_for_the_containers_life(
    tmp_path: Path,
    as_nobody: Nobody,
    hj_open: Hostjob,
    store_dir: Path,
    private_registry: FakeRegistry,
    running: list[subprocess.Popen[bytes]],
) -> None:
    """``run --creds user:pass IMAGE`` waits for its container: neither it nor any
    process under it shows the password while the job runs."""
    cid = new_id()
    argv = [*hostjob_cmd(), "--root", str(hj_open.root), "run", "--rm", "-q", "--name", cid,
            "--store", str(store_dir), "--plain-http", "--creds", CREDS,
            f"{private_registry.host}/test/img:v1", "/bin/sleep", "60"]  # fmt: skip
    pid = start(running, argv)
    wait_for(lambda: hj_open("state", cid).returncode == 0 and hj_open.status(cid) == "running")
    tree = [pid, *descendants(pid)]
    assert len(tree) >= 2, "the job runs under the foreground run"
    for each in tree:
        shown = cmdline_as_nobody(as_nobody, each)
        assert PASSWORD not in shown, (each, shown)
    assert "***" in cmdline_as_nobody(as_nobody, pid)
    hj_open.ok("kill", cid, "KILL")
    running[0].wait(30)
