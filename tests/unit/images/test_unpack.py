"""The layer extractor: fidelity, whiteouts, compression, and a hostile-tar corpus."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from hostjob.images import unpack
from hostjob.images.errors import DigestMismatch, UnpackError
from tests.fixtures.tars import entry, gz, make_tar, sha256, zst

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root")
BACKENDS = ["zlib", "isal", "isal-threaded"]


@pytest.fixture
def area(tmp_path):
    """``layers/`` for the unpack and ``outside/`` with sentinels nothing may touch."""
    layers = tmp_path / "layers"
    outside = tmp_path / "outside"
    layers.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("secret")
    (outside / "dir").mkdir()
    return tmp_path


def snapshot(path):
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            content = Path(p).read_bytes() if stat.S_ISREG(st.st_mode) else None
            out[os.path.relpath(p, path)] = (st.st_mode, st.st_nlink, content)
    return out


def do_unpack(area, blob, **kw):
    return unpack.unpack_to(io.BytesIO(blob), str(area / "layers" / "L"), **kw)


def assert_rejected(area, blob, exc=UnpackError, match=None, **kw):
    before = snapshot(area / "outside")
    with pytest.raises(exc, match=match) as info:
        do_unpack(area, blob, **kw)
    assert "\n" not in str(info.value)
    assert os.listdir(area / "layers") == [], "a partial layer was left behind"
    assert snapshot(area / "outside") == before
    return info.value


# --- fidelity -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("compress", ["gzip", "zstd", "none"])
def test_round_trip_with_digests(area, backend, compress):
    tar = make_tar(
        [
            entry("etc", "dir", mode=0o755),
            entry("etc/hostname", data=b"box\n", mode=0o644),
            entry("bin", "dir"),
            entry("bin/tool", data=b"#!/bin/sh\necho hi\n" * 5000, mode=0o755),
        ]
    )
    blob = {"gzip": gz, "zstd": zst, "none": bytes}[compress](tar)
    stats = do_unpack(
        area, blob, digest=sha256(blob), size=len(blob), diff_id=sha256(tar), backend=backend
    )
    assert stats.diff_id == sha256(tar)
    assert stats.digest == sha256(blob)
    assert stats.compression == compress
    assert stats.entries == 4
    diff = area / "layers" / "L" / "diff"
    assert (diff / "etc/hostname").read_bytes() == b"box\n"
    assert (diff / "bin/tool").read_bytes() == b"#!/bin/sh\necho hi\n" * 5000


@needs_root
def test_metadata_is_kept(area):
    tar = make_tar(
        [
            entry("d", "dir", mode=0o1777, uid=12, gid=34, mtime=1_000_000),
            entry("d/suid", data=b"x", mode=0o4755, uid=1000, gid=1000, mtime=2_000_000),
            entry("d/sgid", data=b"x", mode=0o2711),
            entry("d/link", "symlink", linkname="suid", uid=5, gid=6, mtime=3_000_000),
            entry("d/hard", "hardlink", linkname="d/suid"),
            entry("d/null", "char", devmajor=1, devminor=3, mode=0o666),
            entry("d/loop", "block", devmajor=7, devminor=0, mode=0o660),
            entry("d/pipe", "fifo", mode=0o600),
            entry(
                "d/caps",
                data=b"c",
                pax_headers={
                    "SCHILY.xattr.user.note": "hello",
                    "SCHILY.xattr.trusted.overlay.redirect": "/etc",
                },
            ),
            entry("d/all", data=b"a", mode=0o777),
            entry("d/none", data=b"n", mode=0o000),
            entry("d/grp", data=b"g", mode=0o640, uid=0, gid=0),
            entry("d/sub", "dir", mode=0o500, mtime=4_000_000),
            entry("d/sub/f", data=b"in a read-only dir"),
        ]
    )
    do_unpack(area, gz(tar), diff_id=sha256(tar))
    d = area / "layers" / "L" / "diff" / "d"
    st = os.lstat(d)
    assert stat.S_IMODE(st.st_mode) == 0o1777 and (st.st_uid, st.st_gid) == (12, 34)
    assert st.st_mtime == 1_000_000, "directory mtimes are set last"
    st = os.lstat(d / "suid")
    assert stat.S_IMODE(st.st_mode) == 0o4755 and st.st_uid == 1000 and st.st_mtime == 2_000_000
    assert stat.S_IMODE(os.lstat(d / "sgid").st_mode) == 0o2711
    assert stat.S_IMODE(os.lstat(d / "all").st_mode) == 0o777, "the umask does not apply"
    assert stat.S_IMODE(os.lstat(d / "none").st_mode) == 0o000
    assert stat.S_IMODE(os.lstat(d / "grp").st_mode) == 0o640
    st = os.lstat(d / "link")
    assert os.readlink(d / "link") == "suid" and (st.st_uid, st.st_gid) == (5, 6)
    assert st.st_mtime == 3_000_000
    assert os.lstat(d / "hard").st_ino == os.lstat(d / "suid").st_ino
    st = os.lstat(d / "null")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert stat.S_ISBLK(os.lstat(d / "loop").st_mode)
    assert stat.S_ISFIFO(os.lstat(d / "pipe").st_mode)
    assert os.getxattr(d / "caps", "user.note") == b"hello"
    assert "trusted.overlay.redirect" not in os.listxattr(d / "caps")
    assert stat.S_IMODE(os.lstat(d / "sub").st_mode) == 0o500
    assert os.lstat(d / "sub").st_mtime == 4_000_000


def test_long_names_gnu_and_pax(area):
    long = "a" * 120 + "/" + "b" * 130
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        tar = make_tar([entry(long, data=b"x"), entry("l", "symlink", linkname="z" * 200)], fmt)
        do_unpack(area, tar)
        assert (area / "layers" / "L" / "diff" / long).read_bytes() == b"x"
        assert os.readlink(area / "layers" / "L" / "diff" / "l") == "z" * 200
        import shutil

        shutil.rmtree(area / "layers" / "L")


@needs_root
def test_whiteouts_become_overlay_whiteouts(area):
    tar = make_tar(
        [
            entry("etc", "dir"),
            entry("etc/.wh.passwd"),
            entry("var", "dir"),
            entry("var/.wh..wh..opq"),
            entry("var/kept", data=b"k"),
            entry(".wh..wh.plnk", "dir"),
        ]
    )
    do_unpack(area, tar)
    diff = area / "layers" / "L" / "diff"
    st = os.lstat(diff / "etc/passwd")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    assert not (diff / "etc/.wh.passwd").exists()
    assert os.getxattr(diff / "var", "trusted.overlay.opaque") == b"y"
    assert (diff / "var/kept").read_bytes() == b"k"
    assert not os.path.lexists(diff / ".wh..wh.plnk")


def test_later_entries_replace_earlier_ones(area):
    tar = make_tar(
        [
            entry("x", "dir"),
            entry("x/y", data=b"1"),
            entry("x", data=b"now a file"),
            entry("f", data=b"first"),
            entry("f", data=b"second"),
            entry("d", data=b"file"),
            entry("d", "dir"),
        ]
    )
    do_unpack(area, tar)
    diff = area / "layers" / "L" / "diff"
    assert (diff / "x").read_bytes() == b"now a file"
    assert (diff / "f").read_bytes() == b"second"
    assert (diff / "d").is_dir()


def test_absolute_names_are_contained(area):
    tar = make_tar([entry("/abs/evil", data=b"x"), entry("./rel/./ok", data=b"y")])
    before = snapshot(area / "outside")
    do_unpack(area, tar)
    diff = area / "layers" / "L" / "diff"
    assert (diff / "abs/evil").read_bytes() == b"x"
    assert (diff / "rel/ok").read_bytes() == b"y"
    assert snapshot(area / "outside") == before


# --- the hostile corpus ---------------------------------------------------------------


def test_dotdot_entry_is_rejected(area):
    assert_rejected(area, make_tar([entry("../outside/evil", data=b"x")]), match=r"'\.\.'")
    assert_rejected(area, make_tar([entry("a/../../outside/secret", data=b"x")]))


def test_file_through_symlink_is_rejected(area):
    out = str(area / "outside")
    tar = make_tar([entry("a", "symlink", linkname=out), entry("a/evil", data=b"x")])
    assert_rejected(area, tar, match="symlink")
    tar = make_tar([entry("up", "symlink", linkname="../../.."), entry("up/outside/evil")])
    assert_rejected(area, tar, match="symlink")


def test_directory_through_symlink_is_rejected(area):
    out = str(area / "outside")
    tar = make_tar([entry("a", "symlink", linkname=out), entry("a/dir/newdir", "dir")])
    assert_rejected(area, tar)


def test_symlink_loop_is_rejected(area):
    tar = make_tar(
        [
            entry("l1", "symlink", linkname="l2"),
            entry("l2", "symlink", linkname="l1"),
            entry("l1/x", data=b"x"),
        ]
    )
    assert_rejected(area, tar)


def test_hardlink_outside_is_rejected(area):
    secret = str(area / "outside" / "secret")
    assert_rejected(area, make_tar([entry("h", "hardlink", linkname=secret)]), match="not in this")
    assert_rejected(area, make_tar([entry("h", "hardlink", linkname="../outside/secret")]))
    out = str(area / "outside")
    tar = make_tar(
        [entry("s", "symlink", linkname=out), entry("h", "hardlink", linkname="s/secret")]
    )
    assert_rejected(area, tar)
    assert os.lstat(secret).st_nlink == 1


def test_hardlink_to_a_symlink_links_the_symlink_itself(area):
    secret = str(area / "outside" / "secret")
    tar = make_tar([entry("s", "symlink", linkname=secret), entry("h", "hardlink", linkname="s")])
    do_unpack(area, tar)
    diff = area / "layers" / "L" / "diff"
    assert os.path.islink(diff / "h") and os.readlink(diff / "h") == secret
    assert os.lstat(secret).st_nlink == 1


def test_overwriting_a_symlink_or_hardlink_does_not_write_through(area):
    secret = area / "outside" / "secret"
    tar = make_tar(
        [
            entry("s", "symlink", linkname=str(secret)),
            entry("s", data=b"overwrite"),
            entry("f", data=b"orig"),
            entry("h", "hardlink", linkname="f"),
            entry("h", data=b"changed"),
        ]
    )
    before = snapshot(area / "outside")
    do_unpack(area, tar)
    diff = area / "layers" / "L" / "diff"
    assert (diff / "s").read_bytes() == b"overwrite" and not os.path.islink(diff / "s")
    assert (diff / "f").read_bytes() == b"orig"
    assert snapshot(area / "outside") == before


def test_whiteout_through_symlink_is_rejected(area):
    out = str(area / "outside")
    tar = make_tar([entry("a", "symlink", linkname=out), entry("a/.wh.secret")])
    assert_rejected(area, tar, match="symlink")
    tar = make_tar([entry("a", "symlink", linkname=out + "/dir"), entry("a/.wh..wh..opq")])
    assert_rejected(area, tar, match="symlink")
    assert "trusted.overlay.opaque" not in os.listxattr(area / "outside" / "dir")


def test_whiteout_of_dotdot_is_rejected(area):
    assert_rejected(area, make_tar([entry(".wh..")]), match="whiteout")
    assert_rejected(area, make_tar([entry("a/.wh..")]), match="whiteout")


@needs_root
def test_device_node_lands_inside(area):
    tar = make_tar([entry("../dev/evil", "char", devmajor=1, devminor=3)])
    assert_rejected(area, tar)
    tar = make_tar([entry("/dev/mem", "char", devmajor=1, devminor=1, mode=0o600)])
    do_unpack(area, tar)
    st = os.lstat(area / "layers" / "L" / "diff" / "dev" / "mem")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 1)


def test_huge_declared_size_is_rejected(area):
    tar = bytearray(make_tar([entry("big", data=b"x" * 10)]))
    # Rewrite the size field of the (PAX format, so plain ustar for this short name) header.
    header = tarfile.TarInfo("big")
    header.size = 10**11
    header.mtime = 1_600_000_000
    header.mode = 0o644
    raw = header.tobuf(tarfile.GNU_FORMAT)
    tar = bytes(raw) + b"x" * 10 + b"\0" * 1024
    assert_rejected(area, tar, match="end of data|truncated")
    assert_rejected(area, gz(tar), match="end of data|truncated")


@pytest.mark.parametrize("compress", ["gzip", "zstd", "none"])
def test_truncated_stream_is_rejected(area, compress):
    tar = make_tar([entry(f"f{i}", data=os.urandom(3000)) for i in range(20)])
    blob = {"gzip": gz, "zstd": zst, "none": bytes}[compress](tar)
    assert_rejected(area, blob[: len(blob) // 2], match="truncat|end of data|corrupt|empty file")


def test_truncated_at_a_header_boundary_is_rejected(area):
    tar = make_tar([entry("a", data=b"x" * 512), entry("b", data=b"y" * 512)], tarfile.GNU_FORMAT)
    assert_rejected(area, tar[:1024], match="truncated")


def test_corrupt_header_is_rejected(area):
    tar = bytearray(make_tar([entry("a", data=b"x" * 512), entry("b", data=b"y")]))
    tar[2048 + 148 : 2048 + 156] = b"0000000\0"  # break the second header's checksum
    assert_rejected(area, bytes(tar), match="truncated or corrupt|checksum")


def test_garbage_is_rejected(area):
    assert_rejected(area, b"")
    assert_rejected(area, os.urandom(4096))
    assert_rejected(area, b"\x1f\x8b" + os.urandom(4096), match="gzip|corrupt")
    assert_rejected(area, b"BZh91AY&SY" + os.urandom(100), match="bzip2")


def test_wrong_diff_id_is_rejected(area):
    tar = make_tar([entry("f", data=b"x")])
    assert_rejected(area, gz(tar), DigestMismatch, match="diffID", diff_id=sha256(b"other"))


def test_wrong_digest_or_size_is_rejected(area):
    blob = gz(make_tar([entry("f", data=b"x")]))
    assert_rejected(area, blob, DigestMismatch, digest=sha256(b"other"))
    assert_rejected(area, blob, DigestMismatch, size=len(blob) - 1)
    assert_rejected(area, blob, DigestMismatch, size=len(blob) + 1)


def test_unknown_entry_type_is_rejected(area):
    info = tarfile.TarInfo("weird")
    info.type = b"Z"
    tar = info.tobuf(tarfile.GNU_FORMAT) + b"\0" * 1024
    assert_rejected(area, tar, match="unsupported")


def test_modes_do_not_depend_on_the_umask(area):
    old = os.umask(0o077)
    try:
        do_unpack(
            area, make_tar([entry("f", data=b"x", mode=0o644), entry("d", "dir", mode=0o755)])
        )
    finally:
        os.umask(old)
    diff = area / "layers" / "L" / "diff"
    assert stat.S_IMODE(os.lstat(diff / "f").st_mode) == 0o644
    assert stat.S_IMODE(os.lstat(diff / "d").st_mode) == 0o755


def test_many_directories_and_hardlinks_across_them(area):
    # More directories than the fd cache holds, with hardlinks reaching back to early ones.
    entries = []
    for i in range(300):
        entries.append(entry(f"d{i:03}/sub/f", data=b"%d" % i))
        if i >= 10:
            entries.append(entry(f"d{i:03}/sub/h", "hardlink", linkname=f"d{i - 10:03}/sub/f"))
    do_unpack(area, make_tar(entries))
    diff = area / "layers" / "L" / "diff"
    for i in range(10, 300):
        assert (diff / f"d{i:03}/sub/h").read_bytes() == b"%d" % (i - 10)
        assert (
            os.lstat(diff / f"d{i:03}/sub/h").st_ino
            == os.lstat(diff / f"d{i - 10:03}/sub/f").st_ino
        )
