"""The container process's program: found as the target user, and what is executed
for it -- itself, or, for an image's dynamically linked program, the image's loader
(``hostjob.runtime.launch.loader``) -- with which ``argv`` and environment.

Run in the child (``hostjob.runtime.launch.child``) after the identity switch, so
that the look-up's permissions are the user's; before it reports ready, so that a
program that cannot start is ``create``'s (or ``exec``'s) error.
"""

from __future__ import annotations

import errno
import posix

from hostjob.errors import StartError
from hostjob.runtime.launch.plan import find_program_named

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.launch.plan import LaunchPlan


def program_and_env(
    plan: LaunchPlan, listen_fds: int, extra_fds: int
) -> tuple[str, list[str], list[str]]:
    """(path to execute, argv, environment); the fds passed on (socket activation,
    ``--preserve-fds``: ``extra_fds`` of them from 3, the first ``listen_fds`` of them
    announced in ``LISTEN_FDS``) made inheritable."""
    program, named = find_program_named(
        plan.args[0], plan.cwd, plan.path_value(), plan.mount_point, plan.image_path
    )
    args = plan.args
    root = plan.mount_point.rstrip("/")
    if plan.image_loader and root and program.startswith(root + "/"):
        from hostjob.runtime.launch import loader

        program, args = loader.prepare(plan, program, named)
    env = plan.env
    if listen_fds:
        env = [
            *(e for e in env if not e.startswith(("LISTEN_FDS=", "LISTEN_PID="))),
            f"LISTEN_FDS={listen_fds}",
            f"LISTEN_PID={posix.getpid()}",
        ]
    for fd in range(3, 3 + extra_fds):
        try:
            posix.set_inheritable(fd, True)
        except OSError as err:
            raise StartError(
                f"cannot pass fd {fd} to the process (LISTEN_FDS/--preserve-fds):"
                f" {err.strerror or err}"
            ) from err
    return program, args, env


def exec_error(arg0: str, program: str, err: OSError) -> StartError:
    """The one line for an ``execve`` that failed. ENOENT on a file that exists is its
    loader (``PT_INTERP``) or ``#!`` interpreter, which the kernel looked for on the
    host: named, rather than the file the kernel's message seems to name."""
    if err.errno == errno.ENOENT and _exists(program):
        missing = _interpreter_of(program)
        if missing:
            return StartError(f'exec: "{arg0}": {missing} is not on this host')
    return StartError(f'exec: "{arg0}": {err.strerror}')


def _exists(path: str) -> bool:
    try:
        posix.stat(path)
    except OSError:
        return False
    return True


def _interpreter_of(program: str) -> str:
    """``its loader X`` or ``its interpreter X (#!)`` of ``program``, or ""."""
    from hostjob.runtime.launch import elf, loader

    try:
        fd = posix.open(program, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NONBLOCK)
    except OSError:
        return ""
    try:
        head = posix.pread(fd, elf.FIRST_READ, 0)
        if head.startswith(b"#!"):
            return f"its interpreter {loader.shebang(head)[0]} (#!)"
        found = elf.parse(fd, head) if head[:4] == elf.MAGIC else None
    except (OSError, elf.ElfError):
        return ""
    finally:
        posix.close(fd)
    if found is None or found.interpreter is None:
        return ""
    return f"its loader {found.interpreter}"
