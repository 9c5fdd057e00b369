"""windows.resources -> linux.resources, as hcsshim maps them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostjob import log
from hostjob.cgroups.resources import cpu_shares_to_weight
from hostjob.errors import ConfigError
from hostjob.spec.windows import WindowsResources
from hostjob.specconv.convert import cpu_weight_to_shares, from_windows


@given(st.integers(min_value=1, max_value=10000))
def test_weight_to_shares_round_trips_through_the_v2_conversion(weight: int) -> None:
    shares = cpu_weight_to_shares(weight)
    assert 2 <= shares <= 262144
    assert cpu_shares_to_weight(shares) == weight


def win(data: dict[str, object]) -> WindowsResources:
    decoded: WindowsResources = WindowsResources.decode(data)
    return decoded


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(log, "warning", seen.append)
    return seen


def test_count_is_a_quota_of_count_cpus() -> None:
    out = from_windows(win({"cpu": {"count": 2}}), host_cpus=8, io_device=None)
    assert out.cpu is not None
    # 2 of 8 CPUs = a quarter of the machine = 2 CPUs' worth of each 100 ms period.
    assert (out.cpu.quota, out.cpu.period, out.cpu.shares) == (200000, 100000, None)


def test_count_is_clamped_to_the_host(warnings: list[str]) -> None:
    out = from_windows(win({"cpu": {"count": 16}}), host_cpus=2, io_device=None)
    assert out.cpu is not None and out.cpu.quota == 200000
    assert "using 2" in warnings[0]


@pytest.mark.parametrize(
    ("maximum", "host", "quota"),
    [(5000, 2, 100000), (10000, 4, 400000), (2500, 8, 200000), (1, 1, 1000), (125, 8, 10000)],
)
def test_maximum_is_hundredths_of_a_percent_of_the_machine(
    maximum: int, host: int, quota: int
) -> None:
    out = from_windows(win({"cpu": {"maximum": maximum}}), host_cpus=host, io_device=None)
    assert out.cpu is not None and (out.cpu.quota, out.cpu.period) == (quota, 100000)


def test_maximum_out_of_range() -> None:
    with pytest.raises(ConfigError, match=r"windows\.resources\.cpu\.maximum: 10001"):
        from_windows(win({"cpu": {"maximum": 10001}}), host_cpus=2, io_device=None)


@pytest.mark.parametrize("shares", [1, 100, 5000, 10000])
def test_shares_become_the_same_v2_weight(shares: int) -> None:
    out = from_windows(win({"cpu": {"shares": shares}}), host_cpus=2, io_device=None)
    assert out.cpu is not None and out.cpu.shares is not None
    assert out.cpu.quota is None
    assert cpu_shares_to_weight(out.cpu.shares) == shares


@pytest.mark.parametrize(
    "cpu", [{"count": 1, "maximum": 10}, {"count": 1, "shares": 5}, {"maximum": 1, "shares": 1}]
)
def test_cpu_settings_are_mutually_exclusive(cpu: dict[str, int]) -> None:
    with pytest.raises(ConfigError, match="mutually exclusive"):
        from_windows(win({"cpu": cpu}), host_cpus=2, io_device=None)


def test_zero_means_unset() -> None:
    out = from_windows(win({"cpu": {"count": 0, "shares": 0}}), host_cpus=2, io_device=None)
    assert out.cpu is None


def test_memory_limit() -> None:
    out = from_windows(win({"memory": {"limit": 1 << 30}}), host_cpus=2, io_device=None)
    assert out.memory is not None and out.memory.limit == 1 << 30


def test_storage_throttles_the_writable_layer_device() -> None:
    out = from_windows(
        win({"storage": {"iops": 500, "bps": 1 << 20}}), host_cpus=2, io_device=(8, 16)
    )
    b = out.block_io
    assert b is not None
    for devices, rate in (
        (b.throttle_read_iops_device, 500),
        (b.throttle_write_iops_device, 500),
        (b.throttle_read_bps_device, 1 << 20),
        (b.throttle_write_bps_device, 1 << 20),
    ):
        assert devices is not None
        assert [(t.major, t.minor, t.rate) for t in devices] == [(8, 16, rate)]


def test_storage_without_a_block_device_warns(warnings: list[str]) -> None:
    out = from_windows(
        win({"storage": {"iops": 5, "sandboxSize": 10}}), host_cpus=2, io_device=None
    )
    assert out.block_io is None
    assert len(warnings) == 2 and "storage is ignored" in warnings[0]


def test_result_is_a_valid_wire_config() -> None:
    out = from_windows(
        win({"cpu": {"count": 1}, "memory": {"limit": 4096}}), host_cpus=2, io_device=None
    )
    assert out.to_json() == {"cpu": {"quota": 100000, "period": 100000}, "memory": {"limit": 4096}}
