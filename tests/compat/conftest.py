"""Fixtures for the real-client compat suite (root only; fails, never skips, when a client
cannot be installed or started).

Fixtures (see harness.py for the classes):

* ``runtime`` — a ``harness.Runtime``; every test that takes it runs once per runtime named in
  ``COMPAT_RUNTIMES`` (default ``runc,crun,hostjob``; ``hostjob`` takes its binary from ``HOSTJOB_BIN``,
  else the ``hostjob`` beside the test interpreter, else a wrapper running
  ``<interpreter> -m hostjob`` on ``src/``).
* ``test_image`` — ``image.OCIImage``: the busybox image as an oci-archive (session, cached).
* ``busybox_rootfs`` — a plain rootfs directory with the same content (for hand-made bundles).
* ``containerd_daemon`` — session ``harness.Containerd`` (started once; at the end stopped and
  checked: no task, no mount under its dir, no shim, no cgroup left).
* ``containerd`` — per test: the same daemon with the test image imported; the IDs a test made
  with ``containerd.new_id(...)`` are force-removed after it, and whatever force could not
  remove fails the test.
* ``podman_env`` / ``podman`` — the same pair for ``harness.Podman``
  (``podman.new_name(...)``), once with each cgroup manager: ``cgroupfs``, and ``systemd``
  where systemd runs the host on cgroup v2 (skipped with the reason elsewhere; failed where
  ``HOSTJOB_REQUIRE_SYSTEMD=1``).
* ``docker_runtime`` — a ``docker.DockerRuntime``: every test that takes it runs once per
  runtime name the private dockerd has: ``runc`` (the sanity check), ``hostjob`` (host mode)
  and ``hostjob-bind`` (bind mode, the operator's default flag), as ``COMPAT_RUNTIMES`` names
  runc and hostjob.
* ``docker_daemon`` / ``docker`` — the same pair for ``docker.Docker`` (a private dockerd;
  ``docker.new_name(...)``); after each test everything its containers made is gone (mounts
  under the daemon's dir, cgroups, runtime state, shims), and at the end of the session the
  host's ``/etc/hosts``, ``/etc/resolv.conf``, ``/etc/hostname`` and ``/dev`` are as they were.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import docker as docker_client
from . import harness
from .image import OCIImage, build_oci_image, build_rootfs

# systemd as PID 1 on the unified hierarchy: what podman's systemd cgroup manager needs.
SYSTEMD_V2 = os.path.isdir("/run/systemd/system") and os.path.isfile(
    "/sys/fs/cgroup/cgroup.controllers"
)

if TYPE_CHECKING:
    from collections.abc import Iterator


def _fail(e: Exception) -> None:
    pytest.fail(f"{type(e).__name__}: {e}", pytrace=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "runtime" in metafunc.fixturenames:
        names = harness.selected_runtime_names()
        metafunc.parametrize("runtime", names, indirect=True, scope="session", ids=names)
    if "podman_env" in metafunc.fixturenames:
        metafunc.parametrize(
            "podman_env", PODMAN_CGROUP_MANAGERS, indirect=True, scope="session",
            ids=[f"podman-{m}" for m in PODMAN_CGROUP_MANAGERS],
        )  # fmt: skip
    if "docker_runtime" in metafunc.fixturenames:
        names = docker_runtime_names()
        metafunc.parametrize("docker_runtime", names, indirect=True, scope="session", ids=names)


def docker_runtime_names() -> list[str]:
    selected = harness.selected_runtime_names()
    names = ["runc"] if "runc" in selected else []
    if "hostjob" in selected:
        names += ["hostjob", docker_client.BIND_MODE]
    return names


@pytest.fixture(scope="session")
def compat_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.fail("tests/compat needs root", pytrace=False)
    return tmp_path_factory.mktemp("compat")


@pytest.fixture(scope="session", autouse=True)
def _host_traces() -> Iterator[None]:
    """Remove the host dirs the clients create outside the temp dirs (when they were absent)."""
    traces = harness.HostTraces()
    yield
    traces.cleanup()


@pytest.fixture(scope="session")
def runtime(request: pytest.FixtureRequest, compat_workdir: Path) -> harness.Runtime:
    try:
        return harness.make_runtime(request.param, compat_workdir)
    except harness.HarnessError as e:
        _fail(e)
        raise


@pytest.fixture(scope="session")
def test_image(tmp_path_factory: pytest.TempPathFactory) -> OCIImage:
    try:
        harness.ensure_peer("image", ["busybox"])
        return build_oci_image(tmp_path_factory.mktemp("image"))
    except (harness.HarnessError, AssertionError) as e:
        _fail(e)
        raise


@pytest.fixture(scope="session")
def busybox_rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_rootfs(tmp_path_factory.mktemp("bundle") / "rootfs")


# ---- containerd -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def containerd_daemon(
    tmp_path_factory: pytest.TempPathFactory, compat_workdir: Path
) -> Iterator[harness.Containerd]:
    ctd = harness.Containerd(tmp_path_factory.mktemp("containerd"))
    try:
        ctd.start()
    except harness.HarnessError as e:
        ctd.stop()
        _fail(e)
    yield ctd
    problems = ctd.stop()
    if problems:
        pytest.fail("containerd teardown found leftovers:\n" + "\n".join(problems), pytrace=False)


@pytest.fixture
def containerd(
    containerd_daemon: harness.Containerd, test_image: OCIImage
) -> Iterator[harness.Containerd]:
    ctd = containerd_daemon
    try:
        if test_image.ref not in ctd.ctr("images", "ls", "-q", check=True).stdout.split():
            ctd.import_image(test_image.archive, test_image.ref)
    except harness.HarnessError as e:
        _fail(e)
    before = len(ctd.ids)
    yield ctd
    made = ctd.ids[before:]
    for cid in made:
        ctd.force_remove(cid)
    stuck = {cid: ctd.leftovers(cid) for cid in made}
    stuck = {k: v for k, v in stuck.items() if v}
    if stuck:
        pytest.fail(f"left behind even after forced removal: {stuck}", pytrace=False)


# ---- podman ---------------------------------------------------------------------------------


# podman's two cgroup managers: cgroupfs everywhere; systemd (a scope per container in
# machine.slice, podman's default on a systemd host) where systemd runs the host on cgroup
# v2 -- the VM lane, which fails instead of skipping (HOSTJOB_REQUIRE_SYSTEMD=1).
PODMAN_CGROUP_MANAGERS = ("cgroupfs", "systemd")


@pytest.fixture(scope="session")
def podman_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, compat_workdir: Path
) -> Iterator[harness.Podman]:
    manager = request.param
    if manager == "systemd" and not SYSTEMD_V2:
        if os.environ.get("HOSTJOB_REQUIRE_SYSTEMD") == "1":
            pytest.fail("HOSTJOB_REQUIRE_SYSTEMD=1 but systemd does not run this host on v2")
        pytest.skip("podman's systemd cgroup manager needs systemd as PID 1 on cgroup v2")
    runtimes = []
    try:
        runtimes = [
            harness.make_runtime(n, compat_workdir) for n in harness.selected_runtime_names()
        ]
    except harness.HarnessError as e:
        _fail(e)
    # podman 4.3 refuses a runroot path over 50 characters: a short name
    pm = harness.Podman(tmp_path_factory.mktemp(f"pm-{manager[:3]}"), runtimes, manager)
    try:
        pm.setup()
    except harness.HarnessError as e:
        pm.teardown()
        _fail(e)
    yield pm
    problems = pm.teardown()
    if problems:
        pytest.fail("podman teardown found leftovers:\n" + "\n".join(problems), pytrace=False)


@pytest.fixture
def podman(podman_env: harness.Podman, test_image: OCIImage) -> Iterator[harness.Podman]:
    pm = podman_env
    try:
        listed = pm.podman("images", "--format", "{{.Repository}}:{{.Tag}}", check=True)
        if test_image.ref not in listed.stdout.split():
            pm.load_image(test_image.archive, test_image.ref)
    except harness.HarnessError as e:
        _fail(e)
    before = len(pm.names)
    yield pm
    made = pm.names[before:]
    for name in made:
        if pm.podman("container", "exists", name).returncode == 0:
            pm.podman("unpause", name)
            pm.podman("rm", "--force", "--time", "0", name, timeout=60)


# ---- docker ---------------------------------------------------------------------------------

HOST_FILES = ("/etc/hosts", "/etc/resolv.conf", "/etc/hostname")


def host_snapshot() -> dict[str, object]:
    """What no container may change on the host: three files (content, mode, inode) and
    what /dev holds."""
    seen: dict[str, object] = {}
    for path in HOST_FILES:
        try:
            st = os.lstat(path)
            seen[path] = (Path(path).read_bytes(), st.st_mode, st.st_ino)
        except OSError as e:
            seen[path] = repr(e)
    seen["/dev"] = sorted(os.listdir("/dev"))
    return seen


@pytest.fixture(scope="session")
def docker_daemon(
    tmp_path_factory: pytest.TempPathFactory, compat_workdir: Path
) -> Iterator[docker_client.Docker]:
    host = host_snapshot()
    runtimes = []
    try:
        names = [n for n in harness.selected_runtime_names() if n in ("runc", "hostjob")]
        runtimes = [harness.make_runtime(n, compat_workdir) for n in names]
    except harness.HarnessError as e:
        _fail(e)
    dk = docker_client.Docker(tmp_path_factory.mktemp("docker"), runtimes)
    try:
        dk.start()
        dk.import_image()
    except harness.HarnessError as e:
        dk.stop()
        _fail(e)
    yield dk
    problems = dk.stop()
    changed = [k for k, v in host_snapshot().items() if host.get(k) != v]
    if changed:
        problems.append(f"the host's {', '.join(changed)} changed")
    if problems:
        pytest.fail("docker teardown found leftovers:\n" + "\n".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def docker_runtime(
    request: pytest.FixtureRequest, docker_daemon: docker_client.Docker
) -> docker_client.DockerRuntime:
    for r in docker_daemon.runtimes:
        if r.name == request.param:
            return r
    _fail(harness.HarnessError(f"dockerd has no runtime {request.param}"))
    raise AssertionError


@pytest.fixture
def docker(docker_daemon: docker_client.Docker) -> Iterator[docker_client.Docker]:
    """The daemon; the containers a test named with ``new_name`` are removed after it,
    and whatever any container of the test made must be gone then."""
    dk = docker_daemon
    before = dk.traces()
    made = len(dk.names)
    yield dk
    for name in dk.names[made:]:
        dk.docker("rm", "--force", name, timeout=60)
    harness.wait_for(lambda: dk.traces() == before, 10.0, 0.1)
    after = dk.traces()
    left = {k: sorted(set(v) - set(before[k])) for k, v in after.items() if v != before[k]}
    if left:
        pytest.fail(f"left behind by the test's containers: {left}", pytrace=False)
