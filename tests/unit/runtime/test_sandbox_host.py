"""Host mode's plan and its undo, on a tmp tree, without root: ``plan_host`` works out the
volume links (and what each one's undo entries are) without changing anything,
``prepare_host`` makes them from the plan, and the undo log replayed newest first
(``sandbox.undo.undo``) leaves the tree as it was. Mounts need root: the read-only
rootfs and a mount point of its own are tested in tests/integration/test_host_mode.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hostjob.config import to_job_config
from hostjob.errors import MountError
from hostjob.job import JobConfig
from hostjob.runtime.sandbox.host import plan_host, prepare_host
from hostjob.runtime.sandbox.undo import REMOVE, REMOVE_TREE, RESTORE_DIR, UNMOUNT, undo
from hostjob.spec import runtime as wire
from tests.helpers import base_config


def tree(path: Path) -> dict[str, str]:
    """Everything under ``path``: relative name -> kind (and a link's target)."""
    found = {}
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            full = Path(folder, name)
            rel = str(full.relative_to(path))
            if full.is_symlink():
                found[rel] = "link " + os.readlink(full)
            elif full.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = "file " + full.read_text()
    return found


def job(bundle: Path, mounts: list[dict[str, Any]], **root: Any) -> JobConfig:
    config = base_config(mounts=mounts)
    config["root"] = {"path": "rootfs", **root}
    return to_job_config(wire.Spec.decode(config), str(bundle), "c1")


def volume(source: Path, destination: str) -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": str(source), "options": ["rbind"]}


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    (tmp_path / "rootfs" / "etc").mkdir(parents=True)
    (tmp_path / "rootfs" / "etc" / "motd").write_text("image")
    (tmp_path / "rootfs" / "data").mkdir()  # empty: a volume may take its place
    (tmp_path / "rootfs" / "full").mkdir()
    (tmp_path / "rootfs" / "full" / "x").write_text("kept")
    (tmp_path / "src").mkdir()
    return tmp_path


def test_the_plan_changes_nothing_and_undoes_in_order(bundle: Path) -> None:
    rootfs = bundle / "rootfs"
    before = tree(rootfs)
    plan = plan_host(
        job(bundle, [volume(bundle / "src", "/data"), volume(bundle / "src", "/var/lib/new/v")])
    )
    assert plan is not None
    assert tree(rootfs) == before  # planning makes nothing
    real = os.path.realpath(rootfs)
    assert plan.undo == [
        [RESTORE_DIR, f"{real}/data"],
        [REMOVE, f"{real}/data"],
        [REMOVE, f"{real}/var"],
        [REMOVE, f"{real}/var/lib"],
        [REMOVE, f"{real}/var/lib/new"],
        [REMOVE, f"{real}/var/lib/new/v"],
    ]
    assert [link.replaces_dir for link in plan.links] == [True, False]
    calls: list[tuple[list[str], ...]] = []
    prepare_host(job(bundle, []), lambda *entries: calls.append(entries), plan)
    assert calls == [tuple(plan.undo)]  # recorded in one call, before anything is made
    after = tree(rootfs)
    assert after["data"] == f"link {bundle / 'src'}"
    assert after["var/lib/new/v"] == f"link {bundle / 'src'}"
    undo(plan.undo)
    assert tree(rootfs) == before  # the image's empty directory is back, the rest gone


def test_a_link_that_is_there_already_is_not_made_again(bundle: Path) -> None:
    os.symlink(bundle / "src", bundle / "rootfs" / "already")
    plan = plan_host(job(bundle, [volume(bundle / "src", "/already")]))
    assert plan is not None and plan.links == [] and plan.undo == []


@pytest.mark.parametrize(
    ("make", "destination", "message"),
    [
        (None, "/full", "already exists in the rootfs"),
        (None, "/etc/motd", "already exists in the rootfs"),
        ("link-elsewhere", "/elsewhere", "already a link elsewhere"),
        ("link-out", "/out/v", "symlink leading outside it"),
    ],
)
def test_what_the_plan_refuses(
    bundle: Path, make: str | None, destination: str, message: str
) -> None:
    rootfs = bundle / "rootfs"
    if make == "link-elsewhere":
        os.symlink("/somewhere", rootfs / "elsewhere")
    if make == "link-out":
        os.symlink(str(bundle / "host"), rootfs / "out")  # an image's link out of its tree
        (bundle / "host").mkdir()
    before = tree(bundle)
    with pytest.raises(MountError, match=message):
        plan_host(job(bundle, [volume(bundle / "src", destination)]))
    assert tree(bundle) == before


def test_a_rootfs_with_nothing_to_do_has_an_empty_plan(bundle: Path) -> None:
    plan = plan_host(job(bundle, []))
    assert plan is not None and plan.links == [] and plan.undo == []
    assert plan.self_bind is None


def test_undo_steps_never_follow_a_symlink_swapped_in(bundle: Path, tmp_path: Path) -> None:
    """A container replaced a directory on an undo entry's path by a symlink to a host
    directory: the entry below it is left alone (a warning), the host directory is
    untouched, and the link itself -- the entry of the directory it replaced -- is
    removed as a link (never what it points at)."""
    rootfs = bundle / "rootfs"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "made").mkdir()
    real = os.path.realpath(rootfs)
    entries = [[REMOVE, f"{real}/dir"], [REMOVE, f"{real}/dir/made"]]
    os.symlink(victim, rootfs / "dir")  # where the runtime had made dir/made
    undo(entries)
    assert (victim / "made").is_dir()
    assert not os.path.lexists(rootfs / "dir")


def test_undo_of_each_kind_on_a_tree(tmp_path: Path) -> None:
    base = Path(os.path.realpath(tmp_path))
    (base / "tree" / "deep").mkdir(parents=True)
    (base / "tree" / "deep" / "f").write_text("x")
    (base / "empty").mkdir()
    (base / "busy").mkdir()
    (base / "busy" / "someone-elses").write_text("x")
    (base / "file").write_text("x")
    undo(
        [
            [RESTORE_DIR, str(base / "restored")],
            [REMOVE_TREE, str(base / "tree")],
            [REMOVE, str(base / "empty")],
            [REMOVE, str(base / "busy")],  # not empty: someone else's files stay
            [REMOVE, str(base / "file")],
            [REMOVE, str(base / "never-made")],  # a crash before the change: nothing
            [UNMOUNT, str(base / "restored")],  # no mount there: nothing to take off
        ]
    )
    assert sorted(os.listdir(base)) == ["busy", "restored"]
    assert (base / "busy" / "someone-elses").exists()
    assert (base / "restored").is_dir()
