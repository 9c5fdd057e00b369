"""The shared file helpers of hostjob.linux.fsutil: atomic writes, locks, directories."""

from __future__ import annotations

import os
import posix
import stat
from pathlib import Path

import pytest

from hostjob.linux import fsutil


def entries(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.fixture
def umask_0() -> object:
    old = os.umask(0)
    yield None
    os.umask(old)


def test_write_atomic_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    fsutil.write_atomic(str(target), b"new contents", mode=0o600)
    assert target.read_bytes() == b"new contents"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert entries(tmp_path) == ["state.json"]  # no temp file left


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_write_atomic_mode_is_exact_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        fsutil.write_atomic(str(tmp_path / "f"), b"x", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "names.json"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), fsutil.AtomicFile(str(target)) as f:
        f.write(b"half of the new")
        raise RuntimeError("the writer died")
    assert target.read_bytes() == b"old"
    assert entries(tmp_path) == ["names.json"]


def test_a_symlink_at_the_target_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "pid").symlink_to(victim)
    fsutil.write_atomic(str(tmp_path / "pid"), b"123")
    assert victim.read_bytes() == b"precious"
    assert not (tmp_path / "pid").is_symlink()
    assert (tmp_path / "pid").read_bytes() == b"123"


def test_atomic_file_open_commit_and_discard(tmp_path: Path) -> None:
    kept = fsutil.AtomicFile(str(tmp_path / "kept"))
    kept.open().write(b"a")
    assert entries(tmp_path)[0].startswith(".kept.tmp-")  # written beside its target
    kept.commit()
    dropped = fsutil.AtomicFile(str(tmp_path / "dropped"))
    dropped.open().write(b"b")
    dropped.discard()
    assert entries(tmp_path) == ["kept"]
    assert (tmp_path / "kept").read_bytes() == b"a"


def test_durable_writes_fsync_the_file_then_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(posix, "fsync", fsync)  # what fsutil calls
    fsutil.write_atomic(str(tmp_path / "blob"), b"x", durable=True)
    assert len(synced) == 2
    assert os.path.basename(synced[0]).startswith(".blob.tmp-")  # before the rename
    assert synced[1] == str(tmp_path)  # after it
    synced.clear()
    fsutil.write_atomic(str(tmp_path / "state"), b"x")  # not durable: no fsync at all
    assert synced == []


def test_temp_file_is_new_private_and_never_follows_a_plant(tmp_path: Path) -> None:
    fd, path = fsutil.temp_file(str(tmp_path), ".x-")
    os.close(fd)
    assert os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path).startswith(".x-")
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0
    fd2, path2 = fsutil.temp_file(str(tmp_path), ".x-")
    os.close(fd2)
    assert path2 != path


def test_temp_file_gives_up_when_every_name_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(posix, "urandom", lambda n: b"\0" * n)
    (tmp_path / ".x-000000000000").symlink_to("/etc/passwd")
    with pytest.raises(FileExistsError):
        fsutil.temp_file(str(tmp_path), ".x-")


def test_an_exclusive_lock_excludes_others_until_released(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    with fsutil.lock_file(path) as held:
        assert held.fd >= 0
        assert fsutil.is_locked(path)
        with pytest.raises(BlockingIOError):
            fsutil.lock_file(path, wait=False)
        with pytest.raises(BlockingIOError):
            fsutil.lock_file(path, shared=True, wait=False)
    assert held.fd == -1
    assert not fsutil.is_locked(path)
    fsutil.lock_file(path, wait=False).release()


def test_shared_locks_coexist(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    with fsutil.lock_file(path, shared=True), fsutil.lock_file(path, shared=True, wait=False):
        assert not fsutil.is_locked(path)  # only shared holders
        with pytest.raises(BlockingIOError):
            fsutil.lock_file(path, wait=False)


def test_lock_fd_owns_the_fd_and_closes_it_when_it_cannot_lock(tmp_path: Path) -> None:
    flags = os.O_RDONLY | os.O_DIRECTORY
    held = fsutil.lock_fd(os.open(tmp_path, flags))  # a directory can be locked too
    fd = os.open(tmp_path, flags)
    with pytest.raises(BlockingIOError):
        fsutil.lock_fd(fd, wait=False)
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    held.release()
    lock = fsutil.lock_fd(os.open(tmp_path, flags), wait=False)
    lock.release()
    lock.release()  # twice is fine


def test_is_locked_of_a_missing_path(tmp_path: Path) -> None:
    assert not fsutil.is_locked(str(tmp_path / "gone"))


def test_lock_file_refuses_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        fsutil.lock_file(str(tmp_path / "lock"))
    assert not (tmp_path / "elsewhere").exists()


def test_ensure_dir_gives_exact_modes_whatever_the_umask(tmp_path: Path, umask_0: None) -> None:
    leaf = tmp_path / "a" / "b" / "c"
    fsutil.ensure_dir(str(leaf), 0o700)
    assert stat.S_IMODE(leaf.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o755  # not 0777
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o755
    (tmp_path / "a").chmod(0o750)
    fsutil.ensure_dir(str(leaf), 0o711)  # existing ones are left as they are
    assert stat.S_IMODE(leaf.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o750


def test_ensure_dir_fails_on_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(OSError):
        fsutil.ensure_dir(str(tmp_path / "file"))
    with pytest.raises(OSError):
        fsutil.ensure_dir(str(tmp_path / "file" / "below"))


def test_a_new_state_root_and_its_parents_are_never_world_writable(
    tmp_path: Path, umask_0: None
) -> None:
    from hostjob.runtime.record import StateStore

    root = tmp_path / "run" / "hostjob"
    StateStore(str(root)).create("c1").release()
    assert stat.S_IMODE(root.stat().st_mode) == 0o711
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o755
