"""``generate systemd`` publishes no ``--env`` value.

A unit file is readable by every user (0644 in ``/etc/systemd/system``), ``systemctl
show`` prints its command lines to anyone, and the ``hostjob run`` it starts keeps its
arguments in ``/proc/PID/cmdline`` for the job's whole life. A unit with ``-e
API_TOKEN=...`` in ``ExecStart`` gave the token to user ``nobody`` -- shown first with
such a command line as a running process. Now the values are in a file only root reads
(``<store>/units/<name>.env``, 0600): the unit names the file, ``nobody`` reads neither
it nor the token in the unit or in the running ``hostjob run``'s command line, and the
job still gets its environment (the control).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers import Hostjob, hostjob_env, new_id

TOKEN = "API_TOKEN=hunter2-of-the-unit"
Nobody = Callable[..., subprocess.CompletedProcess[str]]


def exec_start(unit: str) -> list[str]:
    """The unit's ``ExecStart`` as the words systemd runs (``$$`` and ``%%`` undone)."""
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.split("=", 1)[1].replace("$$", "$").replace("%%", "%"))


def test_a_generated_unit_keeps_the_environment_in_a_root_only_file(
    hj_open: Hostjob, busybox_image: str, run_d: tuple[str, ...], open_tmp: Path, as_nobody: Nobody
) -> None:
    # Where nothing stops it: a long-lived process's arguments are every user's to read.
    exposed = subprocess.Popen(["sh", "-c", "sleep 60; :", "hostjob", "-e", TOKEN])
    try:
        time.sleep(0.2)
        assert TOKEN in as_nobody('tr "\\0" " " < /proc/$1/cmdline', "sh", str(exposed.pid)).stdout
    finally:
        exposed.kill()
        exposed.wait()

    name = new_id("u")
    env_file = open_tmp / "app.env"
    env_file.write_text("FROM_FILE=from-the-file\n")
    script = 'echo "$API_TOKEN $FROM_FILE"; exec sleep 600'
    hj_open.ok(
        *run_d, "--name", name, "-e", TOKEN, "--env-file", str(env_file), busybox_image,
        "sh", "-c", script,
    )  # fmt: skip
    unit = hj_open.ok("generate", "systemd", name)
    assert "hunter2" not in unit and "from-the-file" not in unit
    words = exec_start(unit)
    kept = Path(words[words.index("--env-file") + 1])
    assert kept == open_tmp / "store" / "units" / f"{name}.env"
    assert kept.read_text() == f"FROM_FILE=from-the-file\n{TOKEN}\n"
    assert as_nobody('cat "$1"', "sh", str(kept)).returncode != 0
    hj_open.ok("delete", "--force", name)

    # What systemd runs: the same container, its environment from the file, and the
    # running hostjob run's command line holds no value.
    unit_path = open_tmp / f"hostjob-{name}.service"
    unit_path.write_text(unit)
    assert "hunter2" not in as_nobody('cat "$1"', "sh", str(unit_path)).stdout
    out = open_tmp / "out"
    with open(out, "w") as sink:
        started = subprocess.Popen(words, stdout=sink, stderr=subprocess.STDOUT, env=hostjob_env())
    try:
        deadline = time.monotonic() + 30
        while "from-the-file" not in out.read_text():
            assert started.poll() is None, out.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert out.read_text().splitlines()[0] == "hunter2-of-the-unit from-the-file"
        cmdline = as_nobody('tr "\\0" " " < /proc/$1/cmdline', "sh", str(started.pid)).stdout
        assert "run --rm" in cmdline and "hunter2" not in cmdline
    finally:
        hj_open("stop", name)
        started.wait(60)
        hj_open("delete", "--force", name)
