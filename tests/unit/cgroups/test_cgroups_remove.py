"""``cgroups.remove_if_empty``: delete's removal of an ended job's cgroup without a
manager, against fake v1 and v2 trees (the kernel's rmdir: EBUSY while a process or a
sub-cgroup is in it)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import hostjob.cgroups as cg
from hostjob.cgroups.driver import open_manager
from tests.unit.cgroups.fakefs import FakeCgroup1, FakeCgroup2

Spawn = Callable[..., subprocess.Popen[bytes]]
PATH = "/hostjob/c1"


def test_an_ended_job_goes_with_its_empty_parents(fake1: FakeCgroup1) -> None:
    open_manager(PATH, root=fake1.root).create()
    open_manager("/hostjob/c2", root=fake1.root).create()  # another job under /hostjob
    mounts = cg.mounts_at(fake1.root)
    assert cg.remove_if_empty(PATH, mounts, cg.CGROUP_PARENT)
    for h in fake1.hierarchies:
        assert not os.path.exists(fake1.path(h, PATH)), h
        assert os.path.isdir(fake1.path(h, "/hostjob")), h  # c2 still uses it
    assert cg.remove_if_empty("/hostjob/c2", mounts, cg.CGROUP_PARENT)
    for h in fake1.hierarchies:
        assert not os.path.exists(fake1.path(h, "/hostjob")), h


def test_a_job_with_a_process_is_left_to_the_manager(fake1: FakeCgroup1, spawn: Spawn) -> None:
    manager = open_manager(PATH, root=fake1.root)
    manager.create()
    manager.add(spawn().pid)
    assert not cg.remove_if_empty(PATH, cg.mounts_at(fake1.root), cg.CGROUP_PARENT)
    assert manager.exists()
    manager.destroy()  # what delete does then: kills, removes
    assert not manager.exists()


def test_a_job_with_a_sub_cgroup_is_left_to_the_manager(fake2: FakeCgroup2) -> None:
    manager = open_manager(PATH, root=fake2.root)
    manager.create()
    os.mkdir(fake2.path(PATH + "/sub"))
    assert not cg.remove_if_empty(PATH, cg.mounts_at(fake2.root), cg.CGROUP_PARENT)
    assert os.path.isdir(fake2.path(PATH + "/sub"))
    manager.destroy()
    assert not manager.exists()


def test_v2_and_a_path_outside_the_top(fake2: FakeCgroup2) -> None:
    open_manager("/pods/c1", root=fake2.root).create()
    assert cg.remove_if_empty("/pods/c1", cg.mounts_at(fake2.root), cg.CGROUP_PARENT)
    assert not os.path.exists(fake2.path("/pods/c1"))
    assert os.path.isdir(fake2.path("/pods"))  # not hostjob's to remove
    assert cg.remove_if_empty("/pods/c1", cg.mounts_at(fake2.root), cg.CGROUP_PARENT)  # gone


def test_the_job_dirs_are_the_managers(fake1: FakeCgroup1, fake2: FakeCgroup2) -> None:
    """remove_if_empty finds the job's directories without a manager: the same ones."""
    hybrid = cg.Mounts.from_rows([["1", "/c/cpu", "/", "cpu"], ["2", "/c/unified", "/", ""]])
    for mounts in (cg.mounts_at(fake1.root), cg.mounts_at(fake2.root), hybrid):
        assert cg.job_dirs(PATH, mounts) == open_manager(PATH, mounts=mounts).dirs()
