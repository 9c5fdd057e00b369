"""containerd 1.6 + ctr drive each runtime through the runc shim (``--runc-binary``).

Every case ends by checking that nothing is left behind once the client removed the container:
task/container listing, mounts, the cgroup ``/<ns>/<id>``, the shim's runtime state dir and
socket, and shim processes.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from . import harness
from .image import OCIImage

if TYPE_CHECKING:
    from pathlib import Path

    Containerd = harness.Containerd
    Runtime = harness.Runtime

LOOP = 'trap "exit 0" TERM; while :; do sleep 1; done'
"""A detached container's program: idles, exits 0 on SIGTERM (even as PID 1 of a namespace)."""


def _assert_clean(ctd: Containerd, cid: str, runtime: Runtime) -> None:
    # a client may finish its cleanup just after it returns (conmon's exit command): allow 5 s
    harness.wait_for(lambda: not ctd.leftovers(cid, runtime), 5.0, 0.1)
    left = ctd.leftovers(cid, runtime)
    assert not left, f"{runtime.name}: {cid} left behind: {left}"


def _run_detached(ctd: Containerd, runtime: Runtime, image: OCIImage, name: str) -> str:
    """``ctr run -d`` of the idle loop; the container's ID once its task is RUNNING."""
    cid = ctd.new_id(name)
    cp = ctd.ctr(
        "run", "-d", "--runc-binary", runtime.client_path, image.ref, cid, "sh", "-c", LOOP,
        timeout=60,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    assert ctd.wait_status(cid, "RUNNING"), ctd.tasks()
    return cid


def test_images_import(containerd_daemon: Containerd, test_image: OCIImage) -> None:
    ctd = containerd_daemon
    cp = ctd.ctr("images", "import", test_image.archive, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert test_image.ref in ctd.ctr("images", "ls", "-q", check=True).stdout.split()
    # the manifest digest ctr records is the archive's
    out = ctd.ctr("images", "ls", check=True).stdout
    assert test_image.manifest_digest in out


def test_run_rm_oneshot(containerd: Containerd, runtime: Runtime, test_image: OCIImage) -> None:
    cid = containerd.new_id("oneshot")
    cp = containerd.ctr(
        "run",
        "--rm",
        "--runc-binary",
        runtime.client_path,
        test_image.ref,
        cid,
        "sh",
        "-c",
        f"echo hello-from-{runtime.name}; {harness.PROBE_SH}",
        timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    assert f"hello-from-{runtime.name}" in cp.stdout.splitlines()
    assert not harness.probe_problems(runtime, cp.stdout), cp.stdout
    _assert_clean(containerd, cid, runtime)


def test_run_rm_exit_status(containerd: Containerd, runtime: Runtime, test_image: OCIImage) -> None:
    cid = containerd.new_id("exit7")
    cp = containerd.ctr(
        "run",
        "--rm",
        "--runc-binary",
        runtime.client_path,
        test_image.ref,
        cid,
        "sh",
        "-c",
        "echo out; echo err >&2; exit 7",
        timeout=60,
    )
    assert cp.returncode == 7, (cp.stdout, cp.stderr)
    assert cp.stdout.splitlines() == ["out"]
    assert "err" in cp.stderr.splitlines()
    _assert_clean(containerd, cid, runtime)


def test_detached_exec_ps_pause_kill_delete(
    containerd: Containerd, runtime: Runtime, test_image: OCIImage
) -> None:
    ctd = containerd
    cid = _run_detached(ctd, runtime, test_image, "detached")
    pid = ctd.tasks()[cid][0]

    # the init is in the container's cgroup (the shim reads /proc/PID/cgroup after create)
    cg = ctd.cgroup_path(cid)
    assert all(p.rstrip("/").endswith(cg) for p in harness.process_cgroups(pid)), (
        harness.process_cgroups(pid)
    )

    ex = ctd.ctr(
        "task",
        "exec",
        "--exec-id",
        "x1",
        cid,
        "sh",
        "-c",
        f"echo exec-out; {harness.PROBE_SH}; exit 3",
        timeout=60,
    )
    assert ex.returncode == 3, ex.stderr
    assert ex.stdout.splitlines()[0] == "exec-out"
    assert not harness.probe_problems(runtime, ex.stdout), ex.stdout

    ps = ctd.ctr("task", "ps", cid, check=True).stdout.splitlines()
    assert ps[0].split()[0] == "PID"
    assert pid in [int(line.split()[0]) for line in ps[1:]]

    assert ctd.ctr("task", "pause", cid).returncode == 0
    assert ctd.task_status(cid) == "PAUSED"
    assert harness.cgroup_frozen(cg) is True
    assert ctd.ctr("task", "resume", cid).returncode == 0
    assert ctd.task_status(cid) == "RUNNING"
    assert harness.cgroup_frozen(cg) is False

    assert ctd.ctr("task", "kill", cid).returncode == 0  # SIGTERM
    assert ctd.wait_status(cid, "STOPPED", 15), ctd.tasks()
    dl = ctd.ctr("task", "delete", cid)
    assert dl.returncode == 0, dl.stderr
    assert ctd.ctr("containers", "rm", cid).returncode == 0
    _assert_clean(ctd, cid, runtime)


def test_run_with_config(
    containerd: Containerd, runtime: Runtime, busybox_rootfs: Path, tmp_path: Path
) -> None:
    """``ctr run --config`` with a hand-made spec (no image): a job-container spec for hostjob."""
    ctd = containerd
    cid = ctd.new_id("config")
    spec = harness.runc_like_spec(
        busybox_rootfs,
        ["sh", "-c", "echo from-config; exit 5"],
        cgroups_path=ctd.cgroup_path(cid),
        job_container=runtime.is_job_container,
    )
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    cp = ctd.ctr(
        "run", "--rm", "--runc-binary", runtime.client_path, "--config", path, cid, timeout=60
    )
    assert cp.returncode == 5, (cp.stdout, cp.stderr)
    assert cp.stdout.splitlines() == ["from-config"]
    _assert_clean(ctd, cid, runtime)


def test_task_metrics(containerd: Containerd, runtime: Runtime, test_image: OCIImage) -> None:
    ctd = containerd
    cid = _run_detached(ctd, runtime, test_image, "metrics")
    table = ctd.ctr("task", "metrics", cid)
    assert table.returncode == 0, table.stderr
    assert "pids.current" in table.stdout, table.stdout
    js = ctd.ctr("task", "metrics", "--format", "json", cid)
    assert js.returncode == 0, js.stderr
    m = json.loads(js.stdout)
    assert m["pids"]["current"] >= 1  # sh (+ sleep)
    usage = m["memory"]["usage"]
    assert (usage["usage"] if isinstance(usage, dict) else usage) > 0
    cpu = m["cpu"]
    assert (cpu["usage"]["total"] if "usage" in cpu else cpu["usage_usec"]) > 0  # v1 / v2

    assert ctd.ctr("task", "kill", "--signal", "SIGKILL", cid).returncode == 0
    assert ctd.wait_status(cid, "STOPPED", 15)
    assert ctd.ctr("task", "delete", cid).returncode == 0
    assert ctd.ctr("containers", "rm", cid).returncode == 0
    _assert_clean(ctd, cid, runtime)
