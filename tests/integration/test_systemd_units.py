"""hostjob under systemd units, for real (the VM lane: systemd 252 as PID 1, cgroup v2):

* a job run by a service that delegates its cgroup lives inside the unit's cgroup, so
  ``journalctl -u UNIT`` files its output under the unit and ``systemctl status UNIT``
  lists its processes (journald files each line under the writer's cgroup);
* ``generate systemd``'s unit started, stopped within its timeout, restarted per
  ``Restart=``, and reloaded after a change, by systemd itself.

Each needs systemd as PID 1 on cgroup v2; the VM lane sets HOSTJOB_REQUIRE_SYSTEMD=1, so
that there one fails instead of being skipped."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob.cgroups import systemd
from hostjob.images.pack import pack
from tests.helpers import BUSYBOX, Hostjob, alive, base_config, cgroup_dirs, new_id, wait_for

DRIVER = systemd.booted() and os.path.isfile("/sys/fs/cgroup/cgroup.controllers")
pytestmark = pytest.mark.skipif(
    not DRIVER and os.environ.get("HOSTJOB_REQUIRE_SYSTEMD") != "1",
    reason="needs systemd as PID 1 on cgroup v2 (the VM lane)",
)
UNITS = Path("/run/systemd/system")  # transient by design: gone at reboot


def run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


def journal(unit: str) -> list[dict[str, str]]:
    out = run("journalctl", "-u", unit, "-o", "json", "--no-pager").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def unit_pids(unit: str) -> set[int]:
    out = run("systemctl", "show", unit, "-p", "ControlGroup").stdout.strip()
    group = out.partition("=")[2]
    found: set[int] = set()
    for folder, _dirs, files in os.walk(f"/sys/fs/cgroup{group}"):
        if "cgroup.procs" in files:
            found.update(int(p) for p in Path(folder, "cgroup.procs").read_text().split())
    return found


@pytest.fixture
def service() -> Iterator[list[str]]:
    """Names of the units a test started: stopped and reset afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        run("systemctl", "stop", name)
        run("systemctl", "reset-failed", name)
        unit_file = UNITS / name
        if unit_file.exists():
            unit_file.unlink()
    if names:
        run("systemctl", "daemon-reload")


def test_a_job_run_by_a_delegating_service_is_inside_it(hj: Hostjob, bundle, service) -> None:
    cid = new_id()
    unit = f"hjsvc-{cid}.service"
    service.append(unit)
    b = bundle(base_config("sh", "-c", f"echo hello-from-{cid}; sleep 300"))
    started = run(
        "systemd-run", f"--unit={unit}", "-p", "Delegate=yes", "--",
        *hj.argv("run", "--bundle", str(b), cid),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert wait_for(lambda: hj("state", cid).returncode == 0 and hj.status(cid) == "running", 30)
    pid = hj.state(cid)["pid"]
    cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    assert cgroup == f"0::/system.slice/{unit}/{cid}\n"
    assert pid in unit_pids(unit)  # systemctl status lists it
    status = run("systemctl", "status", unit, "--no-pager", "-l")
    assert str(pid) in status.stdout
    assert wait_for(
        lambda: any(f"hello-from-{cid}" in e.get("MESSAGE", "") for e in journal(unit)), 20
    )
    line = next(e for e in journal(unit) if f"hello-from-{cid}" in e.get("MESSAGE", ""))
    assert line["_SYSTEMD_UNIT"] == unit
    stopped = time.monotonic()
    assert run("systemctl", "stop", unit).returncode == 0
    assert time.monotonic() - stopped < 30
    assert wait_for(lambda: not alive(pid), 10)
    assert hj("state", cid).returncode != 0  # run deleted it
    assert not Path(f"/sys/fs/cgroup/system.slice/{unit}").exists()
    assert cgroup_dirs(f"/hostjob/{cid}") == []


def test_an_undelegated_service_keeps_the_job_outside_and_says_so(
    hj: Hostjob, bundle, service, tmp_path: Path
) -> None:
    cid = new_id()
    unit = f"hjsvc-{cid}.service"
    service.append(unit)
    b = bundle(base_config("sleep", "300"))
    started = run("systemd-run", f"--unit={unit}", "--", *hj.argv("run", "--bundle", str(b), cid))
    assert started.returncode == 0, started.stderr
    assert wait_for(lambda: hj("state", cid).returncode == 0 and hj.status(cid) == "running", 30)
    pid = hj.state(cid)["pid"]
    assert Path(f"/proc/{pid}/cgroup").read_text() == f"0::/hostjob/{cid}\n"
    assert hj.log is not None and "does not delegate its cgroup" in hj.log.read_text()
    run("systemctl", "stop", unit)
    assert wait_for(lambda: not alive(pid), 20)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    src = tmp_path_factory.mktemp("unit-src")
    (src / "bin").mkdir()
    (src / "bin" / "busybox").write_bytes(Path(BUSYBOX).read_bytes())
    (src / "bin" / "busybox").chmod(0o755)
    for applet in ("sh", "echo", "sleep", "cat", "true", "false"):
        (src / "bin" / applet).symlink_to("busybox")
    layout = tmp_path_factory.mktemp("unit-layout")
    pack(str(src), f"oci:{layout}:v1", entrypoint=["/bin/sh", "-c"], env=["PATH=/bin"])
    return f"oci:{layout}:v1"


def test_generate_systemd_runs_under_systemd(
    hj: Hostjob, image: str, service, tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    name = new_id("u")
    script = f"echo started-{name}; sleep 300"
    hj.ok("run", "-d", "--name", name, "--store", store, "--stop-timeout", "3", image, script)
    unit_text = hj.ok("generate", "systemd", name)
    hj.ok("stop", name)
    hj.ok("delete", "--force", name)
    unit = f"hostjob-{name}.service"
    service.append(unit)
    (UNITS / unit).write_text(unit_text)
    assert run("systemctl", "daemon-reload").returncode == 0
    assert run("systemctl", "start", unit).returncode == 0
    assert wait_for(lambda: hj("state", name).returncode == 0 and hj.status(name) == "running", 60)
    pid = hj.state(name)["pid"]
    assert pid in unit_pids(unit)
    assert wait_for(
        lambda: any(f"started-{name}" in e.get("MESSAGE", "") for e in journal(unit)), 20
    )
    # stopped within its timeout (stop -t 3, then SIGKILL to the job)
    began = time.monotonic()
    assert run("systemctl", "stop", unit).returncode == 0
    assert time.monotonic() - began < 3 + 15 + 5
    assert wait_for(lambda: not alive(pid), 10)
    assert hj("state", name).returncode != 0
    # a changed unit, reloaded: systemd runs the new one
    changed = unit_text.replace(
        f"Description=hostjob container {name}", f"Description=changed {name}"
    )
    assert changed != unit_text
    (UNITS / unit).write_text(changed)
    assert run("systemctl", "daemon-reload").returncode == 0
    shown = run("systemctl", "show", unit, "-p", "Description").stdout.strip()
    assert shown.startswith(f"Description=changed {name}"), shown


def test_a_generated_unit_restarts_a_failing_program(
    hj: Hostjob, image: str, service, tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    name = new_id("f")
    marker = tmp_path / "runs"
    marker.write_text("")
    script = f"echo x >> {marker}; sleep 1; false"
    hj.ok("run", "-d", "--name", name, "--store", store, "--restart", "on-failure:2", image, script)
    unit_text = hj.ok("generate", "systemd", name)
    hj.ok("stop", name)
    hj.ok("delete", "--force", name)
    assert "Restart=on-failure" in unit_text and "StartLimitBurst=3" in unit_text
    unit = f"hostjob-{name}.service"
    service.append(unit)
    (UNITS / unit).write_text(unit_text)
    assert run("systemctl", "daemon-reload").returncode == 0
    run("systemctl", "start", unit)
    # on-failure:2 -- the first run and two restarts, then systemd gives up
    assert wait_for(lambda: len(marker.read_text().splitlines()) >= 3, 60)
    assert wait_for(lambda: run("systemctl", "is-failed", unit).stdout.strip() == "failed", 60)
    time.sleep(2)
    assert len(marker.read_text().splitlines()) == 3
    assert hj("state", name).returncode != 0  # ExecStopPost deleted what was left
