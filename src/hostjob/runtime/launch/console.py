"""The container's terminal: a pty whose master goes to ``--console-socket``; and the
process's pidfd for ``--pidfd-socket``.

As runc does, the container process opens the pty, sends the master over the
unix socket with SCM_RIGHTS (the message carries the pty's name), makes the
slave its controlling terminal and its stdio. A pidfd goes the same way.
"""

from __future__ import annotations

import fcntl
import posix
import struct
import termios


def set_size(fd: int, height: int | None, width: int | None) -> None:
    if height or width:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", height or 0, width or 0, 0, 0))


def send_pidfd(sock_path: str, kind: str) -> None:
    """``--pidfd-socket``: a pidfd of this process over the socket, as runc 1.2 sends its
    init's (the message is ``kind``), so that the client can signal and wait for the very
    process, never a recycled pid."""
    pidfd = posix.pidfd_open(posix.getpid())
    try:
        send_master(sock_path, pidfd, kind)
    finally:
        posix.close(pidfd)


def send_master(sock_path_or_fd: str | int, master: int, name: str) -> None:
    """``master`` (a pty master, or any fd) over the socket with SCM_RIGHTS, ``name`` as the
    message."""
    import socket

    if isinstance(sock_path_or_fd, int):
        sock = socket.socket(fileno=sock_path_or_fd)
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(sock_path_or_fd)
    try:
        socket.send_fds(sock, [name.encode()], [master])
    finally:
        sock.close()


def receive_master(fd: int) -> int:
    """The parent side for ``run --tty`` without a console socket."""
    import socket

    sock = socket.socket(fileno=fd)
    try:
        _msg, fds, _flags, _addr = socket.recv_fds(sock, 4096, 1)
    finally:
        sock.close()
    if not fds:
        raise OSError("the container did not send its terminal")
    return fds[0]


def setup_in_child(console: str | int, height: int | None, width: int | None) -> None:
    """In the container process (a session leader): open the pty and take it over."""
    master, slave = posix.openpty()
    set_size(slave, height, width)
    send_master(console, master, posix.ttyname(slave))
    posix.close(master)
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for target in (0, 1, 2):
        posix.dup2(slave, target)
    if slave > 2:
        posix.close(slave)


def proxy(master: int, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
    """Copy stdin -> master and master -> stdout until the master hangs up."""
    import select
    import tty

    restore = None
    if posix.isatty(stdin_fd):
        restore = termios.tcgetattr(stdin_fd)
        tty.setraw(stdin_fd)
        try:
            winsize = fcntl.ioctl(stdin_fd, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(master, termios.TIOCSWINSZ, winsize)
        except OSError:
            pass
    poller = select.poll()
    poller.register(master, select.POLLIN)
    stdin_open = True
    poller.register(stdin_fd, select.POLLIN)
    try:
        while True:
            for fd, events in poller.poll():
                if fd == master:
                    try:
                        data = posix.read(master, 65536)
                    except OSError:  # EIO: the slave side is closed
                        data = b""
                    if not data:
                        return
                    _write_all(stdout_fd, data)
                elif stdin_open:
                    data = posix.read(stdin_fd, 65536) if events & select.POLLIN else b""
                    if not data:
                        stdin_open = False
                        poller.unregister(stdin_fd)
                        _write_all(master, b"\x04")  # EOF for the program's terminal
                    else:
                        _write_all(master, data)
    finally:
        if restore is not None:
            termios.tcsetattr(stdin_fd, termios.TCSADRAIN, restore)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[posix.write(fd, view) :]
