"""podman (4.3, 5.4, 5.8) + conmon drive each runtime (``podman --runtime PATH``), with
each cgroup manager (cgroupfs; systemd where it runs the host on cgroup v2).

Every case ends by checking that nothing is left once podman removed the container: listing,
mounts naming the container ID, its cgroup (``/libpod_parent/libpod-<id>``, or
``/machine.slice/libpod-<id>.scope`` with systemd), the runtime's state
dir ``<default root>/<id>`` (podman as root passes no ``--root``), and conmon processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import harness
from .image import OCIImage

if TYPE_CHECKING:
    Podman = harness.Podman
    Runtime = harness.Runtime

LOOP = 'trap "exit 0" TERM; while :; do sleep 1; done'


def _assert_clean(pm: Podman, cid: str, runtime: Runtime) -> None:
    # a client may finish its cleanup just after it returns (conmon's exit command): allow 5 s
    harness.wait_for(lambda: not pm.leftovers(cid, runtime), 5.0, 0.1)
    left = pm.leftovers(cid, runtime)
    assert not left, f"{runtime.name}: {cid[:12]} left behind: {left}"


def test_load(podman_env: Podman, test_image: OCIImage) -> None:
    cp = podman_env.podman("load", "-i", test_image.archive, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert f"Loaded image: {test_image.ref}" in cp.stdout
    listed = podman_env.podman("images", "--format", "{{.Repository}}:{{.Tag}}", check=True)
    assert test_image.ref in listed.stdout.split()


def test_run_rm_oneshot(podman: Podman, runtime: Runtime, test_image: OCIImage) -> None:
    name = podman.new_name("oneshot")
    cp = podman.podman(
        "run",
        "--rm",
        "--name",
        name,
        test_image.ref,
        "sh",
        "-c",
        f"echo hello-from-{runtime.name}; {harness.PROBE_SH}",
        runtime=runtime,
        timeout=60,
    )
    assert cp.returncode == 0, cp.stderr
    assert f"hello-from-{runtime.name}" in cp.stdout.splitlines()
    assert not harness.probe_problems(runtime, cp.stdout), cp.stdout
    assert podman.podman("container", "exists", name).returncode == 1
    _assert_clean(podman, podman.id_of(name), runtime)


def test_run_rm_exit_status(podman: Podman, runtime: Runtime, test_image: OCIImage) -> None:
    name = podman.new_name("exit7")
    cp = podman.podman(
        "run",
        "--rm",
        "--name",
        name,
        test_image.ref,
        "sh",
        "-c",
        "echo out; echo err >&2; exit 7",
        runtime=runtime,
        timeout=60,
    )
    assert cp.returncode == 7, (cp.stdout, cp.stderr)
    assert cp.stdout.splitlines() == ["out"]
    assert "err" in cp.stderr.splitlines()
    assert podman.podman("container", "exists", name).returncode == 1
    _assert_clean(podman, podman.id_of(name), runtime)


def test_create_start_attach_rm(podman: Podman, runtime: Runtime, test_image: OCIImage) -> None:
    """``podman create`` + ``start --attach`` + ``rm``: the runtime's create/start split."""
    name = podman.new_name("created")
    cp = podman.podman("create", "--name", name, test_image.ref, "true", runtime=runtime)
    assert cp.returncode == 0, cp.stderr
    cid = cp.stdout.strip().splitlines()[-1]
    st = podman.podman("start", "--attach", name, timeout=60)
    assert st.returncode == 0, st.stderr
    # podman 5 says "stopped" until conmon's clean-up command has run, then "exited"
    state = "{{.State.Status}} {{.State.ExitCode}}"
    harness.wait_for(lambda: podman.inspect(name, state) == "exited 0", 10.0, 0.2)
    assert podman.inspect(name, state) == "exited 0"
    assert podman.podman("rm", name).returncode == 0
    _assert_clean(podman, cid, runtime)


def test_detached_exec_pause_stop_rm(
    podman: Podman, runtime: Runtime, test_image: OCIImage
) -> None:
    pm = podman
    name = pm.new_name("detached")
    cp = pm.podman(
        "run", "-d", "--name", name, test_image.ref, "sh", "-c", LOOP, runtime=runtime, timeout=60
    )
    assert cp.returncode == 0, cp.stderr
    cid = cp.stdout.strip().splitlines()[-1]
    assert pm.inspect(name, "{{.State.Status}}") == "running"
    assert pm.inspect(name, "{{.OCIRuntime}}") in (str(runtime.client_path), runtime.name)
    pid = int(pm.inspect(name, "{{.State.Pid}}"))
    cg = pm.cgroup_path(cid)
    assert all(p.rstrip("/").endswith(cg) for p in harness.process_cgroups(pid)), (
        harness.process_cgroups(pid)
    )

    ex = pm.podman(
        "exec", name, "sh", "-c", f"echo exec-out; {harness.PROBE_SH}; exit 3", timeout=60
    )
    assert ex.returncode == 3, ex.stderr
    assert ex.stdout.splitlines()[0] == "exec-out"
    assert not harness.probe_problems(runtime, ex.stdout), ex.stdout

    assert pm.podman("pause", name).returncode == 0
    assert pm.inspect(name, "{{.State.Status}}") == "paused"
    assert harness.cgroup_frozen(cg) is True
    assert pm.podman("unpause", name).returncode == 0
    assert pm.inspect(name, "{{.State.Status}}") == "running"
    assert harness.cgroup_frozen(cg) is False

    st = pm.podman("stop", "--time", "10", name, timeout=60)
    assert st.returncode == 0, st.stderr
    assert pm.inspect(name, "{{.State.Status}} {{.State.ExitCode}}") == "exited 0"
    rm = pm.podman("rm", name, timeout=60)
    assert rm.returncode == 0, rm.stderr
    _assert_clean(pm, cid, runtime)
