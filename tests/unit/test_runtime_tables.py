"""The runtime's own tables (``stats``; ``list`` is shown on real containers in
tests/security/test_runtime_terminal.py): every cell escaped as an error line is."""

from __future__ import annotations

from typing import Any

from hostjob.cli.commands.stats import table
from tests.fixtures.terminal import assert_no_controls

HOSTILE = "job\x1b]0;owned\x07\u009b31m\nfake-row"


def info(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "job1",
        "status": "running",
        "cpuPercent": 1.5,
        "cpuSeconds": 0.25,
        "memory": {"usage": 1 << 20, "limit": None, "peak": 2 << 20},
        "pids": {"current": 1, "limit": None},
        "io": {"read": 0, "write": 0},
        "oomKills": 0,
        "uptimeSeconds": 61,
    }
    return {**base, **overrides}


def test_stats_cells_are_escaped() -> None:
    text = table([info(id=HOSTILE, status=HOSTILE), info()])
    assert_no_controls(text, what="stats table")
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[1].startswith("job\\x1b]0;owned\\x07\\x9b31m\\nfake-row")


def test_plain_cells_are_unchanged() -> None:
    lines = table([info()]).splitlines()
    assert lines[1].split() == [
        "job1", "running", "1.5%", "0.25s", "1.0MiB", "/", "no", "limit", "2.0MiB",
        "1", "/", "no", "limit", "0B", "/", "0B", "0", "1m1s",
    ]  # fmt: skip
