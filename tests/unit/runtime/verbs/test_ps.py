"""The ps table's rows: the job's by the value in ps's PID column, read where the column
is, never as the n-th word of a row (a process names itself as it likes)."""

from __future__ import annotations

import subprocess

import pytest

from hostjob.errors import HostjobError
from hostjob.runtime.verbs.ps import pid_at, pid_column_end, ps
from tests.unit.runtime.verbs.conftest import MakeHandle

# ps -o comm,pid,ppid: a stranger named "z 4242" (comm may hold spaces and digits)
TABLE = [
    "COMMAND           PID  PPID",
    "sleep            4242     1",
    "z 4242           5678     1",
    "4242             9999  4242",
    "sh               4243  4242",
]


def test_rows_are_read_by_the_columns_position() -> None:
    end = pid_column_end(TABLE[0])
    assert [pid_at(row, end) for row in TABLE[1:]] == ["4242", "5678", "9999", "4243"]


def test_the_naive_split_is_what_a_hostile_name_fools() -> None:
    """What the table did before: the second word of the stranger's row is 4242."""
    column = TABLE[0].split().index("PID")
    assert TABLE[2].split()[column] == "4242"


@pytest.mark.parametrize(
    ("header", "row", "pid"),
    [
        (
            "UID          PID    PPID  C STIME TTY          TIME CMD",
            "root           1       0  0 00:50 ?        00:00:13 /init",
            "1",
        ),
        ("USER         PID %CPU %MEM", "root      123456  0.0  0.1", "123456"),
        ("  PID TTY          TIME CMD", "   77 pts/0    00:00:00 sh", "77"),
        ("  PID TTY", "   x7 pts/0", None),  # not a number where the column is
        ("  PID TTY", "    7", "7"),
        ("  PID TTY", "  7", None),  # short of the column
    ],
)
def test_ps_layouts(header: str, row: str, pid: str | None) -> None:
    assert pid_at(row, pid_column_end(header)) == pid


def test_a_table_without_a_pid_column_is_refused() -> None:
    with pytest.raises(HostjobError, match="no PID column"):
        pid_column_end("COMMAND  PPID")
    assert pid_column_end("  PPID   PID") == 12  # PPID is not PID


def test_a_job_whose_cgroup_hostjob_did_not_make_lists_no_process(
    make_handle: MakeHandle, sleeper: subprocess.Popen[bytes]
) -> None:
    """Only a cgroup hostjob made for the container is read for its pids: the header alone."""
    container = make_handle(sleeper.pid, fifo=True)
    table = ps(container, ["-o", "pid,comm"]).splitlines()
    assert len(table) == 1 and table[0].split() == ["PID", "COMMAND"]
