"""Log records in logrus's formats, which runc's clients parse.

With ``--log FILE`` every record goes there, as JSON lines
(``{"level":"warning","msg":"...","time":"2026-11-30T08:37:45Z"}``) with
``--log-format json`` or logrus text lines (``time="..." level=warning msg="..."``)
otherwise. Without ``--log``, only ``--debug`` sends debug and warning records to
stderr: a command that succeeds writes nothing on stderr, because containerd and
podman hand the runtime's stderr to the container's own stderr stream (both give
``--log``). The one exception is a warning the operator must see (``stderr=True``: two
jobs sharing a uid), which goes to stderr when there is no ``--log``. Info records (the
signature policy's decisions) always go to ``--log``, and to stderr only with ``--debug``.
Errors are reported by ``hostjob.cli.main``, which also writes them here.
"""

from __future__ import annotations

import posix
import sys

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}

_path: str | None = None
_format = "text"
_threshold = _LEVELS["warning"]
_to_stderr = False


def configure(path: str | None, fmt: str = "text", debug: bool = False) -> None:
    global _path, _format, _threshold, _to_stderr
    _path = path or None
    _format = fmt
    _threshold = _LEVELS["debug"] if debug else _LEVELS["warning"]
    _to_stderr = debug and _path is None


def settings() -> tuple[str | None, str, bool]:
    """(path, format, debug) as ``configure`` set them: for a process that starts
    afresh and logs where this one does (a container's watcher)."""
    return _path, _format, _threshold == _LEVELS["debug"]


def format_record(level: str, msg: str, fmt: str) -> str:
    # Imported only when a record is written: most commands write none (and one that
    # reads no JSON, `delete --force` of an ID that is not there, loads no JSON code).
    from hostjob.boot import jsonio
    from hostjob.units import rfc3339

    now = rfc3339(local=True)
    if fmt == "json":
        return jsonio.dumps({"level": level, "msg": msg, "time": now})
    return f"time={jsonio.dumps(now)} level={level} msg={jsonio.dumps(msg)}"


def _emit(level: str, msg: str, stderr: bool = False) -> None:
    # An info record is a decision worth keeping (an image the signature policy let
    # in): always in --log, on stderr only with --debug.
    if _LEVELS[level] < _threshold and level not in ("error", "info"):
        return
    if _path is not None:
        line = format_record(level, msg, _format) + "\n"
        try:
            fd = posix.open(
                _path, posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND | posix.O_CLOEXEC, 0o644
            )
            try:
                posix.write(fd, line.encode())
            finally:
                posix.close(fd)
        except OSError:
            pass  # logging must never turn success into failure
    elif (_to_stderr or stderr) and level != "error":
        sys.stderr.write(f"hostjob: {level}: {msg}\n")


def debug(msg: str) -> None:
    _emit("debug", msg)


def info(msg: str) -> None:
    _emit("info", msg)


def warning(msg: str, stderr: bool = False) -> None:
    """A warning record; with ``stderr``, one the operator must see: on stderr when
    there is no ``--log`` to take it (clients such as containerd and podman give one)."""
    _emit("warning", msg, stderr)


def error(msg: str) -> None:
    """Record an error in the log file (the CLI prints it on stderr itself)."""
    _emit("error", msg)
