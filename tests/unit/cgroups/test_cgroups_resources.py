"""runc's v1 <-> v2 conversions, validation, controller requirements, ignored fields."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostjob.cgroups import resources as r
from hostjob.errors import ConfigError
from hostjob.spec.resources import Resources


def res(data: dict[str, object]) -> Resources:
    decoded: Resources = Resources.decode(data)
    return decoded


@pytest.mark.parametrize(
    ("shares", "weight"),
    [(0, 0), (1, 1), (2, 1), (1024, 39), (102400, 3906), (262144, 10000), (10**6, 10000)],
)
def test_shares_to_weight(shares: int, weight: int) -> None:
    # Values from runc's TestConvertCPUSharesToCgroupV2Value (and clamped out-of-range).
    assert r.cpu_shares_to_weight(shares) == weight


@given(st.integers(min_value=2, max_value=262144))
def test_shares_to_weight_is_monotonic_and_in_range(shares: int) -> None:
    w = r.cpu_shares_to_weight(shares)
    assert 1 <= w <= 10000
    assert r.cpu_shares_to_weight(shares + 1) >= w


@pytest.mark.parametrize(("blkio", "io"), [(0, 0), (10, 1), (500, 4950), (1000, 10000), (5, 1)])
def test_blkio_weight_to_io_weight(blkio: int, io: int) -> None:
    assert r.blkio_weight_to_io_weight(blkio) == io


@pytest.mark.parametrize(
    ("swap", "memory", "expected"),
    [
        # runc's TestConvertMemorySwapToCgroupV2Value cases
        (0, 0, 0),
        (-1, 0, -1),
        (-1, -1, -1),
        (0, -1, -1),
        (-1, 1000, -1),
        (1000, -1, 1000),
        (2000, 1000, 1000),
        (1000, 1000, 0),
    ],
)
def test_memory_swap_to_v2(swap: int, memory: int, expected: int) -> None:
    assert r.memory_swap_to_v2(swap, memory) == expected


@pytest.mark.parametrize(
    ("swap", "memory", "message"),
    [(1000, 0, "needs a memory limit"), (500, 1000, "lower than the memory limit")],
)
def test_memory_swap_to_v2_errors(swap: int, memory: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        r.memory_swap_to_v2(swap, memory)


def test_num_to_str() -> None:
    assert [r.num_to_str(v) for v in (0, -1, 4096)] == ["", "max", "4096"]


def test_hugepage_sizes_and_names(tmp_path: object) -> None:
    import pathlib

    base = pathlib.Path(str(tmp_path))
    for name in (
        "hugepages-2048kB",
        "hugepages-1048576kB",
        "hugepages-64kB",
        "junk",
        "hugepages-xkB",
    ):
        (base / name).mkdir()
    assert r.hugepage_sizes(str(base)) == ["64KB", "2MB", "1GB"]
    assert r.page_size_name(32768) == "32MB"


@pytest.mark.parametrize(
    ("data", "version", "message"),
    [
        ({"memory": {"limit": -2}}, 1, r"memory\.limit: -2 is not a limit"),
        ({"memory": {"limit": 200, "swap": 100}}, 2, r"memory\.swap: memory\+swap limit 100"),
        ({"memory": {"swappiness": 101}}, 1, r"swappiness: 101 is out of range"),
        ({"cpu": {"idle": 2}}, 2, r"cpu\.idle"),
        ({"cpu": {"quota": -5}}, 1, r"cpu\.quota"),
        ({"cpu": {"realtimeRuntime": 1000}}, 2, "not supported on cgroup v2"),
        ({"hugepageLimits": [{"pageSize": "3MB", "limit": 1}]}, 2, r"hugepageLimits\[0\]"),
        ({"unified": {"memory.max": "1"}}, 1, "cannot be set on this cgroup v1 host"),
        ({"unified": {"../etc/passwd": "x"}}, 2, "not a cgroup file name"),
        ({"unified": {"memory.max/x": "x"}}, 2, "not a cgroup file name"),
        ({"unified": {"nodot": "x"}}, 2, "not a cgroup file name"),
    ],
)
def test_validate_refuses(data: dict[str, object], version: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        r.validate(res(data), version)


def test_validate_accepts_a_full_config() -> None:
    full = res(
        {
            "memory": {"limit": 1 << 30, "swap": 2 << 30, "reservation": 1 << 29},
            "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0", "mems": "0"},
            "pids": {"limit": 100},
            "unified": {"memory.high": "max"},
        }
    )
    r.validate(full, 2)


def test_requirements_name_controller_and_field() -> None:
    need = r.requirements(
        res(
            {
                "memory": {"limit": 1, "swappiness": 0},
                "cpu": {"shares": 2, "cpus": "0"},
                "pids": {"limit": 5},
                "blockIO": {"weight": 100},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 0}],
                "unified": {"misc.max": "x 1"},
            }
        ),
        2,
    )
    assert need == [
        ("memory", "linux.resources.memory.limit"),
        ("cpu", "linux.resources.cpu.shares"),
        ("cpuset", "linux.resources.cpu.cpus"),
        ("pids", "linux.resources.pids.limit"),
        ("io", "linux.resources.blockIO.weight"),
        ("hugetlb", "linux.resources.hugepageLimits"),
        ("misc", "linux.resources.unified.misc.max"),
    ]
    v1 = r.requirements(res({"memory": {"swappiness": 0}, "blockIO": {"weight": 1}}), 1)
    assert v1 == [
        ("memory", "linux.resources.memory.swappiness"),
        ("blkio", "linux.resources.blockIO.weight"),
    ]


def test_unset_values_need_nothing() -> None:
    assert r.requirements(res({"memory": {"limit": 0}, "pids": {"limit": -1}, "cpu": {}}), 1) == []


def test_ignored_fields_each_get_a_line() -> None:
    lines = r.ignored(
        res(
            {
                "memory": {
                    "kernel": 1,
                    "kernelTCP": 1,
                    "swappiness": 10,
                    "disableOOMKiller": True,
                },
                "blockIO": {"leafWeight": 10},
                "network": {"classID": 1},
                "rdma": {"mlx": {}},
            }
        ),
        2,
    )
    assert [line.split(" ", 1)[0] for line in lines] == [
        "linux.resources.memory.kernel",
        "linux.resources.memory.kernelTCP",
        "linux.resources.memory.swappiness",
        "linux.resources.memory.disableOOMKiller",
        "linux.resources.blockIO",
        "linux.resources.network",
        "linux.resources.rdma",
    ]
    assert r.ignored(res({"memory": {"kernelTCP": 1, "swappiness": 1}}), 1) == []
