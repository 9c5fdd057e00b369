"""``ps`` as a table: ps(1)'s own output, reduced to the job's processes (as runc does)."""

from __future__ import annotations

from hostjob.errors import HostjobError


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
    header = lines[0].split()
    if "PID" not in header:
        raise HostjobError("ps output has no PID column (pass options that show it)")
    column = header.index("PID")
    wanted = {str(pid) for pid in pids}
    rows = [
        line for line in lines[1:] if len(line.split()) > column and line.split()[column] in wanted
    ]
    return "\n".join([lines[0], *rows]) + "\n"
