"""A shared uid is a shared identity; ``--user auto`` keeps jobs apart.

Every process may read ``/proc/PID/environ`` of the processes of its own uid, and
signal them. So two jobs that both run as ``--user 65534:65534`` own each other: one
reads the other's ``-e API_TOKEN=...`` and stops it -- shown first, with the warning
``run`` prints when it starts the second. Then harmless: two ``--user auto`` jobs get a
uid and gid each of their own (from the reserved range, in no passwd, no groups) and
can neither read the other's environment nor signal it; the number is held for the
container's life (a full range refuses the next one with one line and makes nothing)
and freed at ``delete`` -- also by ``delete --force`` after a create that was killed
half-way.
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob.runtime import users
from tests.fixtures.procfs import ids_of
from tests.helpers import Hostjob, base_config, make_bundle, new_id

TOKEN = "API_TOKEN=hunter2-of-job-a"
# A range of two numbers no passwd names, for the tests that fill one.
SMALL = 3_900_000_200


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_jobs_of_one_uid_read_and_signal_each_other_and_are_warned(
    hj_open: Hostjob, busybox_image: str, run_d: tuple[str, ...]
) -> None:
    a, b, c = new_id("a"), new_id("b"), new_id("c")
    hj_open.ok(
        *run_d, "--name", a, "--user", "65534:65534", "-e", TOKEN, busybox_image, "sleep", "600"
    )
    pid_a = hj_open.state(a)["pid"]
    # No --log: the one warning goes to stderr (clients give --log: then it goes there).
    loud = Hostjob(hj_open.root)
    started = loud(*run_d, "--name", b, "--user", "65534:65534", busybox_image, "sleep", "600")
    assert started.returncode == 0, started.stderr
    warning = started.stderr.strip()
    assert len(warning.splitlines()) == 1, warning
    assert f"container {b} runs as uid 65534" in warning and a in warning
    assert "--user auto" in warning

    # The attack: b reads a's environment and stops it.
    environ = hj_open.ok("exec", b, "cat", f"/proc/{pid_a}/environ")
    assert TOKEN in environ
    hj_open.ok("exec", b, "kill", "-STOP", str(pid_a))
    try:
        assert state_of(pid_a) == "T"
    finally:
        hj_open.ok("exec", b, "kill", "-CONT", str(pid_a))

    # With --log, the warning is there and stderr stays empty (hj_open.ok checks).
    hj_open.ok(*run_d, "--name", c, "--user", "65534", busybox_image, "sleep", "600")
    assert f"container {c} runs as uid 65534" in hj_open.log.read_text()  # type: ignore[union-attr]
    for container in (a, b, c):
        hj_open.ok("delete", "--force", container)


def test_auto_user_jobs_cannot_read_or_signal_each_other(
    hj_open: Hostjob, busybox_image: str, run_d: tuple[str, ...]
) -> None:
    a, b = new_id("a"), new_id("b")
    loud = Hostjob(hj_open.root)
    for name, env in ((a, ["-e", TOKEN]), (b, [])):
        done = loud(*run_d, "--name", name, "--user", "auto", *env, busybox_image, "sleep", "600")
        assert done.returncode == 0 and done.stderr == "", done.stderr  # no warning
    pid_a, pid_b = hj_open.state(a)["pid"], hj_open.state(b)["pid"]
    uids_a, gids_a, groups_a = ids_of(pid_a)
    uids_b, gids_b, groups_b = ids_of(pid_b)
    low, high = users.DEFAULT_RANGE
    for uids, gids, groups in ((uids_a, gids_a, groups_a), (uids_b, gids_b, groups_b)):
        assert len(set(uids)) == 1 and uids == gids, (uids, gids)
        assert low <= uids[0] <= high
        assert groups == ""  # no supplementary groups
        with pytest.raises(KeyError):
            pwd.getpwuid(uids[0])  # no account was made
        with pytest.raises(KeyError):
            grp.getgrgid(uids[0])
    assert uids_a[0] != uids_b[0]

    denied = hj_open("exec", b, "cat", f"/proc/{pid_a}/environ")
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert TOKEN not in denied.stdout
    signalled = hj_open("exec", b, "kill", "-STOP", str(pid_a))
    assert signalled.returncode != 0 and "not permitted" in signalled.stderr
    signalled = hj_open("exec", b, "kill", "-KILL", str(pid_a))
    assert signalled.returncode != 0
    assert state_of(pid_a) in ("S", "R") and hj_open.status(a) == "running"
    # Its own environment is its own; exec without --user runs as the container's uid.
    assert TOKEN in hj_open.ok("exec", a, "cat", f"/proc/{pid_a}/environ")
    assert hj_open.ok("exec", a, "id", "-u").strip() == str(uids_a[0])
    for container in (a, b):
        hj_open.ok("delete", "--force", container)


def test_the_number_is_held_for_the_containers_life_and_freed_at_delete(
    hj_open: Hostjob, busybox_image: str, run_d: tuple[str, ...]
) -> None:
    span = ("--auto-user-range", f"{SMALL}-{SMALL}")
    a, b = new_id("a"), new_id("b")
    hj_open.ok(*span, *run_d, "--name", a, "--user", "auto", busybox_image, "sleep", "600")
    assert ids_of(hj_open.state(a)["pid"])[0][0] == SMALL
    hj_open.ok("kill", a, "KILL")
    wait_stopped(hj_open, a)
    # Stopped, it still holds it: the next one is refused with one line, nothing made.
    error = hj_open.fail(*span, *run_d, "--name", b, "--user", "auto", busybox_image, "true")
    assert f"no free uid left in {SMALL}-{SMALL}" in error
    assert not (hj_open.root / b).exists()
    hj_open.ok("delete", a)
    hj_open.ok(*span, *run_d, "--name", b, "--user", "auto", busybox_image, "sleep", "600")
    assert ids_of(hj_open.state(b)["pid"])[0][0] == SMALL
    hj_open.ok("delete", "--force", b)


def test_a_number_passwd_names_or_a_process_runs_as_is_never_given(
    hj_open: Hostjob, busybox_image: str, run_d: tuple[str, ...], running_as: Iterator[int]
) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    error = hj_open.fail(
        "--auto-user-range", f"{nobody}-{nobody}", *run_d, "--user", "auto", busybox_image, "true"
    )
    assert "no free uid" in error
    taken = next(running_as)  # SMALL + 1, held by a host process
    span = ("--auto-user-range", f"{taken}-{taken + 1}")
    for _ in range(3):  # the search starts at random: each time the free one
        name = new_id("p")
        hj_open.ok(*span, *run_d, "--name", name, "--user", "auto", busybox_image, "sleep", "600")
        assert ids_of(hj_open.state(name)["pid"])[0][0] == taken + 1
        hj_open.ok("delete", "--force", name)


@pytest.fixture
def running_as() -> Iterator[Iterator[int]]:
    """A host process that runs as ``SMALL + 1`` (no container of hostjob's)."""
    uid = SMALL + 1
    process = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "600"]
    )
    try:
        deadline = time.monotonic() + 10
        while ids_of(process.pid)[0][0] != uid:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield iter([uid])
    finally:
        process.kill()
        process.wait(10)


def test_a_bundle_asks_by_annotation_and_a_crashed_create_is_freed_by_delete_force(
    hj_open: Hostjob, open_tmp: Path
) -> None:
    span = ("--auto-user-range", f"{SMALL}-{SMALL + 1}")
    config = base_config("sleep", "600", annotations={"io.hostjob.user": "auto"})
    bundle = make_bundle(open_tmp / "bundle", config)
    os.chmod(bundle, 0o755)
    first, crashed, third = new_id("a"), new_id("c"), new_id("t")
    hj_open.ok(*span, "create", "--bundle", str(bundle), first)
    hj_open.ok("start", first)
    uid = ids_of(hj_open.state(first)["pid"])[0][0]
    assert uid in (SMALL, SMALL + 1)
    # A create killed once its record holds the other number still holds it.
    killed = hj_open(
        *span, "create", "--bundle", str(bundle), crashed,
        env={"HOSTJOB_CRASH_AT": "create:after-cgroup"},
    )  # fmt: skip
    assert killed.returncode == -9
    error = hj_open.fail(*span, "create", "--bundle", str(bundle), third)
    assert "no free uid left" in error
    hj_open.ok("delete", "--force", crashed)
    hj_open.ok(*span, "create", "--bundle", str(bundle), third)
    hj_open.ok("start", third)
    assert ids_of(hj_open.state(third)["pid"])[0][0] == (SMALL + 1 if uid == SMALL else SMALL)
    # With an inherit-user annotation too: two users asked for, refused at create.
    both = base_config(annotations={"io.hostjob.user": "auto", "io.hostjob.inherit-user": "true"})
    make_bundle(open_tmp / "both", both)
    assert "two different users" in hj_open.fail(
        "create", "--bundle", str(open_tmp / "both"), new_id("x")
    )
    for container in (first, third):
        hj_open.ok("delete", "--force", container)


def wait_stopped(hj: Hostjob, container_id: str) -> None:
    deadline = time.monotonic() + 10
    while hj.status(container_id) != "stopped":
        assert time.monotonic() < deadline
        time.sleep(0.05)


def group_only() -> grp.struct_group:
    """A host group whose name is no user's (Debian's ``staff``, ``adm``...)."""
    names = {entry.pw_name for entry in pwd.getpwall()}
    return next(g for g in grp.getgrall() if g.gr_name not in names and g.gr_gid != 0)


def test_a_group_name_gives_each_container_a_uid_of_its_own_in_that_group(
    hj_open: Hostjob, open_tmp: Path
) -> None:
    """A user given by a group's name (hcsshim's form; hcsshim makes a fresh account in
    that group per container) ran every such job as the one overflow uid (65534, the
    host's ``nobody`` too): one shared identity -- shown first with two jobs of that uid.
    Now each gets a uid and gid of its own from the ``--user auto`` range, the group as its
    supplementary group, held for its life and freed at delete; ``exec`` runs as it."""
    group = group_only()
    # The attack, where nothing stops it: two jobs of the uid that form gave.
    shared = base_config("sh", "-c", f"export {TOKEN}; exec sleep 600")
    shared["process"]["user"] = {"uid": 65534, "gid": group.gr_gid}
    make_bundle(open_tmp / "shared", shared)
    a, b = new_id("a"), new_id("b")
    for cid in (a, b):
        hj_open.ok("create", "--bundle", str(open_tmp / "shared"), cid)
        hj_open.ok("start", cid)
    pid_a = hj_open.state(a)["pid"]
    wait_for_exec(pid_a)
    assert TOKEN in hj_open.ok("exec", b, "cat", f"/proc/{pid_a}/environ")
    for cid in (a, b):
        hj_open.ok("delete", "--force", cid)

    # hostjob: the group's name as the user -- a uid of each container's own.
    span = ("--auto-user-range", f"{SMALL}-{SMALL + 1}")
    config = base_config("sh", "-c", f"export {TOKEN}; exec sleep 600")
    config["process"]["user"] = {"username": group.gr_name}
    make_bundle(open_tmp / "named", config)
    first, second, third = new_id("f"), new_id("s"), new_id("t")
    for cid in (first, second):
        hj_open.ok(*span, "create", "--bundle", str(open_tmp / "named"), cid)
        hj_open.ok("start", cid)
    ids = {cid: ids_of(hj_open.state(cid)["pid"]) for cid in (first, second)}
    assert {i[0][0] for i in ids.values()} == {SMALL, SMALL + 1}
    for uids, gids, groups in ids.values():
        assert set(uids) == {uids[0]} and set(gids) == {uids[0]}, "a gid of its own"
        assert groups.split() == [str(group.gr_gid)], "in that group"
    pid_first = hj_open.state(first)["pid"]
    wait_for_exec(pid_first)
    read = hj_open("exec", second, "cat", f"/proc/{pid_first}/environ")
    assert read.returncode != 0 and TOKEN not in read.stdout
    # exec runs as that uid; the number is held while the container exists, freed after.
    own_uid = ids[first][0][0]
    assert hj_open.ok("exec", first, "id", "-u").strip() == str(own_uid)
    error = hj_open.fail(*span, "create", "--bundle", str(open_tmp / "named"), third)
    assert "no free uid left" in error
    hj_open.ok("delete", "--force", first)
    hj_open.ok(*span, "create", "--bundle", str(open_tmp / "named"), third)
    hj_open.ok("start", third)
    assert ids_of(hj_open.state(third)["pid"])[0][0] == own_uid
    for cid in (second, third):
        hj_open.ok("delete", "--force", cid)


def wait_for_exec(pid: int) -> None:
    """Until the init has exec'd its program (its environment is then the job's)."""
    deadline = time.monotonic() + 10
    while b"API_TOKEN" not in Path(f"/proc/{pid}/environ").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.02)
