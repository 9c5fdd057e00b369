from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `tests.helpers`

from tests.fuzz.targets import SANDBOX_DIR_VARIABLE
from tests.helpers import (
    KEPT_IN_ROOT,
    Hostjob,
    cgroup_dirs,
    fingerprint_changes,
    host_fingerprint,
    hostjob_temp_entries,
    make_bundle,
    mounts_under,
)

# A loaded 2-core CI machine must not turn slow input generation into failures.
settings.register_profile("hostjob", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hostjob")

# A suite started in the background by a shell without job control (`nohup cmd &`, a CI
# runner's script) inherits SIGINT ignored, and so would every process a test starts: the
# tests that stop one with SIGINT, as Ctrl-C does (a live `stats`, the racers), hang.
# Caught here, it is back at its default in every program the tests exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long", action="store_true", default=False, help="run the full-size reliability loops"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "root: needs root and the real kernel")


KERNEL_DIRS = ("integration", "compat", "security", "cri")
"""The test directories that run as root against the real kernel (and so could change the
machine they run on)."""


def _on_the_kernel(item: pytest.Item) -> bool:
    return any(part in item.path.parts for part in KERNEL_DIRS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs_root = [i for i in items if _on_the_kernel(i)]
    if needs_root and os.geteuid() != 0:
        raise pytest.UsageError(
            "integration, compat, security and cri tests run as root (they use the kernel)"
        )


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every session, unit tests too, removes the scratch it made in the system's temp dir
    (``hostjob-*``). The fuzz targets' sandbox lives in the session's own temp dir (pytest
    keeps the last few: a killed session leaves nothing in /tmp) and goes at its end, not
    at the interpreter's exit."""
    os.environ[SANDBOX_DIR_VARIABLE] = str(tmp_path_factory.mktemp("fuzz"))
    before = set(hostjob_temp_entries())
    yield
    for module, close in (
        ("tests.fuzz.targets", "close_sandbox"),
        ("tests.fuzz.cli", "close_cli_sandbox"),
    ):
        if module in sys.modules:
            getattr(sys.modules[module], close)()
    left = sorted(set(hostjob_temp_entries()) - before)
    if left:
        pytest.fail(f"the test session left scratch in the temp dir: {left}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _host_unchanged(request: pytest.FixtureRequest) -> Iterator[None]:
    """The machine the suite runs on is the same afterwards: hostname, ``/`` and ``/tmp``,
    links, ``/etc/hosts``, ``/etc/resolv.conf``, the mount table outside the tests' own
    directories (``helpers.host_fingerprint``). Compared once the session's tests are done, so
    that what a running test legitimately has mounted is no change; a difference fails the
    run (an error at the teardown of its last test)."""
    if not any(_on_the_kernel(i) for i in request.session.items):
        yield
        return
    before = host_fingerprint()
    yield
    changes = fingerprint_changes(before, host_fingerprint())
    if changes:
        pytest.fail(
            "the test session changed the machine it ran on:\n  " + "\n  ".join(changes),
            pytrace=False,
        )


@pytest.fixture
def hj(tmp_path: Path) -> Iterator[Hostjob]:
    """hostjob on a private state root; afterwards, nothing may be left behind: no
    container in the root, and no default job cgroup of any container it saw."""
    runner = Hostjob(tmp_path / "state", log=tmp_path / "hostjob.log")
    yield runner
    leftovers = []
    root = runner.root
    if root.exists():
        for container_id in sorted(os.listdir(root)):
            if container_id in KEPT_IN_ROOT:
                continue
            leftovers.append(container_id)
            runner("delete", "--force", container_id)
    assert not leftovers, f"test left containers behind: {leftovers}"
    cgroups = [d for cid in sorted(runner.seen) for d in cgroup_dirs(f"/hostjob/{cid}")]
    assert not cgroups, f"test left job cgroups behind: {cgroups}"


@pytest.fixture
def bundle(tmp_path: Path) -> Callable[..., Path]:
    """bundle(config, name="bundle") -> a bundle directory with a busybox rootfs.

    pytest's temp dirs are private (0700); bundles must be reachable by the
    unprivileged users some tests run as, so the chain is opened up to 0755.
    """
    for directory in (tmp_path, *tmp_path.parents):
        if str(directory).startswith(("/tmp/", "/var/tmp/")) and directory.is_dir():
            directory.chmod(directory.stat().st_mode | 0o755)

    def make(config: dict[str, Any], name: str = "bundle") -> Path:
        return make_bundle(tmp_path / name, config)

    return make


@pytest.fixture
def no_leaks() -> Callable[[str], None]:
    """no_leaks(container_id): no cgroup, mount or state is left for the container."""

    def check(container_id: str, mount_point: str | None = None) -> None:
        assert cgroup_dirs(f"/hostjob/{container_id}") == []
        if mount_point:
            assert mounts_under(mount_point) == []

    return check
