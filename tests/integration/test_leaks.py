"""Leak check: many lifecycles leave the host exactly as they found it.

* ``run`` cycles (bundle form; foreground run deletes the container at the end) and
  create/start/kill/delete cycles leave the mount table, every cgroup hierarchy, the
  state root (and the image store) as before;
* hostjob's own fd count does not grow (the library in this process; ``run`` while it
  waits), and container processes, init or exec'd, hold only 0, 1, 2 and the fds that
  were asked for (``--preserve-fds``).

N = 50 cycles normally; with ``--long`` 500 run cycles and 200 lifecycles.

The machine may be shared with other test runs (other worktrees' suites make cgroups
and mounts of their own), so the snapshots cover what this test's containers could
touch: every cgroup directory whose path names one of its IDs (they share a prefix),
every mount under its temp dir or naming one of its IDs, its state root, its bundle.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CGROUP_ROOT, Hostjob, base_config, containers_left, new_id, wait_for


def cycles(request: pytest.FixtureRequest, long_size: int) -> int:
    return long_size if request.config.getoption("--long") else 50


def mount_table(scope: Scope) -> Counter[tuple[str, str, str]]:
    """The mounts in scope as (mount point, fs type, source), with multiplicity."""
    table: Counter[tuple[str, str, str]] = Counter()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if scope.covers(fields[4]) or scope.covers(fields[sep + 2]):
                table[(fields[4], fields[sep + 1], fields[sep + 2])] += 1
    return table


def cgroup_trees(scope: Scope) -> set[str]:
    """The directories in scope of every mounted cgroup hierarchy (v1 and v2)."""
    found = set()
    for hierarchy in os.listdir(CGROUP_ROOT):
        top = os.path.join(CGROUP_ROOT, hierarchy)
        if os.path.islink(top) or not os.path.isdir(top):
            continue
        for dirpath, _dirnames, _files in os.walk(top):
            if scope.id_prefix in dirpath:
                found.add(dirpath)
    return found


class Scope:
    """What one test's containers may touch: IDs with one prefix, one temp dir."""

    def __init__(self, tmp_path: Path) -> None:
        self.id_prefix = "lk" + uuid.uuid4().hex[:6]
        self.tmp = str(tmp_path)

    def new_id(self) -> str:
        return new_id(self.id_prefix)

    def covers(self, path: str) -> bool:
        return path.startswith(self.tmp) or self.id_prefix in path


def tree(path: Path) -> list[str]:
    if not path.exists():
        return []
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def snapshot(scope: Scope, *dirs: Path) -> dict[str, Any]:
    return {
        "mounts": mount_table(scope),
        "cgroups": cgroup_trees(scope),
        **{str(d): tree(d) for d in dirs},
    }


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    for key in before:
        if before[key] != after[key]:
            if isinstance(before[key], Counter):
                extra = after[key] - before[key]
                gone = before[key] - after[key]
            else:
                extra = sorted(set(after[key]) - set(before[key]))
                gone = sorted(set(before[key]) - set(after[key]))
            pytest.fail(f"{key} changed: left behind {extra}, lost {gone}")


def fds_of(pid: int) -> dict[int, str]:
    out = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except FileNotFoundError:
            pass
    return out


def wait_stopped(hj: Hostjob, cid: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while hj.status(cid) != "stopped":
        assert time.monotonic() < deadline, f"{cid} did not stop"
        time.sleep(0.01)


def test_run_cycles_leave_nothing(hj: Hostjob, bundle, tmp_path: Path, request) -> None:
    n = cycles(request, 500)
    scope = Scope(tmp_path)
    b = bundle(base_config("true"))
    before = snapshot(scope, hj.root, b)
    for _ in range(n):
        hj.ok("run", "--bundle", str(b), scope.new_id())
    assert_same(before, snapshot(scope, hj.root, b))
    assert containers_left(hj.root) == []


@pytest.fixture(scope="module")
def leak_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hostjob.images.pack import pack
    from tests.helpers import make_rootfs

    src = make_rootfs(tmp_path_factory.mktemp("leak-image-src"))
    layout = tmp_path_factory.mktemp("leak-image-layout")
    pack(str(src), f"oci:{layout}:v1", cmd=["true"], env=["PATH=/bin"])
    return f"oci:{layout}:v1"


def test_run_image_cycles_leave_nothing(
    hj: Hostjob, leak_image: str, tmp_path: Path, request
) -> None:
    """run --rm IMAGE: the overlay, its writable layer and the store's container record
    go with the container; the store's content stays exactly as it was."""
    n = cycles(request, 500)
    scope = Scope(tmp_path)
    store = tmp_path / "store"
    argv = ("run", "--rm", "--quiet", "--store", str(store))
    hj.ok(*argv, "--name", scope.new_id(), leak_image)  # pulls, and makes rw/ once
    before = snapshot(scope, hj.root, store)
    for _ in range(n):
        hj.ok(*argv, "--name", scope.new_id(), leak_image)
    assert_same(before, snapshot(scope, hj.root, store))
    assert containers_left(hj.root) == []


def test_image_init_holds_only_stdio(hj: Hostjob, leak_image: str, tmp_path: Path) -> None:
    cid = new_id()
    store = tmp_path / "store"
    hj.ok("run", "-d", "-q", "--store", str(store), "--name", cid, leak_image, "sleep", "300",
          stdin=open(os.devnull))  # noqa: SIM115  # fmt: skip
    pid = hj.state(cid)["pid"]
    assert sorted(fds_of(pid)) == [0, 1, 2], fds_of(pid)
    hj.ok("delete", "--force", cid)


def test_lifecycle_cycles_leave_nothing(hj: Hostjob, bundle, tmp_path: Path, request) -> None:
    """create/start/kill/delete; every init holds exactly 0, 1, 2 once it runs."""
    n = cycles(request, 200)
    config = base_config("sleep", "300")
    config["windows"] = {"jobContainer": {"rootfsMountPoint": str(tmp_path / "mp")}}
    b = bundle(config)
    scope = Scope(tmp_path)
    before = snapshot(scope, hj.root, b)
    for _ in range(n):
        cid = scope.new_id()
        hj.ok("create", "--bundle", str(b), cid)
        hj.ok("start", cid)
        pid = hj.state(cid)["pid"]
        # start returns once the byte is written, not once the program runs: on a loaded
        # machine the init may not have reached its exec yet (its set-up fds close there)
        exe = f"/proc/{pid}/exe"
        assert wait_for(lambda exe=exe: "python" not in os.path.basename(os.readlink(exe)), 10)
        assert sorted(fds_of(pid)) == [0, 1, 2], fds_of(pid)
        hj.ok("kill", cid, "KILL")
        wait_stopped(hj, cid)
        hj.ok("delete", cid)
    assert_same(before, snapshot(scope, hj.root, b))
    assert not (tmp_path / "mp").exists()


def test_library_fd_count_does_not_grow(tmp_path: Path, bundle, request) -> None:
    """The library in this process: create/start/kill/delete does not leak fds."""
    from hostjob import Container

    n = cycles(request, 200)
    b = bundle(base_config("sleep", "300"))
    root = str(tmp_path / "state")

    def one() -> None:
        container = Container.create(new_id(), str(b), root=root)
        container.start()
        pid = container.pid
        container.kill(9)
        os.waitpid(pid, 0)  # we are its parent
        container.delete()

    one()  # warm-up: lazily imported modules may keep a file open once
    before = fds_of(os.getpid())
    for _ in range(n):
        one()
    assert fds_of(os.getpid()) == before
    assert containers_left(Path(root)) == []


def test_foreground_run_holds_few_fds_and_passes_none(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """While `run` waits: its own fds are bounded, the program holds only 0, 1, 2."""
    b = bundle(base_config("sleep", "300"))
    cid = new_id()
    proc = subprocess.Popen(hj.argv("run", "--bundle", str(b), cid), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            state = hj("state", cid)
            if state.returncode == 0 and '"running"' in state.stdout:
                break
            assert time.monotonic() < deadline, "run did not start"
            time.sleep(0.01)
        pid = hj.state(cid)["pid"]
        # start returns once the byte is written, not once the program runs: on a loaded
        # machine the init may not have reached its exec yet (its set-up fds close there)
        exe = f"/proc/{pid}/exe"
        assert wait_for(lambda exe=exe: "python" not in os.path.basename(os.readlink(exe)), 10)
        assert sorted(fds_of(pid)) == [0, 1, 2], fds_of(pid)
        own = fds_of(proc.pid)
        # stdio, the log file; nothing of the container's state (fifo, lock, state dir)
        assert not [t for t in own.values() if str(hj.root) in t], own
        assert len(own) <= 6, own
        hj.ok("kill", cid, "KILL")
        assert proc.wait(timeout=20) == 128 + 9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert containers_left(hj.root) == []


def test_preserve_fds_and_exec_fds(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """--preserve-fds 2 gives the init exactly 0-4; an exec'd process gets 0, 1, 2."""
    b = bundle(base_config("sleep", "300"))
    cid = new_id()
    a = os.open(tmp_path / "a", os.O_WRONLY | os.O_CREAT, 0o600)
    c = os.open(tmp_path / "c", os.O_WRONLY | os.O_CREAT, 0o600)
    stray = os.open(tmp_path / "stray", os.O_WRONLY | os.O_CREAT, 0o600)
    os.set_inheritable(stray, True)  # inheritable, but not asked for

    def place() -> None:
        os.dup2(a, 3)
        os.dup2(c, 4)
        os.dup2(stray, 5)

    try:
        hj.ok(
            "create", "--bundle", str(b), "--preserve-fds", "2", cid,
            preexec_fn=place, pass_fds=(3, 4, 5), close_fds=True,
        )  # fmt: skip
    finally:
        for fd in (a, c, stray):
            os.close(fd)
    hj.ok("start", cid)
    pid = hj.state(cid)["pid"]
    fds = fds_of(pid)
    assert sorted(fds) == [0, 1, 2, 3, 4], fds
    assert fds[3] == str(tmp_path / "a") and fds[4] == str(tmp_path / "c")
    pid_file = tmp_path / "exec.pid"
    hj.ok("exec", "--detach", "--pid-file", str(pid_file), cid, "sleep", "300")
    exec_pid = int(pid_file.read_text())
    assert sorted(fds_of(exec_pid)) == [0, 1, 2], fds_of(exec_pid)
    hj.ok("delete", "--force", cid)


def test_events_loop_fd_count_is_flat(hj: Hostjob, bundle) -> None:
    """`events --interval` is the one long-running runtime command: its fds stay put."""
    b = bundle(base_config("sleep", "300"))
    cid = new_id()
    hj.ok("run", "-d", "--bundle", str(b), cid, stdin=open(os.devnull))  # noqa: SIM115
    events = subprocess.Popen(
        hj.argv("events", "--interval", "50ms", cid), stdout=subprocess.DEVNULL
    )
    try:
        time.sleep(1.0)
        first = len(fds_of(events.pid))
        time.sleep(2.0)  # ~40 more rounds of stats
        assert len(fds_of(events.pid)) == first, fds_of(events.pid)
        assert events.poll() is None
    finally:
        events.kill()
        events.wait()
        hj.ok("delete", "--force", cid)
