"""Error messages are one line that quotes hostile input harmlessly (issue 7)."""

from __future__ import annotations

from hostjob.errors import ConfigError, HostjobError, UnpackError, one_line
from hostjob.spec._decode import string_map


def test_control_characters_are_escaped() -> None:
    err = HostjobError("entry 'a\nb\x1b[31m' is bad\r")
    assert str(err) == "entry 'a\\nb\\x1b[31m' is bad\\r"
    assert str(UnpackError("x\x00y")) == "x\\x00y"
    assert one_line("caf\u00e9 \u4e2d") == "caf\u00e9 \u4e2d"  # printable text is kept


def test_json_path_with_a_newline_key() -> None:
    """Found by the config fuzzer: annotations {"A\\n;": {}} gave a two-line error."""
    try:
        string_map({"A\n;": {}}, "annotations")
    except ConfigError as err:
        assert str(err) == "annotations.A\\n;: expected a string, got object"
    else:
        raise AssertionError("no error")


def test_an_unexpected_exception_is_one_line(monkeypatch, capsys) -> None:
    """Issue 7: a bug in a command (here a ValueError, as os.stat raises for a NUL in a
    path) must still reach a client as one line and exit 1, not as a traceback."""
    from hostjob.cli import main
    from hostjob.cli.commands import state

    def broken(args: object, ctx: object) -> int:
        raise ValueError("embedded null byte")

    monkeypatch.setattr(state, "run", broken)
    monkeypatch.setattr(main.os, "geteuid", lambda: 0)
    assert main.main(["--root", "/nonexistent-root", "state", "x"]) == 1
    err = capsys.readouterr().err
    assert err == "internal error: ValueError: embedded null byte\n"


def test_pid_file_temp_never_writes_through_a_symlink(tmp_path, monkeypatch) -> None:
    """Issue 7: the pid file's temp file lies in the caller's directory; a symlink
    planted at its name (here: the name it draws first) made root write the pid
    through it. Now a planted name is skipped, never followed."""
    import os

    from hostjob.runtime.state_dir import write_pid_file

    draws = iter([b"\0" * 6, b"\1" * 6])
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = tmp_path / f".pid.tmp-{'00' * 6}"
    planted.symlink_to(victim)
    write_pid_file(str(tmp_path / "pid"), 1234)
    assert victim.read_text() == "precious"
    assert (tmp_path / "pid").read_text() == "1234"
    assert sorted(p.name for p in tmp_path.iterdir()) == [planted.name, "pid", "victim"]
