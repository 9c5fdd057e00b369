"""_fs: fd-relative, no-follow, one-write access and its error messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostjob.cgroups import _fs
from hostjob.errors import CgroupError


@pytest.fixture
def cg(tmp_path: Path) -> _fs.Dir:
    (tmp_path / "memory.max").write_text("max\n")
    d = _fs.Dir(str(tmp_path))
    yield d
    d.close()


def test_read_write_round_trip(cg: _fs.Dir) -> None:
    cg.write("memory.max", "4096")
    assert cg.read("memory.max") == "4096"
    assert cg.read_int("memory.max") == 4096
    assert cg.try_write("memory.max", "max") == 0
    assert cg.read_int("memory.max") == _fs.MAX_U64


def test_files_are_read_whole_whatever_their_size(cg: _fs.Dir, tmp_path: Path) -> None:
    for size in (0, 2047, 2048, 4096, 65536, 200_000):
        (tmp_path / "big").write_bytes(b"x" * size)
        assert len(cg.read("big")) == size
        assert len(_fs.read_path(str(tmp_path / "big"))) == size


def test_missing_files(cg: _fs.Dir) -> None:
    assert cg.read_optional("nope") is None
    assert not cg.has("nope") and cg.has("memory.max")
    with pytest.raises(CgroupError, match=r"cannot read .*/nope: No such file"):
        cg.read("nope")
    with pytest.raises(CgroupError, match=r"cannot write '1' to .*/nope: No such file"):
        cg.write("nope", "1")


def test_symlinks_are_never_followed(cg: _fs.Dir, tmp_path: Path) -> None:
    target = tmp_path.parent / f"{tmp_path.name}-outside"
    target.write_text("precious\n")
    (tmp_path / "memory.high").symlink_to(target)
    with pytest.raises(CgroupError, match=r"cannot write '1' to .*/memory\.high: .*symlink"):
        cg.write("memory.high", "1")
    with pytest.raises(CgroupError, match=r"memory\.high"):
        cg.read("memory.high")
    assert not cg.has("memory.high") or os.path.islink(tmp_path / "memory.high")
    assert target.read_text() == "precious\n"


def test_a_symlinked_cgroup_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    d = _fs.Dir(str(tmp_path / "link"))
    with pytest.raises(CgroupError, match="cannot open cgroup"):
        d.fd()
    assert d.try_write("x", "1") != 0


def test_error_messages_name_file_value_and_reason() -> None:
    import errno

    for code, hint in (
        (errno.EINVAL, "rejected the value"),
        (errno.EBUSY, "in use"),
        (errno.ENOSPC, "no CPUs/memory nodes"),
        (errno.EACCES, "needs root"),
    ):
        msg = str(_fs.write_error("/sys/fs/cgroup/x", "cpu.max", "5 5", code))
        assert msg.startswith("cannot write '5 5' to /sys/fs/cgroup/x/cpu.max: ")
        assert hint in msg and "\n" not in msg


def test_parse_helpers() -> None:
    assert _fs.parse_int(" max\n", "f") == _fs.MAX_U64
    with pytest.raises(CgroupError, match="cannot parse f: 'abc' is not a number"):
        _fs.parse_int("abc", "f")
    assert _fs.parse_keyed("a 1\nb max\nc x y\n\n") == {"a": 1, "b": _fs.MAX_U64}
    assert _fs.keyed_value(None, "a") == 0
    assert _fs.keyed_value("oom_kill 3\n", "oom_kill") == 3
    assert _fs.parse_pids(b"1\n22\n") == [1, 22]


def test_mkdir_reports_existing(tmp_path: Path) -> None:
    assert _fs.mkdir(str(tmp_path / "a")) is True
    assert _fs.mkdir(str(tmp_path / "a")) is False
    with pytest.raises(FileNotFoundError):
        _fs.mkdir(str(tmp_path / "x" / "y"))


def test_entry_join_writes_zero_to_tasks_then_unified_procs(tmp_path: Path) -> None:
    import hostjob.cgroups as cg

    tasks = [str(tmp_path / f"tasks{i}") for i in range(3)]
    unified = tmp_path / "unified"
    unified.mkdir()
    for f in [*tasks, str(unified / "cgroup.procs")]:
        Path(f).write_text("")
    entry = cg.Entry(tasks, str(unified))
    # Born in the unified cgroup (clone3): only the v1 tasks files are written.
    entry.join(unified=False)
    assert [Path(f).read_text() for f in tasks] == ["0", "0", "0"]
    assert (unified / "cgroup.procs").read_text() == ""
    # The fallback (os.fork): cgroup.procs of the unified cgroup too.
    entry.join()
    assert (unified / "cgroup.procs").read_text() == "0"
    with pytest.raises(CgroupError, match=r"cannot join cgroup: writing 0 to .*/nope: No such"):
        cg.Entry([*tasks, str(tmp_path / "nope")], None).join()
    with pytest.raises(CgroupError, match=r"writing 0 to .*/gone/cgroup.procs: No such"):
        cg.Entry([], str(tmp_path / "gone")).join()
