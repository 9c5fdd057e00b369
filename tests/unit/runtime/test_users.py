"""hostjob.runtime.users without root: the ``--user auto`` range, the allocation against
the records of a tmp state root, the host's passwd and group, and the processes that
run; and which running containers share a uid (this test's own process as their init)."""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path

import pytest

from hostjob.errors import HostjobError, InvalidArgument
from hostjob.runtime import proc, users
from hostjob.runtime.record import PHASE_CREATED, Record, StateStore
from hostjob.spec import runtime as wire
from hostjob.specconv.convert import to_job_config
from tests.helpers import base_config

# Numbers no Debian passwd or group names, far from anything a test machine runs as.
FREE = 3_900_000_000


def add(store: StateStore, container_id: str, uid: int | None, pid: int = 0) -> None:
    job = to_job_config(wire.Spec.decode(base_config()), "/srv/b", container_id)
    job.process.uid = job.process.gid = uid
    store.create(container_id).release()
    started = (proc.start_time(pid) or 0) if pid else 0
    record = Record(
        id=container_id, pid=pid, start_time=started, phase=PHASE_CREATED,
        created="2026-12-02T00:00:00Z", owner="", config=job, undo=[],
    )  # fmt: skip
    store.write(record)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(str(tmp_path / "state"))


@pytest.mark.parametrize(
    ("text", "span"),
    [("2000000000-2000999999", (2_000_000_000, 2_000_999_999)), ("7-7", (7, 7)), (" 1-2 ", (1, 2))],
)
def test_a_range_is_first_last(text: str, span: tuple[int, int]) -> None:
    assert users.parse_range(text) == span


@pytest.mark.parametrize(
    "text",
    ["", "5", "5-", "-5", "a-b", "9-3", "0-10", "1-4294967295", "1-99999999999", "1--2", "²-³"],
)
def test_a_bad_range_is_refused(text: str) -> None:
    with pytest.raises(InvalidArgument, match="--auto-user-range"):
        users.parse_range(text)


def test_the_range_comes_from_the_flag_the_environment_or_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(users.RANGE_ENV, raising=False)
    assert users.configured_range(None) == users.DEFAULT_RANGE
    monkeypatch.setenv(users.RANGE_ENV, "10-20")
    assert users.configured_range(None) == (10, 20)
    assert users.configured_range("30-40") == (30, 40)
    monkeypatch.setenv(users.RANGE_ENV, "nonsense")
    with pytest.raises(InvalidArgument, match=users.RANGE_ENV):
        users.configured_range(None)


def test_the_default_range_is_free_on_this_host() -> None:
    low, high = users.DEFAULT_RANGE
    assert 0 < low <= high < 2**31  # a signed 32-bit uid is still right
    assert not any(low <= entry.pw_uid <= high for entry in pwd.getpwall())


def test_a_number_another_container_holds_is_never_given(store: StateStore) -> None:
    add(store, "a", FREE)
    add(store, "b", FREE + 2)
    add(store, "new", None)
    given = {users.allocate(store, "new", (FREE, FREE + 3)) for _ in range(40)}
    assert given == {FREE + 1, FREE + 3}
    # Its own record does not hold one against itself.
    assert users.allocate(store, "a", (FREE, FREE)) == FREE


def test_a_full_range_is_one_line(store: StateStore) -> None:
    add(store, "a", FREE)
    with pytest.raises(HostjobError, match=f"no free uid left in {FREE}-{FREE}"):
        users.allocate(store, "new", (FREE, FREE))


def test_a_number_the_hosts_passwd_or_group_names_is_never_given(store: StateStore) -> None:
    named = min(e.pw_uid for e in pwd.getpwall() if e.pw_uid > 0)
    with pytest.raises(HostjobError, match="no free uid"):
        users.allocate(store, "new", (named, named))


def test_a_number_a_process_runs_as_is_never_given(store: StateStore) -> None:
    """As root, a child that took an unnamed uid; else this test's own uid."""
    uid, child = os.getuid(), 0
    if uid == 0:
        uid = FREE + 7
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.setresuid(uid, uid, uid)
            os.close(write_end)
            os.read(read_end, 1)  # until the test is done
            os._exit(0)
        os.close(read_end)
    try:
        while child and f"\t{uid}\t" not in Path(f"/proc/{child}/status").read_text():
            time.sleep(0.01)  # until the child has switched
        with pytest.raises(HostjobError, match="no free uid"):
            users.allocate(store, "new", (uid, uid))
    finally:
        if child:
            os.close(write_end)
            os.waitpid(child, 0)


def test_sharing_names_the_running_containers_of_that_uid(store: StateStore) -> None:
    me = os.getpid()
    add(store, "alive", None, pid=me)  # its "init" is this test, running as os.getuid()
    add(store, "gone", None, pid=0)
    add(store, "self", None, pid=me)
    assert users.sharing(store, "self", os.getuid()) == ["alive"]
    assert users.sharing(store, "self", os.getuid() + 1) == []


def _group_only() -> str:
    """A host group whose name is no user's (Debian's ``adm``, ``staff``...)."""
    import grp

    users_ = {entry.pw_name for entry in pwd.getpwall()}
    return next(g.gr_name for g in grp.getgrall() if g.gr_name not in users_)


def test_a_group_name_gets_a_uid_of_its_own_in_that_group(store: StateStore) -> None:
    """hcsshim's per-container account: each container whose user names a group gets a
    uid and gid of its own (held by its record), the group as its supplementary group;
    never the one uid every job of the group would share."""
    import grp

    name = _group_only()
    gid = grp.getgrnam(name).gr_gid
    records = []
    for container_id in ("g1", "g2"):
        job = to_job_config(wire.Spec.decode(base_config()), "/srv/b", container_id)
        job.process.uid = job.process.gid = None
        job.process.username = name
        assert users.wants_own_uid(job) and job.auto_user
        store.create(container_id).release()
        record = Record(
            id=container_id, pid=0, start_time=0, phase=PHASE_CREATED,
            created="2026-12-02T00:00:00Z", owner="", config=job, undo=[],
        )  # fmt: skip
        users.assign(store, record, (FREE, FREE + 1))
        records.append(record)
    first, second = (r.config.process for r in records)
    assert {first.uid, second.uid} == {FREE, FREE + 1}
    for process in (first, second):
        assert process.gid == process.uid and process.additional_gids == [gid]
        assert process.username is None
    # The record holds it: the range is full now.
    with pytest.raises(HostjobError, match="no free uid"):
        users.allocate(store, "g3", (FREE, FREE + 1))


def test_a_user_a_number_or_an_unknown_name_is_no_group_member() -> None:
    root = pwd.getpwuid(0).pw_name
    for username in (root, f"{root}:{_group_only()}", "4242", "4242:7", "no-such-name-x", ""):
        job = to_job_config(wire.Spec.decode(base_config()), "/srv/b", "c")
        job.process.uid = job.process.gid = None
        job.process.username = username or None
        assert not users.wants_own_uid(job) and not job.auto_user
    # Nor a job that inherits its launcher, or that gives a uid besides the name.
    job = to_job_config(wire.Spec.decode(base_config()), "/srv/b", "c")
    job.process.username = _group_only()
    assert not users.wants_own_uid(job)  # uid 0 given
    job.process.uid = None
    job.inherit_user = True
    assert not users.wants_own_uid(job)
