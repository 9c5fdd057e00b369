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

from hostjob.errors import MountError
from hostjob.runtime.sandbox.host import plan_host, prepare_host
from hostjob.runtime.sandbox.undo import (
    REMOVE,
    REMOVE_TREE,
    RESTORE_DIR,
    RESTORE_FILE,
    UNMOUNT,
    undo,
)
from hostjob.spec import runtime as wire
from hostjob.specconv.convert import to_job_config
from hostjob.specconv.jobconfig import JobConfig
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
    assert [step.replaces for step in plan.steps] == ["dir", ""]
    calls: list[tuple[list[str], ...]] = []
    prepare_host(job(bundle, []), lambda *entries: calls.append(entries), plan)
    assert calls == [tuple(plan.undo)]  # recorded in one call, before anything is made
    after = tree(rootfs)
    assert after["data"] == f"link {bundle / 'src'}"
    assert after["var/lib/new/v"] == f"link {bundle / 'src'}"
    undo(plan.undo)
    assert tree(rootfs) == before  # the image's empty directory is back, the rest gone


def test_an_empty_file_makes_way_for_a_link_and_comes_back(bundle: Path) -> None:
    """docker's init layer: empty files where /etc/resolv.conf, /etc/hosts and
    /etc/hostname go (and /.dockerenv), for the runtime to mount over. Each is replaced
    by its volume's link like an empty directory, and put back at delete with its mode."""
    rootfs = bundle / "rootfs"
    for name in ("etc/resolv.conf", "etc/hosts", "etc/hostname", ".dockerenv"):
        (rootfs / name).touch()
        os.chmod(rootfs / name, 0o755)
    files = {name: bundle / "src" / name for name in ("resolv.conf", "hosts", "hostname")}
    for path in files.values():
        path.write_text("the container's")
    before = tree(rootfs)
    mounts = [volume(path, f"/etc/{name}") for name, path in files.items()]
    plan = plan_host(job(bundle, mounts))
    assert plan is not None
    real = os.path.realpath(rootfs)
    uid, gid = os.getuid(), os.getgid()
    assert plan.undo == [
        entry
        for name in files
        for entry in (
            [RESTORE_FILE, f"{real}/etc/{name}", "755", str(uid), str(gid)],
            [REMOVE, f"{real}/etc/{name}"],
        )
    ]
    assert tree(rootfs) == before
    prepare_host(job(bundle, []), lambda *entries: None, plan)
    for name, path in files.items():
        assert (rootfs / "etc" / name).read_text() == "the container's"
        assert os.readlink(rootfs / "etc" / name) == str(path)
    undo(plan.undo)
    assert tree(rootfs) == before
    for name in files:
        st = (rootfs / "etc" / name).lstat()
        assert (oct(st.st_mode), st.st_size) == (oct(0o100755), 0)


def test_a_file_with_content_is_never_replaced(bundle: Path) -> None:
    (bundle / "rootfs" / "etc" / "hosts").write_text("the image's\n")
    with pytest.raises(MountError, match="already exists in the rootfs"):
        plan_host(job(bundle, [volume(bundle / "src", "/etc/hosts")]))


def test_restoring_a_file_never_writes_through_what_the_container_put_there(
    bundle: Path, tmp_path: Path
) -> None:
    rootfs = bundle / "rootfs"
    real = os.path.realpath(rootfs)
    victim = tmp_path / "victim"
    victim.write_text("host file")
    os.symlink(victim, rootfs / "etc" / "hosts")  # the container's, in place of the link
    undo([[RESTORE_FILE, f"{real}/etc/hosts", "644", "0", "0"]])
    assert victim.read_text() == "host file" and os.path.islink(rootfs / "etc" / "hosts")
    os.symlink(tmp_path, rootfs / "swapped")  # a directory on the way became a symlink
    undo([[RESTORE_FILE, f"{real}/swapped/made", "644", "0", "0"]])
    assert not (tmp_path / "made").exists()


def ro(source: Path, destination: str) -> dict[str, Any]:
    return {**volume(source, destination), "options": ["rbind", "ro"]}


def tmpfs(destination: str, *options: str) -> dict[str, Any]:
    return {
        "destination": destination,
        "type": "tmpfs",
        "source": "tmpfs",
        "options": list(options),
    }


def test_a_read_only_volume_or_a_tmpfs_is_a_mount_under_the_mount_point(bundle: Path) -> None:
    """A link cannot be read-only: an ro volume is its source bound read-only at the
    link's place (a tmpfs volume a tmpfs there), recorded as a mount to take off, after
    the directory made for it (undone newest first: unmounted, then removed). Mounting
    needs root: tests/integration/test_host_mode.py makes them."""
    rootfs = bundle / "rootfs"
    before = tree(rootfs)
    plan = plan_host(
        job(bundle, [ro(bundle / "src", "/data"), ro(bundle / "src", "/new/v"), tmpfs("/scratch")])
    )
    assert plan is not None and tree(rootfs) == before
    real = os.path.realpath(rootfs)
    on = str(_mount_id(real))
    assert plan.undo == [
        [UNMOUNT, f"{real}/data", on],  # the image's empty directory: covered, not removed
        [REMOVE, f"{real}/new"],
        [REMOVE, f"{real}/new/v"],
        [UNMOUNT, f"{real}/new/v", on],
        [REMOVE, f"{real}/scratch"],
        [UNMOUNT, f"{real}/scratch", on],
    ]
    assert [step.kind for step in plan.steps] == ["bind", "bind", "tmpfs"]


def _mount_id(path: str) -> int:
    from hostjob.linux import fsutil

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return fsutil.mount_id(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("mounts", "message"),
    [
        ([tmpfs("/etc/motd")], "is not a directory"),  # a tmpfs on a file
        ([tmpfs("/full", "tmpcopyup")], "tmpcopyup"),  # the image's files copied up
        ([{**ro(Path("/etc/hostname"), "/data")}], "is not a file"),
    ],
)
def test_what_a_mount_cannot_cover(
    bundle: Path, mounts: list[dict[str, Any]], message: str
) -> None:
    before = tree(bundle)
    with pytest.raises(MountError, match=message):
        plan_host(job(bundle, mounts))
    assert tree(bundle) == before


def test_a_mount_never_covers_a_symlink(bundle: Path) -> None:
    os.symlink("/etc", bundle / "rootfs" / "cfg")
    with pytest.raises(MountError, match="is a symlink"):
        plan_host(job(bundle, [ro(bundle / "src", "/cfg")]))


def test_a_link_that_is_there_already_is_not_made_again(bundle: Path) -> None:
    os.symlink(bundle / "src", bundle / "rootfs" / "already")
    plan = plan_host(job(bundle, [volume(bundle / "src", "/already")]))
    assert plan is not None and plan.steps == [] and plan.undo == []


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
    assert plan is not None and plan.steps == [] and plan.undo == []
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


def test_a_tmpfs_volumes_options_become_mount_flags_and_data() -> None:
    from hostjob.linux import syscalls
    from hostjob.runtime.sandbox.steps import tmpfs_arguments

    options = ["nosuid", "nodev", "noexec", "exec", "strictatime", "size=1m", "mode=1777",
               "inode64", "tmpcopyup"]  # fmt: skip
    flags, data = tmpfs_arguments(options, readonly=True)
    assert (
        flags
        == syscalls.MS_RDONLY | syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_STRICTATIME
    )
    assert data == "size=1m,mode=1777,inode64"  # tmpcopyup is hostjob's to do, not the kernel's
    assert tmpfs_arguments([], readonly=False) == (0, "")
