"""resolve_path: linux.cgroupsPath (and --systemd-cgroup) -> the cgroup path."""

from __future__ import annotations

import pytest

from hostjob.cgroups import expand_slice, parse_mountinfo, resolve_path
from hostjob.cgroups.driver import open_manager
from hostjob.errors import ConfigError


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("", "/hostjob/c1"),
        ("pods/p1/c1", "/hostjob/pods/p1/c1"),
        ("/kubepods/burstable/pod1/c1", "/kubepods/burstable/pod1/c1"),
        ("//a//./b/", "/a/b"),
        ("a:b:c", "/hostjob/a:b:c"),  # only --systemd-cgroup reads colons
    ],
)
def test_cgroupfs_paths(given: str, expected: str) -> None:
    assert resolve_path(given, "c1", systemd=False) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("system.slice:docker:abc", "/system.slice/docker-abc.scope"),
        (":crio:abc", "/system.slice/crio-abc.scope"),
        ("", "/system.slice/hostjob-c1.scope"),
        (
            "kubepods-besteffort-pod12.slice:cri-containerd:abc",
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice"
            "/cri-containerd-abc.scope",
        ),
        ("-.slice:p:n", "/p-n.scope"),
        ("user.slice::n", "/user.slice/n.scope"),
        ("machine.slice:x:vm.slice", "/machine.slice/vm.slice"),
    ],
)
def test_systemd_paths(given: str, expected: str) -> None:
    assert resolve_path(given, "c1", systemd=True) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("system.slice", "/system.slice"),
        ("a-b-c.slice", "/a.slice/a-b.slice/a-b-c.slice"),
        ("-.slice", "/"),
    ],
)
def test_expand_slice(name: str, expected: str) -> None:
    assert expand_slice(name) == expected


@pytest.mark.parametrize(
    "name", ["a--b.slice", "-a.slice", "a-.slice", "system", ".slice", "a/b.slice"]
)
def test_bad_slices(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid systemd slice"):
        expand_slice(name)


@pytest.mark.parametrize("given", ["a:b", "a:b:c:d", "system.slice:p:", "bad:p:n"])
def test_bad_systemd_paths(given: str) -> None:
    with pytest.raises(ConfigError, match=r"linux\.cgroupsPath"):
        resolve_path(given, "c1", systemd=True)


@pytest.mark.parametrize("given", ["/a/../b", "../escape", "/", "//.//"])
def test_paths_that_escape_or_hit_the_root(given: str) -> None:
    with pytest.raises(ConfigError, match=r"linux\.cgroupsPath"):
        resolve_path(given, "c1")


def test_open_manager_refuses_dotdot() -> None:
    mounts = parse_mountinfo("1 1 0:1 / /cg rw - cgroup2 cgroup2 rw\n")
    with pytest.raises(ConfigError, match=r"'\.\.'"):
        open_manager("/a/../../etc", mounts=mounts)
