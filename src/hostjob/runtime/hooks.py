"""Lifecycle hooks: run one hook point with the state JSON on stdin.

A hook's stdout and stderr are captured (never mixed into the runtime's own
output, which clients hand to the container's stderr) and its last stderr line
is quoted when it fails. ``timeout`` kills the hook and fails the step.
"""

from __future__ import annotations

import os

from hostjob import faults, jsonio
from hostjob.errors import HookError
from hostjob.runtime.proc import env_dict, exit_code, sig, wait_pidfd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.job import Hook


def run_hooks(point: str, hooks: list[Hook], state: dict[str, Any]) -> None:
    """Run every hook of ``point`` in order; the first failure raises HookError."""
    if not hooks:
        return
    payload = jsonio.dumps(state).encode()
    for index, hook in enumerate(hooks):
        run_hook(point, index, hook, payload)
        faults.point(f"{point_group(point)}:mid-hook")


def point_group(point: str) -> str:
    """The lifecycle step a hook point belongs to, for fault injection."""
    return "create" if point in ("prestart", "createRuntime", "createContainer") else point


def run_hook(point: str, index: int, hook: Hook, payload: bytes) -> None:
    stdin_r, stdin_w = os.pipe()
    output = os.memfd_create("hook-output", os.MFD_CLOEXEC)
    try:
        try:
            pid = os.posix_spawn(
                hook.path,
                hook.args or [hook.path],
                env_dict(hook.env),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, stdin_r, 0),
                    (os.POSIX_SPAWN_DUP2, output, 1),
                    (os.POSIX_SPAWN_DUP2, output, 2),
                ],
                setsigdef=(sig.SIGPIPE,),
            )
        except OSError as err:
            raise HookError(
                f"{point} hook #{index} ({hook.path}) could not start: {err.strerror}"
            ) from err
        os.close(stdin_r)
        stdin_r = -1
        try:
            os.write(stdin_w, payload)
        except BrokenPipeError:
            pass  # the hook does not read its stdin; that is its right
        os.close(stdin_w)
        stdin_w = -1
        status = _wait(pid, hook.timeout)
        if status is None:
            raise HookError(f"{point} hook #{index} ({hook.path}) timed out after {hook.timeout}s")
        code = exit_code(status)
        if code != 0:
            detail = _last_line(output)
            raise HookError(
                f"{point} hook #{index} ({hook.path}) failed with exit status {code}"
                + (f": {detail}" if detail else "")
            )
    finally:
        for fd in (stdin_r, stdin_w, output):
            if fd >= 0:
                os.close(fd)


def _wait(pid: int, timeout: int | None) -> int | None:
    """The hook's wait status; None (and the hook killed) after ``timeout`` seconds."""
    if timeout is not None:
        fd = os.pidfd_open(pid)
        try:
            if not wait_pidfd(fd, float(timeout)):
                os.kill(pid, sig.SIGKILL)
                os.waitpid(pid, 0)
                return None
        finally:
            os.close(fd)
    return os.waitpid(pid, 0)[1]


def _last_line(fd: int) -> str:
    size = os.lseek(fd, 0, os.SEEK_END)
    os.lseek(fd, max(0, size - 4096), os.SEEK_SET)
    text = os.read(fd, 4096).decode(errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
