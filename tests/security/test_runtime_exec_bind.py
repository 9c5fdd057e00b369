"""`exec` into a bind-mode container joins its mount namespace.

It used to open ``/proc/<init pid>/ns/mnt`` by pid: if the init had exited and its pid
had gone to another process, the exec joined that stranger's mount namespace. Now
the child pins the init with a pidfd, checks its start time after that, and joins
with ``setns(pidfd, CLONE_NEWNS)`` (Linux 5.8+); where the kernel lacks that (EINVAL),
or with ``HOSTJOB_PIDFD_SETNS=0`` / ``hostjob.runtime.sandbox.join.PIDFD_SETNS = False``,
it opens ``/proc/<pid>/ns/mnt`` and checks the start time after the open.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hostjob.errors import StartError
from hostjob.linux import syscalls
from hostjob.runtime import proc
from hostjob.runtime.sandbox import join
from tests.helpers import Hostjob, base_config, new_id


def _bind_bundle(bundle, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    config = base_config("sleep", "300")
    config["annotations"] = {
        "io.hostjob.mount-mode": "bind",
        "io.hostjob.rootfs-mount-point": str(tmp_path / "hpc"),
    }
    return bundle(config)  # type: ignore[no-any-return]


def _in_child(action: Callable[[], str]) -> str:
    """Run ``action`` in a forked child (setns changes the caller); its result line."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            result = action()
        except BaseException as err:  # reported to the parent
            result = f"{type(err).__name__}: {err}"
        os.write(write, result.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def _ns(pid: int | str = "self") -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


@pytest.mark.parametrize("pidfd", ["1", "0"], ids=["pidfd", "fallback"])
def test_exec_sees_the_bind_mode_rootfs(hj: Hostjob, bundle, tmp_path: Path, pidfd: str) -> None:
    cid = new_id("sec")
    hj.ok("run", "-d", "--bundle", str(_bind_bundle(bundle, tmp_path)), cid)
    out = hj.ok(
        "exec", cid, "cat", str(tmp_path / "hpc" / "etc" / "image-release"),
        env={"HOSTJOB_PIDFD_SETNS": pidfd},
    )  # fmt: skip
    assert out == "hostjob test image\n"
    hj.ok("delete", "--force", cid)


@pytest.mark.parametrize("use_pidfd", [True, False], ids=["pidfd", "fallback"])
def test_join_uses_the_pidfd_or_the_checked_fallback(
    hj: Hostjob, bundle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_pidfd: bool
) -> None:
    """The namespace is joined through the init's pidfd (or, forced, through its
    /proc ns file), and it is the init's."""
    cid = new_id("sec")
    hj.ok("run", "-d", "--bundle", str(_bind_bundle(bundle, tmp_path)), cid)
    state = hj.state(cid)
    init = state["pid"]
    started = proc.start_time(init)
    assert started is not None
    monkeypatch.setattr(join, "PIDFD_SETNS", use_pidfd)
    real_setns = syscalls.setns
    used: list[str] = []

    def spy(fd: int, nstype: int = 0) -> None:
        used.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_setns(fd, nstype)

    monkeypatch.setattr(syscalls, "setns", spy)

    def joined_by_exec() -> str:
        join.join_namespace(init, started)()
        return f"{used[0]} {_ns() == _ns(init)}"

    how, joined = _in_child(joined_by_exec).split()
    assert joined == "True"
    assert how == ("anon_inode:[pidfd]" if use_pidfd else _ns(init))
    hj.ok("delete", "--force", cid)


def test_exec_never_joins_a_process_that_took_the_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack, first: a stranger with a mount namespace of its own holds the pid
    the state names (the init exited, the pid was reused). Opening /proc/<pid>/ns/mnt
    by pid, as exec did, joins the stranger's namespace. The join now checks the pid's
    start time against the init's (after pinning it) and refuses, either way."""
    stranger = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "300"])
    try:
        for _ in range(500):  # until unshare has made its namespace
            if _ns(stranger.pid) != _ns():
                break
            time.sleep(0.01)
        assert _ns(stranger.pid) != _ns()
        started = proc.start_time(stranger.pid)
        assert started is not None
        recorded = started - 1  # the init's start time in the state: not the stranger's

        def old_join() -> str:
            fd = os.open(f"/proc/{stranger.pid}/ns/mnt", os.O_RDONLY)
            syscalls.setns(fd, syscalls.CLONE_NEWNS)
            return str(_ns() == _ns(stranger.pid))

        assert _in_child(old_join) == "True"

        for use_pidfd in (True, False):
            monkeypatch.setattr(join, "PIDFD_SETNS", use_pidfd)

            def new_join() -> str:
                try:
                    join.join_namespace(stranger.pid, recorded)()
                except StartError as err:
                    return f"refused {_ns() != _ns(stranger.pid)} {err}"
                return "joined"

            result = _in_child(new_join)
            assert result.startswith("refused True"), result
            assert "is no longer its init" in result
    finally:
        stranger.kill()
        stranger.wait()


def test_exec_after_the_init_exited_is_refused(hj: Hostjob, bundle, tmp_path: Path) -> None:
    """The init gone between exec's status check and the join: a clear error."""
    cid = new_id("sec")
    hj.ok("run", "-d", "--bundle", str(_bind_bundle(bundle, tmp_path)), cid)
    init = hj.state(cid)["pid"]
    started = proc.start_time(init)
    assert started is not None
    hj.ok("kill", cid, "KILL")
    for _ in range(1000):
        if not proc.is_alive(init, started):
            break
        time.sleep(0.01)
    result = _in_child(lambda: str(join.join_namespace(init, started)()))
    assert result.startswith("StartError: cannot join the container's mount namespace"), result
    hj.ok("delete", "--force", cid)
