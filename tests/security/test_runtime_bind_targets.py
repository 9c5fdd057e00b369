"""Bind mode never makes what a config names on the host's tree.

A pod's ``volumeMounts.mountPath`` is a volume's destination. Where the host lacks it,
hostjob made it on the host, as root, for the container's life and for good after a crash
or a reboot before ``delete`` (its undo record lives on tmpfs): an empty ``/etc/nologin``
blocks every non-root login, an empty ``/etc/systemd/system/kubelet.service`` overrides
the real unit at the next daemon-reload. Shown first on a canary directory standing for
``/etc``, the way create made them; then a uid-1000 pod (containerd's config of it, bind
mode being a pod's default) with those destinations and the real ones: the job sees its
volumes there, and every entry of the directories that hold them as the host's; the
host never has them -- while it runs, after ``delete``, after a create killed part-way
and its ``delete --force``. The control: a volume whose destination exists is bound where
it is, the host's file unchanged.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hostjob.runtime.sandbox.steps import make_like, make_parent
from tests.helpers import make_bundle, new_id
from tests.security.pods import Node, bind_volume, pod_config


@pytest.fixture
def etc(open_tmp: Path) -> Path:
    """A canary standing for ``/etc``: root's, 0755, holding a file of the host's."""
    path = open_tmp / "etc"
    (path / "systemd" / "system").mkdir(parents=True)
    (path / "passwd").write_text("the host's passwd\n")
    path.chmod(0o755)
    return path


def test_the_way_create_made_a_missing_target_leaves_it_on_the_host(etc: Path) -> None:
    """The attack where nothing stops it: each missing destination made on the host as
    root, empty (create's way, with the steps it used), a root-owned file that stays."""
    made: list[list[str]] = []
    for target in (etc / "nologin", etc / "systemd" / "system" / "kubelet.service"):
        parent, name = make_parent(str(target), "volume", lambda *e: made.extend(e))
        try:
            make_like("/etc/hostname", name, parent)  # a file's source: an empty file
        finally:
            os.close(parent)
        st = target.stat()
        assert stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == 0


def test_a_pods_missing_targets_exist_in_its_namespace_only(
    node: Node, open_tmp: Path, etc: Path
) -> None:
    unique = new_id("u")
    real = [Path("/etc/nologin"), Path(f"/etc/systemd/system/hostjob-{unique}.service")]
    assert not any(p.exists() for p in real), "the host has one already: nothing to show"
    deep = Path(f"/var/lib/{unique}/data")  # a new directory tree, an emptyDir's
    top = Path(f"/{unique}")  # at the top: the job's / is then the private copy
    files = open_tmp / "pod-files"
    (files / "dir").mkdir(parents=True)
    (files / "nologin").write_text("the pod's nologin\n")
    (files / "unit").write_text("[Service]\nExecStart=/tmp/payload\n")
    (files / "dir" / "f").write_text("the pod's data\n")
    volumes = [
        bind_volume(files / "nologin", str(etc / "nologin")),
        bind_volume(files / "unit", str(etc / "systemd" / "system" / "kubelet.service")),
        bind_volume(files / "nologin", str(real[0])),
        bind_volume(files / "unit", str(real[1])),
        bind_volume(files / "dir", str(deep)),
        bind_volume(files / "dir", str(top)),
        bind_volume(files / "nologin", str(etc / "passwd")),  # the control: it exists
    ]
    show = (
        f"cat /etc/nologin {etc}/nologin {deep}/f {top}/f; head -n 1 {real[1]}; ls {etc};"
        f" cat {etc}/passwd; ls -d /etc/hostname /var/lib/dpkg; sleep 60"
    )
    bundle = make_bundle(open_tmp / "pod", pod_config("sh", "-c", show, mounts=volumes))
    listed = (etc, Path("/etc"), Path("/var/lib"), Path("/"))
    before = [sorted(os.listdir(d)) for d in listed]

    def host_unchanged() -> None:
        assert not any(p.exists() for p in (*real, deep.parent, top))
        assert [sorted(os.listdir(d)) for d in listed] == before
        assert not (etc / "systemd" / "system" / "kubelet.service").exists()
        assert (etc / "passwd").read_text() == "the host's passwd\n"

    cid = new_id("p")
    node.start_detached(bundle, cid)
    pid = node.state(cid)["pid"]
    # The job: its volumes at their destinations, the directories' other entries the host's.
    seen = node.ok("exec", cid, "sh", "-c", show.replace("; sleep 60", ""))
    assert seen.splitlines()[:6] == [
        "the pod's nologin",
        "the pod's nologin",
        "the pod's data",
        "the pod's data",
        "[Service]",
        "nologin",
    ], seen
    assert "passwd" in seen.split() and "systemd" in seen.split()
    assert "the pod's nologin" in seen.splitlines()[-3:][0]  # the control, bound in place
    assert "/etc/hostname" in seen and "/var/lib/dpkg" in seen
    # The host: none of it, and its own passwd where the control is bound.
    host_unchanged()
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    node.ok("delete", "--force", cid)
    host_unchanged()

    # A create killed part-way (after its process made the namespace), then delete --force.
    crashed = new_id("k")
    killed = node(
        "create", "-b", str(bundle), crashed, env={"HOSTJOB_CRASH_AT": "create:before-created"}
    )
    assert killed.returncode != 0
    host_unchanged()
    node.ok("delete", "--force", crashed)
    host_unchanged()


def test_a_missing_target_below_a_read_only_directory_stays_read_only(
    node: Node, open_tmp: Path
) -> None:
    """The private copy of a directory keeps what its mount says: read-only stays so."""
    ro = open_tmp / "ro"
    ro.mkdir()
    (ro / "kept").write_text("kept\n")
    os.system(f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro}")
    try:
        files = open_tmp / "files"
        files.mkdir()
        (files / "x").write_text("x\n")
        show = f"cat {ro}/new/x {ro}/kept; touch {ro}/other 2>&1 || true"
        bundle = make_bundle(
            open_tmp / "pod",
            pod_config("sh", "-c", show, mounts=[bind_volume(files / "x", f"{ro}/new/x")]),
        )
        out = node.run_bundle(bundle, new_id("r"))
        assert out.splitlines()[:2] == ["x", "kept"] and "Read-only file system" in out
        assert sorted(os.listdir(ro)) == ["kept"]
    finally:
        os.system(f"umount {ro}")
