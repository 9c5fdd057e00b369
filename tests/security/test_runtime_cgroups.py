"""Cgroups hostjob did not make, and `unified` core files.

A job container owns its cgroup: teardown kills everything in it and removes it. So
a ``linux.cgroupsPath`` naming a cgroup that exists already (made by someone else,
empty or not) is refused in every hierarchy, before anything is made or written, and
that cgroup is never adopted, written, killed or removed — also when it appears
between the check and hostjob's mkdir. ``linux.resources.unified`` takes controller
files only: ``{"cgroup.procs": PID}`` would pull any process into the job.

Real cgroup v1 (this host: hybrid) here; v2 against the fake cgroupfs tree of
``tests/unit/cgroups`` (as also in ``tests/unit/cgroups/test_cgroups_v2_fake.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob import cgroups
from hostjob.cgroups import driver
from hostjob.cgroups.driver import open_manager
from hostjob.errors import CgroupExists, ConfigError
from hostjob.runtime.container import Container
from hostjob.spec.resources import Resources
from tests.helpers import CGROUP_V2, Hostjob, base_config, new_id, proc_cgroup
from tests.unit.cgroups.fakefs import FakeCgroup2

# Files of a cgroup hostjob would write when adopting it (and their values now): v1's,
# then v2's.
WATCHED = (
    *("pids.max", "memory.limit_in_bytes", "cpu.shares", "cgroup.procs", "tasks"),
    *("memory.max", "cpu.weight", "cgroup.subtree_control"),
)


def _hierarchy_dirs(path: str) -> list[str]:
    """The cgroup ``path`` in every hierarchy hostjob uses (v1 ones, named ones, the
    hybrid cgroup2)."""
    mounts = cgroups.detect()
    tops = [h.mountpoint for h in mounts.hierarchies]
    if mounts.unified is not None:
        tops.append(mounts.unified.mountpoint)
    return [top.rstrip("/") + path for top in tops]


class Foreign:
    """A cgroup someone else made, in every hierarchy, with a sub-cgroup ``inner``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dirs = _hierarchy_dirs(path)
        self.procs: list[subprocess.Popen[bytes]] = []
        for d in self.dirs:
            for new in (d, os.path.join(d, "inner")):
                os.mkdir(new)
                v1 = not os.path.exists(os.path.join(new, "cgroup.controllers"))
                if v1 and os.path.exists(os.path.join(new, "cpuset.cpus")):
                    # A v1 cpuset cgroup takes no process until it has CPUs and nodes
                    # (a v2 one takes its parent's).
                    for name in ("cpuset.cpus", "cpuset.mems"):
                        value = Path(os.path.dirname(new), name).read_text()
                        Path(new, name).write_text(value)

    def add_process(self) -> subprocess.Popen[bytes]:
        victim = subprocess.Popen(["sleep", "300"])
        self.procs.append(victim)
        for d in self.dirs:
            with open(os.path.join(d, "inner", "cgroup.procs"), "w") as f:
                f.write(str(victim.pid))
        return victim

    def state(self) -> dict[str, str | bool]:
        out: dict[str, str | bool] = {}
        for d in self.dirs:
            out[d] = os.path.isdir(d)
            out[d + "/inner"] = os.path.isdir(os.path.join(d, "inner"))
            for name in WATCHED:
                try:
                    with open(os.path.join(d, name)) as f:
                        out[f"{d}/{name}"] = f.read()
                except OSError:
                    pass
        return out

    def remove(self) -> None:
        for victim in self.procs:
            victim.kill()
            victim.wait()
        for d in self.dirs:
            for sub in (os.path.join(d, "inner"), d):
                try:
                    os.rmdir(sub)
                except FileNotFoundError:
                    pass


@pytest.fixture
def foreign() -> Iterator[Foreign]:
    made = Foreign(f"/{new_id('foreign')}")
    try:
        yield made
    finally:
        made.remove()


def test_adopting_a_foreign_cgroup_kills_its_processes(foreign: Foreign) -> None:
    """The attack, first: what hostjob did with an existing cgroup (create() adopted
    it; a later delete or failed create destroyed it) writes limits into someone
    else's cgroup, kills its processes and removes it."""
    victim = foreign.add_process()
    manager = open_manager(foreign.path)
    manager.create(Resources.decode({"pids": {"limit": 5}}))  # adopted: no error
    pids_dir = foreign.dirs[0] if CGROUP_V2 else next(d for d in foreign.dirs if "/pids/" in d)
    assert Path(pids_dir, "pids.max").read_text().strip() == "5"
    manager.destroy()
    assert victim.wait(timeout=10) == -9
    assert not any(os.path.isdir(d) for d in foreign.dirs)
    foreign.procs.clear()


def _bundle_with_path(bundle, path: str, name: str = "bundle"):  # type: ignore[no-untyped-def]
    config = base_config("sleep", "300")
    config["linux"] = {"cgroupsPath": path, "resources": {"pids": {"limit": 50}}}
    return bundle(config, name=name)


def test_a_foreign_empty_cgroup_is_refused_and_survives(
    hj: Hostjob, bundle, foreign: Foreign
) -> None:
    before = foreign.state()
    b = _bundle_with_path(bundle, foreign.path)
    cid = new_id("sec")
    for verb in (["create", "--bundle", str(b), cid], ["run", "--bundle", str(b), cid]):
        err = hj.fail(*verb)
        assert f"cgroup {foreign.path} already exists" in err, err
        assert "was not created by hostjob for this container" in err
        assert foreign.state() == before, f"{verb[0]} touched the foreign cgroup"
        assert not (hj.root / cid).exists()
    # A process that joins it later is no business of hostjob's: nothing refers to it.
    victim = foreign.add_process()
    err = hj.fail("create", "--bundle", str(b), cid)
    assert f"cgroup {foreign.path} already holds processes ({victim.pid})" in err, err
    hj.ok("delete", "--force", cid)
    assert hj("kill", "--all", cid, "KILL").returncode == 1
    assert victim.poll() is None
    assert all(os.path.isdir(os.path.join(d, "inner")) for d in foreign.dirs)


def test_a_cgroup_made_between_the_check_and_the_mkdir_is_not_adopted(
    hj: Hostjob, bundle, foreign: Foreign, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second line: the cgroup appears after the existence check (here: the check
    is skipped). The mkdir finds it, the create fails with CgroupExists, and the
    clean-up of the failed create neither kills its process nor removes it."""
    victim = foreign.add_process()
    monkeypatch.setattr(driver, "refuse_existing", lambda path, manager: None)
    b = _bundle_with_path(bundle, foreign.path)
    cid = new_id("sec")
    with pytest.raises(CgroupExists, match=r"already exists"):
        Container.create(cid, str(b), root=str(hj.root))
    assert victim.poll() is None
    assert all(os.path.isdir(os.path.join(d, "inner")) for d in foreign.dirs)
    assert not (hj.root / cid).exists()


def test_a_crash_after_the_mkdir_is_still_cleaned_up(hj: Hostjob, bundle) -> None:
    """Our own cgroup stays ours across a crash: `delete --force` after a create killed
    right after making the cgroup removes it (the record says hostjob made it)."""
    path = f"/hostjob/{new_id('sec')}"
    b = _bundle_with_path(bundle, path)
    cid = new_id("sec")
    result = hj("create", "--bundle", str(b), cid, env={"HOSTJOB_CRASH_AT": "create:after-cgroup"})
    assert result.returncode != 0
    assert any(os.path.isdir(d) for d in _hierarchy_dirs(path))
    state = json.loads((hj.root / cid / "state.json").read_text())
    assert state["cgroup"] == path
    hj.ok("delete", "--force", cid)
    assert not any(os.path.isdir(d) for d in _hierarchy_dirs(path))


# --- unified: controller files only ---------------------------------------------------------


@pytest.mark.parametrize("key", ["cgroup.procs", "cgroup.subtree_control", "cgroup.kill"])
def test_unified_core_files_are_refused_on_create_and_update(
    hj: Hostjob, bundle, tmp_path: Path, key: str
) -> None:
    victim = subprocess.Popen(["sleep", "300"])
    try:
        where = proc_cgroup(victim.pid)
        config = base_config("sleep", "300")
        config["linux"] = {"resources": {"unified": {key: str(victim.pid)}}}
        err = hj.fail("create", "--bundle", str(bundle(config)), new_id("sec"))
        assert f"'{key}' is a cgroup core file, not a controller setting" in err, err
        cid = new_id("sec")
        hj.ok("create", "--bundle", str(bundle(base_config("sleep", "300"), "b2")), cid)
        resources = tmp_path / "resources.json"
        resources.write_text(json.dumps({"unified": {key: str(victim.pid)}}))
        err = hj.fail("update", "--resources", str(resources), cid)
        assert f"'{key}' is a cgroup core file, not a controller setting" in err, err
        assert proc_cgroup(victim.pid) == where
        assert victim.poll() is None
        hj.ok("delete", "--force", cid)
    finally:
        victim.kill()
        victim.wait()


@pytest.fixture
def fake_v2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeCgroup2:
    fake = FakeCgroup2(tmp_path / "cgroup2")
    fake.install(monkeypatch)
    return fake


def test_unified_cgroup_procs_on_v2(fake_v2: FakeCgroup2) -> None:
    """cgroup v2 (fake tree): writing the unified keys verbatim, as hostjob did, pulls
    a stranger into the job; now create and update refuse before writing anything."""
    victim = subprocess.Popen(["sleep", "300"])
    try:
        fake_v2.move_pid(fake_v2.root, fake_v2.root, victim.pid)
        manager = open_manager("/hostjob/j1", root=fake_v2.root)
        manager.create()
        from hostjob.cgroups import _fs

        leaf = _fs.Dir(fake_v2.path("/hostjob/j1"))
        leaf.write("cgroup.procs", str(victim.pid))  # the old `unified` loop did this
        leaf.close()
        assert victim.pid in manager.pids()
        fake_v2.move_pid(fake_v2.root, fake_v2.root, victim.pid)

        attack = Resources.decode({"unified": {"cgroup.procs": str(victim.pid)}})
        other = open_manager("/hostjob/j2", root=fake_v2.root)
        with pytest.raises(ConfigError, match="cgroup core file"):
            other.create(attack, exclusive=True)
        with pytest.raises(ConfigError, match="cgroup core file"):
            manager.update(attack)
        assert manager.pids() == [] and not os.path.exists(fake_v2.path("/hostjob/j2"))
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
