"""The fuzz targets that drive the CLI (``tests/fuzz/cli.py``): a mutated config.json
through ``create``/``state`` and ``run``, each then ``delete --force``d -- a one-line
error or a container that leaves nothing behind. Under hypothesis, bounded (``--long``
or ``HOSTJOB_EXAMPLES=N`` for more), and every regression input they found
(``tests/fuzz/regressions/<target>-<what>``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.cli import CLI_TARGETS
from tests.fuzz.targets import seeds
from tests.helpers import example_count

REGRESSIONS = Path(__file__).resolve().parents[1] / "fuzz" / "regressions"


@pytest.mark.parametrize("name", sorted(CLI_TARGETS))
def test_cli_target_under_hypothesis(name: str, request: pytest.FixtureRequest) -> None:
    target = CLI_TARGETS[name]

    @settings(
        max_examples=example_count(request, 40),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(seeds(name)) | st.binary(max_size=64))
    def fuzz(data: bytes) -> None:
        target(data)

    fuzz()


@pytest.mark.parametrize(
    "path",
    sorted(p for p in REGRESSIONS.iterdir() if p.name.split("-")[0] in CLI_TARGETS),
    ids=lambda p: p.name,
)
def test_cli_regression_input(path: Path) -> None:
    CLI_TARGETS[path.name.split("-")[0]](path.read_bytes())
