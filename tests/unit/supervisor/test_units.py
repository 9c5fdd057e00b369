"""hostjob.supervisor.units: the unit `generate systemd` writes, its quoting, sd_notify."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from hostjob.errors import InvalidArgument
from hostjob.specconv.jobconfig import DaemonConfig
from hostjob.supervisor.units import env_file, notify, quote, unit_file


def test_quote() -> None:
    assert quote("plain") == "plain"
    assert quote("a b") == '"a b"'
    assert quote("") == '""'
    assert quote("$HOME") == "$$HOME"  # systemd expands $VAR: kept literal
    assert quote("100%") == "100%%"  # and %-specifiers
    assert quote('say "hi"\\') == '"say \\"hi\\"\\\\"'
    assert quote(";") == '";"'  # a lone ; separates commands
    with pytest.raises(InvalidArgument):
        quote("two\nlines")


def unit(restart: str = "no", retries: int | None = None, stop_signal: int = 15) -> str:
    daemon = DaemonConfig(
        restart=restart, max_retries=retries, stop_signal=stop_signal, stop_timeout=7,
        command=["--memory", "64m", "--store", "/var/lib/hostjob", "-q", "localhost/ne:v1", "--x=a b"],
    )  # fmt: skip
    return unit_file("ne1", "localhost/ne:v1", daemon, ["/usr/bin/hostjob"], "/run/hostjob")


def directives(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )


def test_unit_runs_the_same_container_in_the_foreground() -> None:
    d = directives(unit())
    assert d["Type"] == "notify" and d["NotifyAccess"] == "main"
    assert d["ExecStart"] == (
        "/usr/bin/hostjob --root /run/hostjob run --rm --name ne1 --memory 64m"
        ' --store /var/lib/hostjob -q localhost/ne:v1 "--x=a b"'
    )
    assert d["ExecStop"] == "/usr/bin/hostjob --root /run/hostjob stop -t 7 -s 15 ne1"
    assert (
        d["ExecStartPre"]
        == d["ExecStopPost"]
        == ("/usr/bin/hostjob --root /run/hostjob delete --force ne1")
    )
    assert d["KillMode"] == "mixed" and d["TimeoutStopSec"] == "22"
    assert d["Delegate"] == "yes"  # the job's cgroup lives inside the unit's
    assert d["SuccessExitStatus"] == "143" and d["Restart"] == "no"
    assert "StartLimitBurst" not in d


def test_unit_restart_policies() -> None:
    assert directives(unit("always"))["Restart"] == "always"
    d = directives(unit("on-failure", 4))
    assert d["Restart"] == "on-failure" and d["StartLimitBurst"] == "5"
    assert d["StartLimitIntervalSec"] == "infinity"
    # The stop signal is named to stop (the unit's container runs in the foreground,
    # whose record keeps none), and its death is a success beside SIGTERM's.
    quit_unit = directives(unit(stop_signal=3))
    assert quit_unit["SuccessExitStatus"] == "131 143"
    assert quit_unit["ExecStop"] == "/usr/bin/hostjob --root /run/hostjob stop -t 7 -s 3 ne1"


def test_notify_sends_a_datagram(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    try:
        notify(path, "READY=1")
        assert server.recv(100) == b"READY=1"
        notify(str(tmp_path / "nobody-listens"), "READY=1")  # ignored, as sd_notify does
    finally:
        server.close()
        os.unlink(path)


def test_the_environment_goes_into_a_root_only_file_never_the_unit(tmp_path: Path) -> None:
    """A unit file is world-readable and its command lines are shown by ``systemctl
    show`` and ``/proc/PID/cmdline``: the values of ``-e`` and ``--env-file`` live in a
    0600 file under the store, which the unit names."""
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    env = ["API_TOKEN=hunter2 with blanks inside", "FROM_FILE=x=y"]
    daemon = DaemonConfig(
        restart="no", stop_signal=15, stop_timeout=7, log_dir=str(store / "logs" / "ne1"),
        command=["--store", str(store), "-q", "localhost/ne:v1"], env=env,
    )  # fmt: skip
    path = env_file("ne1", daemon)
    assert path == str(store / "units" / "ne1.env")
    assert Path(path).read_text() == "API_TOKEN=hunter2 with blanks inside\nFROM_FILE=x=y\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store / "units").st_mode) == 0o700
    text = unit_file("ne1", "localhost/ne:v1", daemon, ["/usr/bin/hostjob"], "/run/hostjob", path)
    assert "hunter2" not in text
    assert directives(text)["ExecStart"] == (
        f"/usr/bin/hostjob --root /run/hostjob run --rm --name ne1 --env-file {path}"
        f" --store {store} -q localhost/ne:v1"
    )
    # No environment: no file (an earlier one removed), no flag.
    daemon.env = []
    assert env_file("ne1", daemon) is None and not Path(path).exists()
    assert "--env-file" not in unit_file("ne1", "i", daemon, ["/h"], "/run/hostjob")


@pytest.mark.parametrize("entry", ["K=two\nlines", "K=trailing ", " K=leading", "#K=v"])
def test_a_value_the_file_cannot_hold_exactly_is_refused(tmp_path: Path, entry: str) -> None:
    daemon = DaemonConfig(log_dir=str(tmp_path / "logs" / "c"), command=["x"], env=[entry])
    with pytest.raises(InvalidArgument, match="cannot be kept exactly"):
        env_file("c", daemon)
    assert not (tmp_path / "units" / "c.env").exists()
