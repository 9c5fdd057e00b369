"""A container process run in the foreground (``run``, ``exec`` without ``--detach``).

The runtime stays attached: it forwards the signals it receives to the process,
proxies the process's terminal when it has one and no console socket was given
(the pty master comes back over a socketpair), and waits for its exit status.
"""

from __future__ import annotations

import posix

from hostjob.linux import signals

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.launch.spawn import Child

FORWARDED = (
    signals.SIGHUP,
    signals.SIGINT,
    signals.SIGQUIT,
    signals.SIGUSR1,
    signals.SIGUSR2,
    signals.SIGALRM,
    signals.SIGTERM,
    signals.SIGCONT,
    signals.SIGTSTP,
    signals.SIGTTIN,
    signals.SIGTTOU,
    signals.SIGWINCH,
)


class TerminalPair:
    """A socketpair over which the container process sends its pty master to us."""

    __slots__ = ("child_fd", "parent_fd")

    def __init__(self) -> None:
        import socket

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.parent_fd = parent.detach()
        self.child_fd = child.detach()

    def spawned(self) -> None:
        """The process has its end (inherited at fork); drop ours."""
        if self.child_fd >= 0:
            posix.close(self.child_fd)
            self.child_fd = -1

    def receive_master(self) -> int:
        from hostjob.runtime.launch import console

        fd, self.parent_fd = self.parent_fd, -1
        return console.receive_master(fd)  # closes fd

    def close(self) -> None:
        self.spawned()
        if self.parent_fd >= 0:
            posix.close(self.parent_fd)
            self.parent_fd = -1


def wait_attached(child: Child, master: int = -1) -> int:
    """Forward signals, proxy the terminal, and return the process's wait status."""
    forward_signals(child.pid, master)
    try:
        child.wait_exec()
        if master >= 0:
            from hostjob.runtime.launch import console

            console.proxy(master)
        _, status = posix.waitpid(child.pid, 0)
    finally:
        ignore_signals()
    return status


def forward_signals(pid: int, master: int = -1) -> None:
    """From now on the signals a foreground runtime gets go to ``pid`` (SIGWINCH copies
    the terminal's size to ``master`` instead, when there is one)."""

    def forward(signum: int, _frame: object) -> None:
        if signum == signals.SIGWINCH and master >= 0:
            _copy_window_size(master)
            return
        try:
            posix.kill(pid, signum)
        except ProcessLookupError:
            pass

    for number in FORWARDED:
        signals.signal(number, forward)


def ignore_signals() -> None:
    """From here on the runtime tears down: a second Ctrl-C must not leak the job."""
    for number in FORWARDED:
        signals.signal(number, signals.SIG_IGN if number != signals.SIGCONT else signals.SIG_DFL)


def _copy_window_size(master: int) -> None:
    import fcntl
    import termios

    try:
        size = fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(master, termios.TIOCSWINSZ, size)
    except OSError:
        pass


def reap_orphans() -> None:
    """Reap whatever was re-parented to us (we are a subreaper during ``run``)."""
    while True:
        try:
            pid, _ = posix.waitpid(-1, posix.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
