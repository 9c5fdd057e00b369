"""A process outside a job cannot get its row into the job's ``hostjob ps`` table.

ps's rows were picked by the n-th word of each row; a process may name itself as it likes
(``prctl(PR_SET_NAME)``, up to 15 bytes, spaces and digits included), so a stranger named
``z <job pid>`` had the job's pid where the PID column was, with ``-o comm,pid``. The table
now reads the PID column where ps puts it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import Hostjob, base_config, new_id


def test_a_stranger_named_like_a_job_pid_stays_out(hj: Hostjob, bundle) -> None:
    cid = new_id()
    hj.ok("run", "-d", "-b", str(bundle(base_config("sleep", "300"))), cid)
    (job_pid,) = json.loads(hj.ok("ps", "--format", "json", cid))
    name = f"z {job_pid}"
    assert len(name) <= 15
    code = (
        "import ctypes, sys, time\n"
        "ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"  # PR_SET_NAME
        "print('ready', flush=True); time.sleep(60)\n"
    )
    stranger = subprocess.Popen(
        [sys.executable, "-c", code, name], stdout=subprocess.PIPE, text=True
    )
    try:
        assert stranger.stdout is not None and stranger.stdout.readline() == "ready\n"
        # what the table used to do: the stranger's row has the job's pid as its 2nd word
        ps = subprocess.run(["ps", "-e", "-o", "comm,pid"], capture_output=True, text=True).stdout
        rows = ps.splitlines()
        column = rows[0].split().index("PID")
        naive = [
            r for r in rows[1:] if len(r.split()) > column and r.split()[column] == str(job_pid)
        ]
        assert any(r.startswith("z ") for r in naive), naive
        table = hj.ok("ps", cid, "-e", "-o", "comm,pid").splitlines()
        assert table[0].split() == ["COMMAND", "PID"]
        assert [r.split()[-1] for r in table[1:]] == [str(job_pid)]
        assert not any(r.startswith("z ") for r in table)
    finally:
        stranger.kill()
        stranger.wait()
    hj.ok("delete", "--force", cid)
