"""critest's container cases (``container.go``, ``container_linux.go``), for both handlers:
the life cycle and its listing filters, stats, ``ExecSync``, logs and their reopening, OOM,
and an image whose program is a bare name the host has a different program for."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri

from tests.compat import harness

from .critest import PAUSE, Critest
from .kubelet import CALL_TIMEOUT, wait

MiB = 1 << 20


def test_container_lifecycle(ct: Critest) -> None:
    """Create, list (by ID, state, pod, label), start, status, stop, remove."""
    sb = ct.run_pod()
    cid = sb.create("lifecycle", PAUSE, labels={"critest": "lifecycle"})
    created = cri.ContainerStateValue(state=cri.CONTAINER_CREATED)
    assert ct.list_containers(id=cid) == [cid]
    assert ct.list_containers(id=cid, state=created) == [cid]
    assert ct.status(cid).state == cri.CONTAINER_CREATED

    sb.start(cid)
    st = ct.wait_state(cid, cri.CONTAINER_RUNNING)
    assert st.started_at > 0 and st.metadata.name == "lifecycle"
    assert st.image_ref.startswith("sha256:") and st.log_path == str(sb.log_dir / "lifecycle.log")
    running = cri.ContainerStateValue(state=cri.CONTAINER_RUNNING)
    assert ct.list_containers(id=cid, state=running) == [cid]
    assert ct.list_containers(id=cid, state=created) == []
    assert ct.list_containers(pod_sandbox_id=sb.sandbox_id) == [cid]
    assert ct.list_containers(label_selector={"critest": "lifecycle"}) == [cid]

    ct.rt.StopContainer(cri.StopContainerRequest(container_id=cid, timeout=60), timeout=90)
    st = ct.status(cid)
    assert st.state == cri.CONTAINER_EXITED and st.finished_at >= st.started_at, st

    ct.rt.RemoveContainer(cri.RemoveContainerRequest(container_id=cid), timeout=CALL_TIMEOUT)
    assert ct.list_containers(id=cid) == []
    with pytest.raises(grpc.RpcError) as gone:
        ct.status(cid)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]


def test_container_stats(ct: Critest) -> None:
    """``ContainerStats`` and ``ListContainerStats`` (by ID, pod and label): CPU and memory."""
    sb = ct.run_pod()
    cid = sb.run("stats", PAUSE, labels={"critest": "stats"})

    def stats() -> cri.ContainerStats:
        return ct.rt.ContainerStats(
            cri.ContainerStatsRequest(container_id=cid), timeout=CALL_TIMEOUT
        ).stats

    wait(lambda: stats().cpu.usage_core_nano_seconds.value > 0, 30, "CPU time to be counted")
    st = stats()
    assert st.attributes.id == cid and st.attributes.metadata.name == "stats"
    assert st.memory.working_set_bytes.value > 0 and st.cpu.timestamp > 0
    for f in (
        cri.ContainerStatsFilter(id=cid),
        cri.ContainerStatsFilter(pod_sandbox_id=sb.sandbox_id),
        cri.ContainerStatsFilter(label_selector={"critest": "stats"}),
    ):
        listed = ct.rt.ListContainerStats(
            cri.ListContainerStatsRequest(filter=f), timeout=CALL_TIMEOUT
        ).stats
        assert [s.attributes.id for s in listed] == [cid], f
        assert listed[0].memory.working_set_bytes.value > 0


def test_exec_sync(ct: Critest) -> None:
    """``ExecSync``: its output, a non-zero exit code with stderr, and a timeout (an error, and
    the timed-out process is gone)."""
    sb = ct.run_pod()
    cid = sb.run("exec", PAUSE)
    assert ct.exec_ok(cid, ["echo", "hello"]) == "hello\n"
    r = ct.exec_sync(cid, ["sh", "-c", "echo to-out; echo to-err >&2; exit 3"])
    assert (r.exit_code, r.stdout, r.stderr) == (3, b"to-out\n", b"to-err\n"), r

    probe = f"1000.{secrets.randbelow(10**6):06d}"  # a command line to look for
    with pytest.raises(grpc.RpcError) as timed_out:
        ct.exec_sync(cid, ["sleep", probe], timeout=1)
    assert "timeout" in timed_out.value.details()  # type: ignore[attr-defined]
    wait(lambda: not harness.processes_matching(f"sleep {probe}"), 30, "the timed-out exec to die")
    assert ct.status(cid).state == cri.CONTAINER_RUNNING


def test_container_log(ct: Critest) -> None:
    """A container's output in its CRI log file (``<pod log dir>/<log_path>``)."""
    sb = ct.run_pod()
    cid = sb.run("log", ["sh", "-c", "echo hello World; echo to-stderr >&2"])
    st = ct.wait_state(cid, cri.CONTAINER_EXITED)
    assert (st.exit_code, st.reason) == (0, "Completed"), st
    sb.wait_log(cid, "hello World", "to-stderr")
    assert sorted(sb.log(cid)) == [("stderr", "F", "to-stderr"), ("stdout", "F", "hello World")]


def test_reopen_container_log(ct: Critest) -> None:
    """``ReopenContainerLog`` after the log was renamed (log rotation): a new file at the log
    path gets the new lines, the renamed one no more."""
    sb = ct.run_pod()
    cid = sb.run(
        "reopen", ["sh", "-c", "i=0; while true; do i=$((i+1)); echo line-$i; sleep 0.1; done"]
    )
    path = sb.log_path(cid)
    wait(lambda: len(sb.log(cid)) >= 2, 30, "the first lines")
    rotated = Path(f"{path}.1")
    os.rename(path, rotated)
    ct.rt.ReopenContainerLog(cri.ReopenContainerLogRequest(container_id=cid), timeout=CALL_TIMEOUT)
    assert path.exists(), "no new log file"
    wait(lambda: len(sb.log(cid)) >= 3, 30, "lines in the new log file")
    old = sb.log(cid, rotated)
    first_new = int(sb.log(cid)[0][2].split("-")[1])
    wait(lambda: len(sb.log(cid)) >= 6, 30, "more lines in the new log file")
    assert sb.log(cid, rotated) == old, "the rotated file still grows"
    assert int(old[-1][2].split("-")[1]) < first_new


def test_oom_killed(ct: Critest) -> None:
    """A container past its memory limit: exit code 137, reason ``OOMKilled``. It allocates
    a moment after it starts: containerd's shim watches the cgroup for OOM kills only once
    the start returned, and one before that is reported as a plain ``Error`` (seen with
    runc on a loaded host). The limit leaves room for the runtime's own set-up in the job:
    Debian 13's ``runc init`` was OOM-killed at create under 15 MiB."""
    sb = ct.run_pod()
    limit = cri.LinuxContainerResources(
        memory_limit_in_bytes=64 * MiB, memory_swap_limit_in_bytes=64 * MiB
    )
    cid = sb.run(
        "oom", ["sh", "-c", "sleep 1; dd if=/dev/zero of=/dev/null bs=100M"], resources=limit
    )
    st = ct.wait_state(cid, cri.CONTAINER_EXITED, timeout=120)
    assert (st.exit_code, st.reason) == (137, "OOMKilled"), st


def test_image_program_by_bare_name(ct: Critest) -> None:
    """critest's containers run ``top``, a bare name: it is the image's (busybox's, which
    needs no terminal), not the host's procps ``top`` (which exits at once without one); the
    container keeps running and takes execs."""
    host_top = shutil.which("top")
    assert host_top and "busybox" not in os.path.realpath(host_top), "the host needs procps top"
    sb = ct.run_pod()
    cid = sb.run("top", ["top"])
    pid = ct.pid(cid)

    def cmdline() -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b"(gone)"

    # (the runtime's own process becomes the program a moment after StartContainer returns)
    wait(lambda: cmdline() == b"top\0", 30, f"top to run (cmdline {cmdline()!r})")
    exe = os.readlink(f"/proc/{pid}/exe")
    assert exe.endswith("/bin/busybox"), exe
    assert ct.exec_ok(cid, ["echo", "still-here"]) == "still-here\n"
    assert ct.status(cid).state == cri.CONTAINER_RUNNING
