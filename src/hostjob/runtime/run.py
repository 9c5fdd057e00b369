"""``run``: create + start + wait + delete in one process, as ``runc run`` does.

The runtime stays the container process's parent: it forwards the signals it
receives, proxies the terminal when the process has one and no console socket
was given, returns the program's exit status (128+N when killed by signal N),
ends the rest of the job (SIGTERM, then SIGKILL after the grace period) and
deletes the container. ``detach`` returns once the program runs.
"""

from __future__ import annotations

import os

from hostjob.runtime import proc
from hostjob.runtime.container import Container, CreateOptions, end_job, stop_grace
from hostjob.runtime.signals import sig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hostjob.config import JobConfig

FORWARDED = (
    sig.SIGHUP,
    sig.SIGINT,
    sig.SIGQUIT,
    sig.SIGUSR1,
    sig.SIGUSR2,
    sig.SIGALRM,
    sig.SIGTERM,
    sig.SIGCONT,
    sig.SIGTSTP,
    sig.SIGTTIN,
    sig.SIGTTOU,
    sig.SIGWINCH,
)


def run(
    container_id: str,
    job: JobConfig,
    *,
    root: str,
    options: CreateOptions,
    detach: bool = False,
    keep: bool = False,
    subreaper: bool = True,
    on_created: Callable[[Container], None] | None = None,
) -> int:
    """Run the job container to completion (or until it runs, with ``detach``)."""
    proxy_tty = job.process.terminal and not detach and options.console_socket is None
    parent_sock = -1
    if proxy_tty:
        import socket

        parent, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent_sock = parent.detach()
        options.console_socket = child_end.detach()
    if subreaper and not detach:
        from hostjob import linux

        # Orphans of the job are re-parented to us, so that we reap them at the end.
        linux.set_child_subreaper()
    try:
        container, child = Container.create_from_config(
            container_id, job, root=root, options=options
        )
    finally:
        if isinstance(options.console_socket, int):
            os.close(options.console_socket)
    master = -1
    try:
        if proxy_tty:
            from hostjob.runtime import console

            master = console.receive_master(parent_sock)
            parent_sock = -1
        if on_created is not None:
            on_created(container)
        container.start()
        if detach:
            child.close()
            return 0
        _forward_signals(child.pid, master)
        child.wait_exec()
        if master >= 0:
            from hostjob.runtime import console

            console.proxy(master)
        _, wait_status = os.waitpid(child.pid, 0)
    except BaseException:
        child.close()
        if not keep:
            container.delete(force=True)
        _reap_orphans()
        raise
    finally:
        for fd in (master, parent_sock):
            if fd >= 0:
                os.close(fd)
    _ignore_forwarded()
    end_job(container.cgroup(), stop_grace())
    _reap_orphans()
    if not keep:
        container.delete(force=True)
    return proc.exit_code(wait_status)


def _forward_signals(pid: int, master: int) -> None:
    def forward(signum: int, _frame: object) -> None:
        if signum == sig.SIGWINCH and master >= 0:
            _copy_window_size(master)
            return
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for number in FORWARDED:
        sig.signal(number, forward)


def _ignore_forwarded() -> None:
    # Teardown must not be interrupted: a second Ctrl-C would leak the job.
    for number in FORWARDED:
        sig.signal(number, sig.SIG_IGN if number != sig.SIGCONT else sig.SIG_DFL)


def _copy_window_size(master: int) -> None:
    import fcntl
    import termios

    try:
        size = fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(master, termios.TIOCSWINSZ, size)
    except OSError:
        pass


def _reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
