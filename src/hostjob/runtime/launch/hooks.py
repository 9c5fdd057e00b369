"""Lifecycle hooks: run one hook point with the state JSON on stdin.

A hook's stdout and stderr are captured (never mixed into the runtime's own
output, which clients hand to the container's stderr) and its last stderr line
is quoted when it fails. ``timeout`` kills the hook and fails the step.
"""

from __future__ import annotations

import io
import posix

from hostjob import faults
from hostjob.boot import jsonio
from hostjob.errors import HookError
from hostjob.linux import signals
from hostjob.runtime.proc import env_dict, exit_code, wait_pidfd

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from hostjob.specconv.jobconfig import Hook


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
    stdin_r, stdin_w = posix.pipe()
    output = posix.memfd_create("hook-output", posix.MFD_CLOEXEC)
    try:
        try:
            pid = posix.posix_spawn(
                hook.path,
                hook.args or [hook.path],
                env_dict(hook.env),
                file_actions=[
                    (posix.POSIX_SPAWN_DUP2, stdin_r, 0),
                    (posix.POSIX_SPAWN_DUP2, output, 1),
                    (posix.POSIX_SPAWN_DUP2, output, 2),
                ],
                setsigdef=(signals.SIGPIPE,),
            )
        except OSError as err:
            raise HookError(
                f"{point} hook #{index} ({hook.path}) could not start: {err.strerror}"
            ) from err
        posix.close(stdin_r)
        stdin_r = -1
        try:
            posix.write(stdin_w, payload)
        except BrokenPipeError:
            pass  # the hook does not read its stdin; that is its right
        posix.close(stdin_w)
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
                posix.close(fd)


def _wait(pid: int, timeout: int | None) -> int | None:
    """The hook's wait status; None (and the hook killed) after ``timeout`` seconds."""
    if timeout is not None:
        fd = posix.pidfd_open(pid)
        try:
            if not wait_pidfd(fd, float(timeout)):
                posix.kill(pid, signals.SIGKILL)
                posix.waitpid(pid, 0)
                return None
        finally:
            posix.close(fd)
    return posix.waitpid(pid, 0)[1]


def _last_line(fd: int) -> str:
    size = posix.lseek(fd, 0, io.SEEK_END)
    posix.lseek(fd, max(0, size - 4096), io.SEEK_SET)
    text = posix.read(fd, 4096).decode(errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
