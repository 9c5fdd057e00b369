"""The systemd cgroup driver's pure parts, without systemd: the unit a path names, the
limits as unit properties (and what is left for the cgroup's files), when the driver can
be used. The driver itself runs against a real systemd in the VM lane
(tests/integration/test_systemd_cgroup.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostjob.cgroups import resolve_path, systemd
from hostjob.errors import CgroupError, ConfigError
from hostjob.spec.resources import Resources


def res(data: dict) -> Resources:  # type: ignore[type-arg]
    resources: Resources = Resources.decode(data, "resources")
    return resources


def test_the_unit_and_slice_of_a_path() -> None:
    path = resolve_path("kubepods-burstable.slice:cri-containerd:abc", "c1", systemd=True)
    assert path == "/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope"
    assert systemd.unit_of(path) == ("kubepods-burstable.slice", "cri-containerd-abc.scope")
    assert systemd.unit_of(resolve_path("", "t1", systemd=True)) == (
        "system.slice",
        "hostjob-t1.scope",
    )
    assert systemd.unit_of("/x.scope") == ("-.slice", "x.scope")
    with pytest.raises(CgroupError):
        systemd.unit_of("/hostjob/t1")


def test_limits_systemd_knows_become_properties() -> None:
    props, rest = systemd.split(
        res(
            {
                "memory": {"limit": 1 << 30, "reservation": 1 << 20, "swap": 2 << 30},
                "pids": {"limit": 64},
                "cpu": {"shares": 2048, "quota": 50000, "period": 100000, "cpus": "0-2,5"},
                "blockIO": {
                    "weight": 500,
                    "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1048576}],
                    "weightDevice": [{"major": 8, "minor": 16, "weight": 100}],
                },
            }
        )
    )
    assert dict(props) == {
        "MemoryMax": ("t", 1 << 30),
        "MemoryLow": ("t", 1 << 20),
        "MemorySwapMax": ("t", 1 << 30),  # memory+swap 2 GiB, memory 1 GiB
        "TasksMax": ("t", 64),
        "CPUWeight": ("t", 79),  # runc's shares -> weight
        "CPUQuotaPerSecUSec": ("t", 500_000),  # half a CPU
        "CPUQuotaPeriodUSec": ("t", 100_000),
        "AllowedCPUs": ("ay", bytes([0b100111])),
        "IOWeight": ("t", 4950),  # runc's blkio weight -> io weight
        "IOReadBandwidthMax": ("a(st)", [("/dev/block/8:0", 1048576)]),
        "IODeviceWeight": ("a(st)", [("/dev/block/8:16", 100)]),
    }
    assert rest is not None and rest.to_json() == {}  # nothing left for the files


def test_what_systemd_has_no_property_for_is_left_for_the_files() -> None:
    props, rest = systemd.split(
        res(
            {
                "memory": {"limit": -1},
                "pids": {"limit": 0},
                "cpu": {"quota": -1, "idle": 1, "shares": 1024},
                "unified": {"memory.high": "1G"},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 1 << 21}],
            }
        )
    )
    assert dict(props) == {
        "MemoryMax": ("t", systemd.INFINITY),
        "MemorySwapMax": ("t", systemd.INFINITY),  # no memory limit lifts swap's
        "TasksMax": ("t", systemd.INFINITY),
        "CPUQuotaPerSecUSec": ("t", systemd.INFINITY),
    }
    assert rest is not None
    assert rest.to_json() == {
        "cpu": {"idle": 1, "shares": 1024},  # an idle cgroup has no weight: the files'
        "unified": {"memory.high": "1G"},
        "hugepageLimits": [{"pageSize": "2MB", "limit": 1 << 21}],
    }
    assert systemd.split(None) == ([], None)


def test_a_bad_swap_or_cpu_list_is_refused() -> None:
    with pytest.raises(ConfigError):
        systemd.split(res({"memory": {"swap": 1 << 20}}))  # swap without a memory limit
    with pytest.raises(CgroupError):
        systemd.split(res({"cpu": {"mems": "0-x"}}))


def test_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(systemd, "booted", lambda: False)
    assert systemd.unavailable(2) == "systemd is not running this host"
    monkeypatch.setattr(systemd, "booted", lambda: True)
    assert "unified cgroup hierarchy" in (systemd.unavailable(1) or "")
    assert systemd.unavailable(2) is None


def test_the_journal_is_the_stream_journal_stream_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A service's warning about its journal is due only where its output is the journal:
    systemd names that stream in $JOURNAL_STREAM as device:inode."""
    read_end, write_end = os.pipe()
    other = os.open(tmp_path / "file", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        st = os.fstat(write_end)
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        assert systemd.writes_to_journal((other, write_end))
        assert not systemd.writes_to_journal((other,))
        assert not systemd.writes_to_journal((999,))  # a closed fd is no stream
        for broken in ("", "12", "a:b", f"{st.st_dev}:"):
            monkeypatch.setenv("JOURNAL_STREAM", broken)
            assert not systemd.writes_to_journal((write_end,))
        monkeypatch.delenv("JOURNAL_STREAM")
        assert not systemd.writes_to_journal((write_end,))
    finally:
        for fd in (read_end, write_end, other):
            os.close(fd)


@pytest.mark.parametrize("cpus", ["0-²", "³", "0-99999999", "5-2", "a", "1-"])
def test_a_cpu_list_that_is_none_is_refused(cpus: str) -> None:
    """AllowedCPUs is a bit mask: a list that names no CPUs, or more than any kernel
    has, is an error, never a crash or a mask of a hundred million bits."""
    with pytest.raises(CgroupError, match="invalid CPU or memory-node list"):
        systemd.split(res({"cpu": {"cpus": cpus}}))
