"""The join: every process of a container -- the init of `run` and of
`create`, and each `exec` -- is in the job's cgroup in every hierarchy before its first
instruction. It is born in the cgroup2 cgroup by clone3(CLONE_INTO_CGROUP) and writes 0 to
each v1 `tasks` file before it execs; forced onto the fallback (os.fork, cgroup.procs) it
must end up the same. A Python program with threads gets the fallback, and must work."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import (
    CGROUP_ROOT,
    CGROUP_V2,
    Hostjob,
    base_config,
    containers_left,
    hostjob_env,
    new_id,
    require_peer,
)

FALLBACK = {"HOSTJOB_NO_CLONE3": "1"}
PATHS = pytest.mark.parametrize("env", [{}, FALLBACK], ids=["clone3", "fallback"])

# Its first act: /proc/self/cgroup to stdout, or to the file named by argv[1].
PRINTER_C = r"""
#include <fcntl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char buf[8192];
    int in = open("/proc/self/cgroup", O_RDONLY);
    ssize_t n = read(in, buf, sizeof buf);
    int out = argc > 1 ? open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644) : 1;
    return in < 0 || n <= 0 || out < 0 || write(out, buf, n) != n;
}
"""


@pytest.fixture(scope="module")
def printer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A static program that prints its cgroups before doing anything else."""
    require_peer("probes", "gcc")
    directory = tmp_path_factory.mktemp("printer")
    source = directory / "printer.c"
    source.write_text(PRINTER_C)
    binary = directory / "printer"
    subprocess.run(["gcc", "-static", "-O2", "-o", str(binary), str(source)], check=True)
    return str(binary)


def hierarchies() -> list[str]:
    """This host's cgroup hierarchies, as /proc/self/cgroup names them ("4:memory", "0:")."""
    with open("/proc/self/cgroup") as f:
        return sorted(line.rsplit(":", 1)[0] for line in f.read().splitlines())


def assert_in_job(cgroup_text: str, cid: str) -> None:
    lines = sorted(cgroup_text.splitlines())
    assert [line.rsplit(":", 1)[0] for line in lines] == hierarchies()
    assert [line.rsplit(":", 1)[1] for line in lines] == [f"/hostjob/{cid}"] * len(lines), lines


@PATHS
def test_run_init_is_in_every_hierarchy_first(
    hj: Hostjob, bundle, printer: str, env: dict[str, str]
) -> None:
    cid = new_id()
    out = hj.ok("run", "-b", str(bundle(base_config(printer))), cid, env=env)
    assert_in_job(out, cid)


@PATHS
def test_created_init_is_in_every_hierarchy_first(
    hj: Hostjob, bundle, printer: str, tmp_path: Path, env: dict[str, str]
) -> None:
    cid = new_id()
    out = tmp_path / "cgroups"
    hj.ok("create", "-b", str(bundle(base_config(printer, str(out)))), cid, env=env)
    hj.ok("start", cid)
    deadline = time.monotonic() + 30
    while hj.status(cid) != "stopped":
        assert time.monotonic() < deadline, "the container did not finish"
        time.sleep(0.02)
    assert_in_job(out.read_text(), cid)
    hj.ok("delete", cid)


@PATHS
def test_exec_is_in_every_hierarchy_first(
    hj: Hostjob, bundle, printer: str, env: dict[str, str]
) -> None:
    cid = new_id()
    hj.ok("run", "-d", "-b", str(bundle(base_config("sleep", "300"))), cid, env=env)
    try:
        assert_in_job(hj.ok("exec", cid, printer, env=env), cid)
    finally:
        hj.ok("delete", "--force", cid)


def test_the_cgroup2_join_is_a_clone3_and_the_fallback_a_procs_write(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    """What the kernel is asked: clone3 with CLONE_INTO_CGROUP and `tasks` writes, no
    cgroup.procs write (the one that waits for an RCU grace period); forced onto the
    fallback, a plain fork and cgroup.procs in the unified hierarchy."""
    require_peer("probes", "strace")
    config = base_config("true")
    unified = os.path.isfile(f"{CGROUP_ROOT}/unified/cgroup.controllers") or os.path.isfile(
        f"{CGROUP_ROOT}/cgroup.controllers"
    )
    for env in ({}, FALLBACK):
        cid = new_id()
        trace = tmp_path / f"trace-{bool(env)}"
        argv = [
            "strace", "-f", "-qq", "-o", str(trace), "-e", "trace=clone,clone3,openat",
            *hj.argv("run", "-b", str(bundle(config)), cid),
        ]  # fmt: skip
        done = subprocess.run(argv, env=hostjob_env(env), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        text = trace.read_text()
        joins = [line for line in text.splitlines() if f"/hostjob/{cid}/" in line]
        procs_writes = [j for j in joins if "cgroup.procs" in j and "O_WRONLY" in j]
        v1 = [j for j in joins if j.split('"')[1].endswith("/tasks")]
        # cgroup v1's pids and freezer joins write `tasks`; a host without v1 has none.
        assert bool(v1) is not CGROUP_V2, text
        if not unified:
            continue
        if env:
            assert "CLONE_INTO_CGROUP" not in text
            assert len(procs_writes) == 1, joins
        else:
            assert "clone3({flags=CLONE_INTO_CGROUP" in text, text
            assert procs_writes == [], joins


FORK_INTO_CGROUP = """
import os, sys
from hostjob.linux import syscalls
from hostjob.runtime.launch import spawn

cgroup2, v1 = sys.argv[1], sys.argv[2]

# The wrapper itself: the child is born in the cgroup and may run Python at once.
fd = os.open(cgroup2, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
r, w = os.pipe()
pid = syscalls.fork_into_cgroup(fd)
if pid == 0:
    with open("/proc/self/cgroup") as f:
        os.write(w, f.read().encode())
    os._exit(0)
os.close(w)
print("child:", os.read(r, 65536).decode().splitlines()[-1])
assert os.waitpid(pid, 0)[1] == 0
# A v1 cgroup (or any other directory) is no cgroup2 cgroup: the kernel refuses (EBADF),
# the parent unchanged.
v1fd = os.open(v1, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
try:
    syscalls.fork_into_cgroup(v1fd)
except OSError as err:
    print("v1:", err.errno)

# spawn's choice: clone3 into the cgroup2 cgroup; for a cgroup that cannot take the
# process, a plain fork (whose join then reports the kernel's error).
for target in (cgroup2, v1):
    pid, born_inside = spawn._fork(target)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("spawn:", born_inside)
"""


def test_fork_into_cgroup_and_its_fallback(tmp_path: Path) -> None:
    unified = (
        f"{CGROUP_ROOT}/unified"
        if os.path.isfile(f"{CGROUP_ROOT}/unified/cgroup.controllers")
        else CGROUP_ROOT
    )
    name = f"hostjob-test-{new_id()}"
    cgroup2 = Path(unified) / name
    # Not a cgroup2 cgroup: a v1 one where v1 is mounted, else a plain directory (the
    # kernel refuses both alike).
    v1 = tmp_path / name if CGROUP_V2 else Path(CGROUP_ROOT) / "pids" / name
    cgroup2.mkdir()
    v1.mkdir()
    try:
        done = subprocess.run(
            [sys.executable, "-c", FORK_INTO_CGROUP, str(cgroup2), str(v1)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            f"child: 0::/{name}",
            "v1: 9",  # EBADF
            "spawn: True",
            "spawn: False",
        ]
    finally:
        cgroup2.rmdir()
        v1.rmdir()


THREADED = """
import os, sys, threading, time
import hostjob

root, bundle, cid, out = sys.argv[1:5]
stop = threading.Event()

def busy(n):
    # Threads that allocate, take locks, import and sleep while the container is made.
    lock = threading.Lock()
    while not stop.is_set():
        with lock:
            junk = [bytearray(1024 * (n + 1)) for _ in range(50)]
        del junk
        import json  # noqa: F401
        time.sleep(0.0005)

threads = [threading.Thread(target=busy, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
try:
    for round in range(3):
        c = hostjob.Container.create(f"{cid}-{round}", bundle, root=root)
        c.start()
        deadline = time.monotonic() + 30
        while c.state().status != "stopped":
            assert time.monotonic() < deadline, "the container did not finish"
            time.sleep(0.01)
        c.delete()
        print(f"=== {cid}-{round}")
        print(open(out).read(), end="")
finally:
    stop.set()
    for t in threads:
        t.join()
"""


def test_library_create_in_a_threaded_program(
    bundle, printer: str, tmp_path: Path, no_leaks
) -> None:
    """Container.create from a program running 8 busy threads: the container's process
    is in the job everywhere, nothing deadlocks, nothing is left behind."""
    cid = new_id()
    out = tmp_path / "cgroups"
    b = bundle(base_config(printer, str(out)))
    # The containers are children of the program: it reaps them (subprocess does not).
    done = subprocess.run(
        [sys.executable, "-c", THREADED, str(tmp_path / "state"), str(b), cid, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=hostjob_env(),
    )
    assert done.returncode == 0, done.stderr
    rounds = done.stdout.split("=== ")[1:]
    assert [r.split("\n", 1)[0] for r in rounds] == [f"{cid}-{i}" for i in range(3)]
    for text in rounds:
        name, cgroup_text = text.split("\n", 1)
        assert_in_job(cgroup_text, name)
        no_leaks(name)
    assert containers_left(tmp_path / "state") == []
