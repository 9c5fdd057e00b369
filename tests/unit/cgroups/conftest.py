"""Fixtures for the cgroup unit tests: fake cgroupfs trees, real sleeping processes."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hostjob import log
from hostjob.cgroups import _manager
from tests.unit.cgroups.fakefs import FakeCgroup1, FakeCgroup2


@pytest.fixture
def fake2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeCgroup2:
    fake = FakeCgroup2(tmp_path / "cgroup2")
    fake.install(monkeypatch)
    return fake


@pytest.fixture
def fake1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeCgroup1:
    fake = FakeCgroup1(tmp_path / "cgroup1")
    fake.install(monkeypatch)
    return fake


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hostjob.log warnings emitted during the test."""
    seen: list[str] = []
    monkeypatch.setattr(_manager, "_warned", set())
    monkeypatch.setattr(log, "warning", seen.append)
    return seen


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start real processes (default: ``sleep 60``); all are killed at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(list(argv) or ["sleep", "60"])
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
