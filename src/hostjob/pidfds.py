"""pidfds: a process pinned by a file descriptor, so that a signal or a wait reaches that
process and never one that took its pid later.

``pidfd_of`` answers None for a process that is gone. Kernels say "gone" two ways: ESRCH
(no process has the pid), and -- on 6.1 (Debian 12) and the kernels before it, 5.14 and
5.15 among them -- EINVAL for a pid whose process has exited and been reaped while the
number still names the process group or session its children live in: there is no
thread-group leader left to pin. Both mean the same to every caller here.
"""

from __future__ import annotations

import errno
import posix


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
