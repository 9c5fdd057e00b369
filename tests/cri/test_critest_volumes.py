"""critest's volume, mount and DNS cases (``container.go``, ``container_linux.go``,
``networking.go``), for both handlers: a hostPath volume, one through a symlinked host path,
read-only and non-recursive read-only volumes, the three mount propagations, and the pod's
DNS config as the container's ``/etc/resolv.conf``.

Every host path is in the case's temp dir and mounted at the same path in the container (as
critest does): a job container's processes see the host's tree, so nothing here may point
anywhere else. The host's own ``/etc/resolv.conf`` is in the fingerprint the ``ct`` fixture
compares after each case.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cri_api.v1 import api_pb2 as cri

from tests.compat import harness

from .critest import PAUSE, Critest, Sandbox

FLAG = "testVolume.file"


def host_path(tmp: Path, name: str = "volume") -> Path:
    """critest's ``createHostPath``: a directory holding a flag file."""
    d = tmp / name
    d.mkdir()
    (d / FLAG).touch()
    return d


def volume(path: Path, **kw: object) -> list[cri.Mount]:
    return [cri.Mount(container_path=str(path), host_path=str(path), **kw)]  # type: ignore[arg-type]


def test_volume(ct: Critest, tmp_path: Path) -> None:
    """A hostPath volume: the container sees its files and writes through to the host."""
    d = host_path(tmp_path)
    sb = ct.run_pod()
    cid = sb.run("volume", PAUSE, mounts=volume(d))
    assert ct.exec_ok(cid, ["ls", str(d)]) == f"{FLAG}\n"
    ct.exec_ok(cid, ["touch", f"{d}/from-the-container"])
    assert (d / "from-the-container").exists()


def test_volume_through_a_symlinked_host_path(ct: Critest, tmp_path: Path) -> None:
    """A hostPath that is a symlink to the directory, mounted at the symlink's path."""
    d = host_path(tmp_path)
    link = tmp_path / "volume-symlink"
    link.symlink_to(d)
    sb = ct.run_pod()
    cid = sb.run("symlink", PAUSE, mounts=volume(link))
    assert ct.exec_ok(cid, ["ls", str(link)]) == f"{FLAG}\n"
    assert link.is_symlink(), "the host's symlink was replaced"


def test_read_only_volume(ct: Critest, tmp_path: Path) -> None:
    """A read-only volume: a write fails with EROFS and the host's directory is unchanged."""
    d = host_path(tmp_path)
    sb = ct.run_pod()
    cid = sb.run("ro", PAUSE, mounts=volume(d, readonly=True))
    r = ct.exec_sync(cid, ["touch", f"{d}/new"])
    assert r.exit_code != 0 and b"Read-only file system" in r.stderr, r
    assert sorted(p.name for p in d.iterdir()) == [FLAG]
    st = ct.status(cid)
    assert [(m.container_path, m.readonly) for m in st.mounts] == [(str(d), True)]


def test_non_recursive_read_only_volume(ct: Critest, tmp_path: Path) -> None:
    """critest's "non-recursive readonly mounts": a read-only volume whose host path has a
    tmpfs mounted below it -- the volume is read-only, the submount (not made read-only: the
    CRI's ``readonly`` is not recursive) stays writable."""
    d = host_path(tmp_path)
    sub = d / "tmpfs"
    sub.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "critest-rro", str(sub)], check=True, timeout=30)
    try:
        sb = ct.run_pod(privileged=True)
        cid = sb.run("rro", PAUSE, mounts=volume(d, readonly=True), security={"privileged": True})
        ct.exec_ok(cid, ["touch", f"{sub}/file"])
        assert (sub / "file").exists()
        r = ct.exec_sync(cid, ["touch", f"{d}/top"])
        assert r.exit_code != 0 and b"Read-only file system" in r.stderr, r
    finally:
        harness.unmount_all_under(d)


PROPAGATIONS = {
    "rprivate": cri.PROPAGATION_PRIVATE,
    "rslave": cri.PROPAGATION_HOST_TO_CONTAINER,
    "rshared": cri.PROPAGATION_BIDIRECTIONAL,
}


def _mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True, timeout=30)


@pytest.mark.parametrize("mode", list(PROPAGATIONS))
def test_mount_propagation(ct: Critest, tmp_path: Path, mode: str) -> None:
    """critest's mount propagation, in a privileged container: a mount the host makes under
    the volume after the container started reaches it with ``rslave`` and ``rshared`` only; a
    mount the container makes under the volume reaches the host with ``rshared`` only. (The
    volume's source is bind-mounted on itself and made private or shared, as critest does:
    containerd refuses the two propagating modes on a source that is not shared.)"""
    propagation = PROPAGATIONS[mode]
    source = tmp_path / "mnt"
    host_side = source / "propagationMnt"
    host_side.mkdir(parents=True)
    src = tmp_path / "propagationSrcDir"
    src.mkdir()
    (src / "flagFile").touch()
    try:
        _mount("--bind", str(source), str(source))
        _mount("--make-rprivate" if mode == "rprivate" else "--make-rshared", str(source))
        sb: Sandbox = ct.run_pod(privileged=True)
        cid = sb.run(
            "propagation",
            PAUSE,
            mounts=volume(source, propagation=propagation),
            security={"privileged": True},
        )
        st = ct.status(cid)
        assert [(m.container_path, m.host_path, m.readonly, m.propagation) for m in st.mounts] == [
            (str(source), str(source), False, propagation)
        ]

        _mount("--bind", str(src), str(host_side))
        seen = ct.exec_ok(cid, ["ls", "-A", str(host_side)])
        assert seen == ("" if mode == "rprivate" else "flagFile\n"), (mode, seen)

        theirs = source / "containerMntPoint"
        ct.exec_ok(
            cid,
            ["sh", "-c", f"mkdir -p {theirs} && mount -t tmpfs critest-prop {theirs} && "
             f"touch {theirs}/flag"],
        )  # fmt: skip
        on_host = sorted(p.name for p in theirs.iterdir())
        assert on_host == (["flag"] if mode == "rshared" else []), (mode, on_host)
    finally:
        harness.unmount_all_under(source)


def test_dns_config(ct: Critest) -> None:
    """The pod's ``DNSConfig`` is the container's ``/etc/resolv.conf`` as the container sees
    it (critest's "DNS config"); the host's own is unchanged (the fixture's fingerprint)."""
    dns = cri.DNSConfig(
        servers=["10.233.0.10"], searches=["critest.svc.cluster.local"], options=["ndots:5"]
    )
    sb = ct.run_pod(dns=dns)
    cid = sb.run("dns", PAUSE)
    lines = ct.exec_ok(cid, ["cat", "/etc/resolv.conf"]).splitlines()
    assert "nameserver 10.233.0.10" in lines, lines
    assert "search critest.svc.cluster.local" in lines, lines
    assert "options ndots:5" in lines, lines
