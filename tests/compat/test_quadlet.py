"""Quadlet: a ``.container`` unit runs an image through podman, with each runtime.

podman 4.4 and later ship Quadlet, a systemd generator that turns
``/etc/containers/systemd/NAME.container`` into ``NAME.service`` at ``systemctl
daemon-reload``: the service runs ``podman run --cgroups=split --sdnotify=conmon --replace
--rm ...``, so the container's processes are in the service's own cgroup, and stopping
the unit removes the container. The unit is the operators' guide's ``quadlet`` snippet, which names the
runtime in ``GlobalArgs=``; the suite adds its private podman storage there (its
``containers.conf`` through the service's ``Environment=``).

Checked for each runtime (runc is the sanity check): the unit starts and is active; the
container's process is in the service's cgroup (``systemctl show -p ControlGroup``), is a
job container for hostjob (the sandbox mount point, the host's namespaces) and not for
runc; its output is the container's (``podman logs``); ``systemctl stop`` ends it, podman forgets the
container and nothing of it is left; the unit is gone once its file is.

Needs systemd as PID 1 on cgroup v2 and a podman with Quadlet (the VM lane's Debian 13 and
unstable guests): skipped with the reason elsewhere, failed where
``HOSTJOB_REQUIRE_QUADLET=1``.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.helpers import wait_for

from . import harness
from .conftest import SYSTEMD_V2
from .image import OCIImage
from .test_operator_docs import DOC_BINARY, snippet

if TYPE_CHECKING:
    from collections.abc import Iterator

QUADLET_DIR = Path("/etc/containers/systemd")
GENERATOR = Path("/usr/lib/systemd/system-generators/podman-system-generator")


def quadlet_problem() -> str | None:
    if not SYSTEMD_V2:
        return "Quadlet needs systemd as PID 1 on cgroup v2"
    if harness.podman_version() < (4, 4) or not GENERATOR.exists():
        major, minor = harness.podman_version()
        return f"podman {major}.{minor} has no Quadlet (4.4 and later)"
    return None


@pytest.fixture(scope="module")
def quadlet_podman(
    tmp_path_factory: pytest.TempPathFactory, compat_workdir: Path, test_image: OCIImage
) -> Iterator[harness.Podman]:
    problem = quadlet_problem()
    if problem:
        if os.environ.get("HOSTJOB_REQUIRE_QUADLET") == "1":
            pytest.fail(f"HOSTJOB_REQUIRE_QUADLET=1 but {problem}", pytrace=False)
        pytest.skip(problem)
    runtimes = [harness.make_runtime(n, compat_workdir) for n in harness.selected_runtime_names()]
    pm = harness.Podman(tmp_path_factory.mktemp("quadlet"), runtimes, "systemd")
    try:
        pm.setup()
        pm.load_image(test_image.archive, test_image.ref)
    except harness.HarnessError as e:
        pm.teardown()
        pytest.fail(str(e), pytrace=False)
    yield pm
    problems = pm.teardown()
    if problems:
        pytest.fail("podman teardown found leftovers:\n" + "\n".join(problems), pytrace=False)


def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return harness.run(["systemctl", *args], timeout=120)


def unit_file(pm: harness.Podman, runtime: harness.Runtime, name: str, image: str) -> str:
    """The operators' guide's ``quadlet`` unit, with this run's runtime, the suite's image,
    a probe for its command, the suite's podman storage and no ``[Install]`` (started, not
    enabled)."""
    text = snippet("quadlet")
    assert f"GlobalArgs=--runtime {DOC_BINARY}" in text, "the guide's unit names no runtime"
    text = text.replace(DOC_BINARY, str(runtime.client_path)).split("[Install]")[0]
    storage = " ".join(pm.base_args()[1:])  # podman's flags, without "podman"
    # systemd expands $NAME and ${NAME} in the command line it is given: $$ is a dollar
    script = (
        f'echo quadlet-ready; {harness.PROBE_SH}; trap "exit 0" TERM; while :; do sleep 1; done'
    )
    text = re.sub(r"^Image=.*$", f"Image={image}\nContainerName={name}", text, flags=re.M)
    text = re.sub(r"^Exec=.*$", f"Exec=sh -c '{script.replace('$', '$$')}'", text, flags=re.M)
    text = re.sub(r"^(GlobalArgs=.*)$", rf"\1 {storage}", text, flags=re.M)
    env = " ".join(f"{k}={pm.env[k]}" for k in ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF",
                                                "CONTAINERS_REGISTRIES_CONF", "HOME", "TMPDIR"))  # fmt: skip
    return f"{text.rstrip()}\n\n[Service]\nEnvironment={env}\nTimeoutStartSec=300\n"


def test_a_container_unit_runs_with_the_runtime(
    quadlet_podman: harness.Podman, runtime: harness.Runtime, test_image: OCIImage
) -> None:
    pm = quadlet_podman
    name = f"hjq-{runtime.name}-{uuid.uuid4().hex[:8]}"
    service = f"{name}.service"
    source = QUADLET_DIR / f"{name}.container"
    QUADLET_DIR.mkdir(parents=True, exist_ok=True)
    source.write_text(unit_file(pm, runtime, name, test_image.ref))
    try:
        assert systemctl("daemon-reload").returncode == 0
        loaded = systemctl("show", "-p", "LoadState", "--value", service).stdout.strip()
        assert loaded == "loaded", f"Quadlet made no {service}: {loaded}"
        started = systemctl("start", service)
        assert started.returncode == 0, started.stderr + journal(service)
        assert systemctl("is-active", service).stdout.strip() == "active"
        cid = pm.inspect(name, "{{.Id}}")
        pid = int(pm.inspect(name, "{{.State.Pid}}"))
        group = systemctl("show", "-p", "ControlGroup", "--value", service).stdout.strip()
        cgroups = harness.process_cgroups(pid)
        assert all(c.startswith(f"{group}/") for c in cgroups), (group, cgroups)
        logs = lambda: pm.podman("logs", name).stdout  # noqa: E731 - the container's output
        assert wait_for(lambda: "quadlet-ready" in logs(), 30, 0.5), logs() + journal(service)
        assert not harness.probe_problems(runtime, logs()), logs()
        stopped = systemctl("stop", service)
        assert stopped.returncode == 0, stopped.stderr
        assert wait_for(lambda: not pm.leftovers(cid, runtime), 30, 0.5), pm.leftovers(cid, runtime)
        assert pm.podman("container", "exists", name).returncode == 1
    finally:
        systemctl("stop", service)
        source.unlink(missing_ok=True)
        systemctl("daemon-reload")
        systemctl("reset-failed", service)
    assert systemctl("show", "-p", "LoadState", "--value", service).stdout.strip() == "not-found"


def journal(unit: str) -> str:
    harness.run(["journalctl", "--sync"], timeout=30)
    return harness.run(
        ["journalctl", "-q", "-o", "cat", "-u", unit, "--no-pager"], timeout=30
    ).stdout
