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
  (``podman.new_name(...)``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import harness
from .image import OCIImage, build_oci_image, build_rootfs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


def _fail(e: Exception) -> None:
    pytest.fail(f"{type(e).__name__}: {e}", pytrace=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "runtime" in metafunc.fixturenames:
        names = harness.selected_runtime_names()
        metafunc.parametrize("runtime", names, indirect=True, scope="session", ids=names)


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


@pytest.fixture(scope="session")
def podman_env(
    tmp_path_factory: pytest.TempPathFactory, compat_workdir: Path
) -> Iterator[harness.Podman]:
    runtimes = []
    try:
        runtimes = [
            harness.make_runtime(n, compat_workdir) for n in harness.selected_runtime_names()
        ]
    except harness.HarnessError as e:
        _fail(e)
    pm = harness.Podman(tmp_path_factory.mktemp("podman"), runtimes)
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
