"""``ps``: the processes of a container's job, as a table: ps(1)'s own output, reduced to
the job's processes (as runc does). Their pids alone are ``Handle.pids``.

A row is the job's when the value in ps's PID column is one of the job's pids. That value
is read where the column is -- ps right-aligns a number under its header -- not as the
n-th word of the row: a process may give itself a name with spaces and digits in it
(``prctl(PR_SET_NAME)``), which would shift the words of its row and put a job's pid
where the PID column was.
"""

from __future__ import annotations

from hostjob.errors import HostjobError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.handle import Handle


def ps(container: Handle, ps_args: list[str]) -> str:
    """The rows of ``ps ps_args`` that are the job's processes, under ps's header."""
    return ps_table(container.pids(), ps_args)


def ps_table(pids: list[int], ps_args: list[str]) -> str:
    import subprocess

    try:
        result = subprocess.run(["ps", *ps_args], capture_output=True, text=True, check=False)
    except OSError as err:
        raise HostjobError(f"cannot run ps: {err.strerror}") from err
    if result.returncode != 0:
        raise HostjobError(f"ps {' '.join(ps_args)} failed: {result.stderr.strip()}")
    lines = result.stdout.splitlines()
    if not lines:
        return ""
    end = pid_column_end(lines[0])
    wanted = {str(pid) for pid in pids}
    rows = [line for line in lines[1:] if pid_at(line, end) in wanted]
    return "\n".join([lines[0], *rows]) + "\n"


def pid_column_end(header: str) -> int:
    """Where the PID column ends in ps's header line (its numbers end there too)."""
    start = 0
    for word in header.split():
        start = header.index(word, start)
        if word == "PID":
            return start + len(word)
        start += len(word)
    raise HostjobError("ps output has no PID column (pass options that show it)")


def pid_at(row: str, end: int) -> str | None:
    """The number that ends at ``end`` in ``row`` (a right-aligned PID), if one does."""
    if len(row) < end or (len(row) > end and row[end] != " "):
        return None
    start = end
    while start > 0 and row[start - 1].isdigit():
        start -= 1
    if start == end or (start > 0 and row[start - 1] != " "):
        return None
    return row[start:end]
