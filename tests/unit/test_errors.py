"""Error messages are one line that quotes hostile input harmlessly."""

from __future__ import annotations

from hostjob.errors import ConfigError, HostjobError, one_line
from hostjob.images.errors import UnpackError
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
    """A bug in a command (here a ValueError, as os.stat raises for a NUL in a
    path) must still reach a client as one line and exit 1, not as a traceback."""
    from hostjob.cli import main
    from hostjob.cli.commands import state

    def broken(args: object, ctx: object) -> int:
        raise ValueError("embedded null byte")

    monkeypatch.setattr(state, "run", broken)
    monkeypatch.setattr(main.posix, "geteuid", lambda: 0)
    assert main.main(["--root", "/nonexistent-root", "state", "x"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "internal error in `hostjob state`: ValueError: embedded null byte"
        " (a bug in hostjob: please report it with this command's --debug output)\n"
    )


def test_an_internal_error_keeps_its_traceback_in_debug_and_the_log(
    monkeypatch, capsys, tmp_path
) -> None:
    """The one line is what a client shows; the traceback that a report needs goes to
    stderr before it with --debug, and to the --log file always."""
    import json

    from hostjob import log
    from hostjob.cli import main
    from hostjob.cli.commands import state

    def broken(args: object, ctx: object) -> int:
        raise KeyError("deep inside")

    monkeypatch.setattr(state, "run", broken)
    monkeypatch.setattr(main.posix, "geteuid", lambda: 0)
    try:
        assert main.main(["--root", "/nonexistent-root", "--debug", "state", "x"]) == 1
        lines = capsys.readouterr().err.splitlines()
        assert lines[0] == "Traceback (most recent call last):"
        assert any("in broken" in line for line in lines)
        assert lines[-1].startswith("internal error in `hostjob state`: KeyError: 'deep inside'")
        assert "please report it" in lines[-1]

        path = tmp_path / "log.json"
        args = ["--root", "/nonexistent-root", "--log", str(path), "--log-format", "json"]
        assert main.main([*args, "state", "x"]) == 1
        assert capsys.readouterr().err.count("\n") == 1  # no traceback without --debug
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert [r["level"] for r in records] == ["error", "error"]
        assert "Traceback (most recent call last)" in records[0]["msg"]
        assert "in broken" in records[0]["msg"]
        assert records[1]["msg"].startswith("internal error in `hostjob state`")
    finally:
        log.configure(None)


def test_pid_file_temp_never_writes_through_a_symlink(tmp_path, monkeypatch) -> None:
    """The pid file's temp file lies in the caller's directory; a symlink
    planted at its name (here: the name it draws first) made root write the pid
    through it. Now a planted name is skipped, never followed."""
    import posix

    from hostjob.runtime.record import write_pid_file

    draws = iter([b"\0" * 6, b"\1" * 6])
    monkeypatch.setattr(posix, "urandom", lambda n: next(draws))
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = tmp_path / f".pid.tmp-{'00' * 6}"
    planted.symlink_to(victim)
    write_pid_file(str(tmp_path / "pid"), 1234)
    assert victim.read_text() == "precious"
    assert (tmp_path / "pid").read_text() == "1234"
    assert sorted(p.name for p in tmp_path.iterdir()) == [planted.name, "pid", "victim"]


def _state_of_a_missing_container(
    tmp_path, monkeypatch, capsys, *flags: str
) -> tuple[int, list[str]]:
    from hostjob.cli import main

    monkeypatch.setattr(main.posix, "geteuid", lambda: 0)
    root = str(tmp_path / "root")
    code = main.main([*flags, "--root", root, "state", "nope"])
    return code, capsys.readouterr().err.splitlines()


def test_an_error_is_one_line_without_debug(tmp_path, monkeypatch, capsys) -> None:
    code, lines = _state_of_a_missing_container(tmp_path, monkeypatch, capsys)
    assert (code, lines) == (1, ["container does not exist"])


def test_debug_shows_where_and_every_cause(tmp_path, monkeypatch, capsys) -> None:
    """``--debug`` shows the errno and the failing call behind a one-line error."""
    code, lines = _state_of_a_missing_container(tmp_path, monkeypatch, capsys, "--debug")
    assert code == 1
    assert lines[0] == "container does not exist"  # the line itself is unchanged
    assert lines[1].startswith("hostjob: debug: ContainerNotFound raised at ")
    assert "hostjob/runtime/record.py:" in lines[1]
    assert lines[2].startswith(
        "hostjob: debug: caused by FileNotFoundError: [Errno 2] No such file or directory: "
        f"'{tmp_path}/root/nope/state.json' (at hostjob/runtime/record.py:"
    )
    assert len(lines) == 3


def test_debug_with_a_log_file_records_the_causes_there(tmp_path, monkeypatch, capsys) -> None:
    import json

    from hostjob import log

    path = tmp_path / "log.json"
    try:
        _code, lines = _state_of_a_missing_container(
            tmp_path, monkeypatch, capsys, "--debug", "--log", str(path), "--log-format", "json"
        )
    finally:
        log.configure(None)
    assert lines == ["container does not exist"]  # stderr: the line alone
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["level"] for r in records] == ["error", "debug", "debug"]
    assert records[2]["msg"].startswith("caused by FileNotFoundError: [Errno 2]")


def test_cause_chain_follows_causes_and_context() -> None:
    from hostjob.cli.main import cause_chain

    def layered() -> None:
        try:
            try:
                os.stat("/nonexistent/x")
            except OSError as err:
                raise ConfigError("inner") from err
        except ConfigError:
            raise HostjobError("outer")  # noqa: B904 -- implicit context, on purpose

    import os

    try:
        layered()
    except HostjobError as err:
        lines = cause_chain(err)
    assert lines[0].startswith("HostjobError raised at ") and lines[0].endswith(" in layered")
    assert "test_errors.py:" in lines[0]
    assert lines[1].startswith("caused by ConfigError: inner (at ")
    assert lines[2].startswith("caused by FileNotFoundError: [Errno 2] No such file")
    assert len(lines) == 3
    suppressed = HostjobError("alone")
    try:
        try:
            raise ValueError("hidden")
        except ValueError:
            raise suppressed from None
    except HostjobError:
        pass
    assert len(cause_chain(suppressed)) == 1  # `from None`: nothing below it


def test_no_error_drops_its_cause() -> None:
    """Causes are kept: ``raise X(...) from None`` hid the errno and the failing call that
    ``--debug`` shows."""
    import ast

    from tests.helpers import REPO

    found = []
    for path in sorted((REPO / "src" / "hostjob").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Raise)
                and isinstance(node.cause, ast.Constant)
                and node.cause.value is None
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
