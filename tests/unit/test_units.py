"""hostjob.units: sizes, durations and RFC 3339 times as hostjob reads and writes them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from hostjob.errors import InvalidArgument
from hostjob.units import (
    human_size,
    parse_duration,
    parse_rfc3339,
    parse_size,
    rfc3339,
    rfc3339_nano,
)


@contextmanager
def zone(tz: str) -> Iterator[None]:
    """Run in the time zone ``tz`` (POSIX TZ syntax)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_human_size_si() -> None:
    assert human_size(None) == "-"
    assert human_size(0) == "0 B"
    assert human_size(999) == "999 B"
    assert human_size(1000) == "1.0 kB"
    assert human_size(3_000_000) == "3.0 MB"
    assert human_size(5_600_000) == "5.6 MB"
    assert human_size(123_456_789) == "123 MB"
    assert human_size(3 * 10**15) == "3000 TB"


def test_human_size_binary() -> None:
    assert human_size(None, binary=True) == "-"
    assert human_size(512, binary=True) == "512B"
    assert human_size(1536, binary=True) == "1.5KiB"
    assert human_size(64 << 20, binary=True) == "64.0MiB"
    assert human_size(5 << 40, binary=True) == "5.0TiB"
    assert human_size(5 << 50, binary=True) == "5120.0TiB"


def test_parse_size() -> None:
    assert parse_size("1024") == 1024
    assert parse_size("512k") == 512 << 10
    assert parse_size("64m") == 64 << 20
    assert parse_size("1.5G") == 3 << 29
    assert parse_size("2GB") == 2 << 30
    for bad in ("", "x", "12q", "-1m"):
        with pytest.raises(InvalidArgument):
            parse_size(bad)


def test_parse_duration() -> None:
    assert parse_duration("5") == 5.0
    assert parse_duration("1m30s") == 90.0
    assert parse_duration("250ms") == pytest.approx(0.25)
    assert parse_duration("2h") == 7200.0
    for bad in ("", "s", "5x", "1m30"):
        with pytest.raises(InvalidArgument):
            parse_duration(bad)


def test_rfc3339_utc_and_local() -> None:
    with zone("XYZ-02:00"):  # two hours ahead of UTC, no DST
        assert rfc3339(0) == "1970-01-01T00:00:00Z"
        assert rfc3339(86400 + 3661.9) == "1970-01-02T01:01:01Z"
        assert rfc3339(0, local=True) == "1970-01-01T02:00:00+02:00"
        assert parse_rfc3339(rfc3339(local=True)) == pytest.approx(time.time(), abs=5)
    with zone("ABC+05:30"):
        assert rfc3339(0, local=True) == "1969-12-31T18:30:00-05:30"
    with zone("UTC"):
        assert rfc3339(0, local=True) == "1970-01-01T00:00:00Z"


def test_rfc3339_nano() -> None:
    assert rfc3339_nano(0) == "1970-01-01T00:00:00.000000000Z"
    assert rfc3339_nano(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"
    now = rfc3339_nano()
    assert len(now) == 30 and now.endswith("Z")


def test_parse_rfc3339() -> None:
    assert parse_rfc3339("1970-01-01T00:00:00Z") == 0
    assert parse_rfc3339("1970-01-01T01:00:00.123456789+01:00") == 0
    assert parse_rfc3339("1970-01-01T00:00:00-00:30") == 1800
    assert parse_rfc3339("2024-02-29T12:00:00Z") == 1709208000
    assert parse_rfc3339("2023-11-14T22:13:20.5Z") == 1_700_000_000
    assert parse_rfc3339("1970-01-01T00:00:00") == 0  # no zone: UTC
    for bad in (
        None,
        "",
        "yesterday",
        "2023-02-29T00:00:00Z",  # no such day
        "2023-13-01T00:00:00Z",
        "2023-01-01T24:00:00Z",
        "2023-01-01T00:00:00+1:00",
        "2023-01-01T00:00:00+aa:00",
        "2023-01-01T00:00:00+\u00b2\u00b2:00",  # an image's created: isdigit() but not int()
        "+023-01-01T00:00:00Z",
        "2023-01-01X00:00:00Z",
        "\uff12\uff10\uff12\uff13-01-01T00:00:00Z",  # fullwidth digits
    ):
        assert parse_rfc3339(bad) is None, bad


def test_rfc3339_round_trips() -> None:
    for epoch in (0, 951_782_400, 1_700_000_000, 4_102_444_800, 253_402_300_799):
        assert parse_rfc3339(rfc3339(epoch)) == epoch


def test_parse_rfc3339_ns_keeps_the_fraction() -> None:
    from hostjob.units import parse_rfc3339_ns

    base = 1_764_583_200 * 10**9  # 2025-12-01T10:00:00Z
    assert parse_rfc3339_ns("2025-12-01T10:00:00Z") == base
    assert parse_rfc3339_ns("2025-12-01T10:00:00.5Z") == base + 500_000_000
    assert parse_rfc3339_ns("2025-12-01T10:00:00.123456789Z") == base + 123_456_789
    assert parse_rfc3339_ns("2025-12-01T10:00:00.1234567891Z") == base + 123_456_789
    assert parse_rfc3339_ns("2025-12-01T11:00:00.25+01:00") == base + 250_000_000
    assert parse_rfc3339_ns("2025-12-01T10:00:00.5") == base + 500_000_000  # no zone: UTC
    for bad in ("2025-12-01T10:00:00.Z", "2025-12-01T10:00:00+1", "yesterday", "", None):
        assert parse_rfc3339_ns(bad) is None
    assert parse_rfc3339("2025-12-01T10:00:00.9Z") == base / 10**9  # the fraction dropped


def test_parse_since() -> None:
    from hostjob.units import parse_since

    now = 1_764_583_200 * 10**9
    assert parse_since("10m", now) == now - 600 * 10**9
    assert parse_since("1h30m", now) == now - 5400 * 10**9
    assert parse_since("250ms", now) == now - 250_000_000
    assert parse_since("2025-12-01T09:00:00Z", now) == now - 3600 * 10**9
    assert parse_since("2025-12-01T10:00:00.5+00:00", now) == now + 500_000_000
    assert parse_since("1764583200", now) == now  # a bare number is a Unix time
    assert parse_since("1764583200.25", now) == now + 250_000_000
    for bad in ("soon", "10x", "-5m", "", "1.2.3", "1.5.2s"):
        with pytest.raises(InvalidArgument):
            parse_since(bad, now)
