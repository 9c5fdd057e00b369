"""Signals by number and by name, without the ``signal`` module's enums, and the pidfds
they are sent through.

``signal`` wraps every number and handler in an IntEnum, and its ``enum`` import costs
~3 ms of a command. This module is ``_signal``, the C module underneath it: the same
functions (``signal``, ``pidfd_send_signal``, ``pthread_sigmask``...) and numbers
(``SIGKILL``), as plain ints. ``parse_signal`` reads ``9``, ``KILL``, ``SIGKILL`` and
``SIGRTMIN+3``; ``signal_name`` gives the name back.

``pidfd_of`` pins a process by a file descriptor, so that a signal or a wait reaches that
process and never one that took its pid later, and answers None for one that is gone.
Kernels say "gone" two ways: ESRCH (no process has the pid), and -- on 6.1 (Debian 12)
and the kernels before it, 5.14 and 5.15 among them -- EINVAL for a pid whose process has
exited and been reaped while the number still names the process group or session its
children live in: there is no thread-group leader left to pin. Both mean the same to
every caller here.
"""

from __future__ import annotations

import errno
import posix

from hostjob.errors import InvalidArgument

TYPE_CHECKING = False
if TYPE_CHECKING:  # the type checker reads signal's stubs
    import signal as _c
    from signal import *  # noqa: F403
else:
    import _signal as _c

    def __getattr__(name: str) -> object:
        # ``signals.SIGKILL``, ``signals.pidfd_send_signal``: looked up in the C module the
        # first time a name is asked for, then kept here (copying all of its ~80 names
        # when this module loads would cost every command that loads it)
        value = getattr(_c, name)
        globals()[name] = value
        return value


def parse_signal(text: str | int) -> int:
    if isinstance(text, int):
        number = text
    elif _digits(text):
        if len(text) > 11:  # never int() of 5000 digits (a ValueError past 4300)
            raise InvalidArgument(f"invalid signal number {text[:11]}...")
        number = int(text)
    else:
        name = text.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        named = _named(name)
        if named is None:
            raise InvalidArgument(f"unknown signal {text!r}")
        number = named
    if not 0 < number <= _c.SIGRTMAX:
        raise InvalidArgument(f"invalid signal number {number}")
    return number


def _digits(text: str) -> bool:
    """ASCII digits only: ``isdigit`` also takes "²", which ``int`` refuses."""
    return text.isdigit() and text.isascii()


def _named(name: str) -> int | None:
    for base, sign in (("SIGRTMIN", 1), ("SIGRTMAX", -1)):
        if name == base:
            return int(getattr(_c, base))
        if name.startswith(base + ("+" if sign > 0 else "-")):
            offset = name[len(base) + 1 :]
            if _digits(offset) and len(offset) < 12:
                return int(getattr(_c, base)) + sign * int(offset)
            return None
    if name.startswith("SIG_"):
        return None
    value = getattr(_c, name, None)
    return int(value) if isinstance(value, int) else None


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9, ``SIGRTMIN+3``; the number itself when it names no signal."""
    rtmin, rtmax = int(_c.SIGRTMIN), int(_c.SIGRTMAX)
    if rtmin <= number <= rtmax:
        return "SIGRTMIN" if number == rtmin else f"SIGRTMIN+{number - rtmin}"
    # dir() is sorted: the usual name comes before its alias (SIGABRT/SIGIOT, SIGCHLD/SIGCLD).
    for name in dir(_c):
        usual = name.startswith("SIG") and not name.startswith(("SIG_", "SIGRT"))
        if usual and getattr(_c, name) == number:
            return name
    return str(number)


def pidfd_of(pid: int) -> int | None:
    """A pidfd of process ``pid`` (close-on-exec), or None when it is gone."""
    if pid <= 0:
        return None
    try:
        return posix.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError as err:
        if err.errno == errno.EINVAL:
            return None
        raise
