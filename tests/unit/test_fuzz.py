"""The fuzz targets (tests/fuzz) in CI.

* every target under hypothesis (150 inputs each; 3000 with --long);
* the regression inputs the fuzzers found (tests/fuzz/regressions/<target>-<what>;
  those of the CLI targets, which need root, replay in tests/integration/test_fuzz_cli.py);
* the runner, ``python -m tests.fuzz all``, coverage-guided with atheris when it can be
  imported (else hypothesis): 500 inputs per target (60 s per target with --long).

A target passes an input when it succeeds or raises a HostjobError with a one-line
message, without a hang or a write outside its sandbox; see tests/fuzz/README.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.cli import CLI_TARGETS
from tests.fuzz.targets import TARGETS, seeds

REPO = Path(__file__).resolve().parents[2]
REGRESSIONS = REPO / "tests" / "fuzz" / "regressions"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target_under_hypothesis(name: str, request: pytest.FixtureRequest) -> None:
    examples = 3000 if request.config.getoption("--long") else 150
    target = TARGETS[name]

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(seeds(name)) | st.binary(max_size=2048))
    def fuzz(data: bytes) -> None:
        target(data)

    fuzz()


def regressions(targets: dict[str, object]) -> list[Path]:
    """The regression inputs of ``targets`` (a file's name starts with its target's)."""
    return sorted(p for p in REGRESSIONS.iterdir() if p.name.split("-")[0] in targets)


@pytest.mark.parametrize("path", regressions(TARGETS), ids=lambda p: p.name)
def test_regression_input(path: Path) -> None:
    TARGETS[path.name.split("-")[0]](path.read_bytes())


def test_every_regression_input_has_its_target() -> None:
    """None is skipped unseen: each belongs to a target here or to a CLI one."""
    known = {**TARGETS, **CLI_TARGETS}
    assert [p.name for p in REGRESSIONS.iterdir() if p.name.split("-")[0] not in known] == []


def test_runner(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    budget = ["--seconds", "60"] if request.config.getoption("--long") else ["--runs", "500"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "src")])}
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz", "all", *budget],
        cwd=tmp_path,  # atheris writes crash-* files here
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    rows = [line.split() for line in done.stdout.splitlines()[1:] if line.strip()]
    assert {row[0] for row in rows} == set(TARGETS)
    for row in rows:
        assert row[-1] == "ok" and re.fullmatch(r"\d+", row[2]), row
        assert int(row[2]) >= (1 if "--seconds" in budget else 500), row


def test_the_sandbox_is_in_the_sessions_temp_dir_and_goes_with_it() -> None:
    """A session killed before its end leaves no sandbox in /tmp: it is made in the
    session's own temp dir, and removed when the session ends, not at exit."""
    from tests.fuzz import targets

    box = targets.sandbox()
    assert box.base.startswith(os.environ[targets.SANDBOX_DIR_VARIABLE] + os.sep)
    targets.close_sandbox()
    assert not os.path.exists(box.base)
    assert targets.sandbox().base != box.base  # made again for the next target
