"""Fault injection for the crash-safety tests (a failure part-way leaves nothing behind
once ``delete --force`` has run).

``HOSTJOB_CRASH_AT=<point>`` makes hostjob SIGKILL itself when it reaches that
named point, exactly as ``kill -9`` would; the tests then check that ``state``
says something sensible and ``delete --force`` leaves nothing behind. Unset, a
point costs one comparison.
"""

from __future__ import annotations

import posix

from hostjob.boot.env import getenv

_CRASH_AT = getenv("HOSTJOB_CRASH_AT", "")

# Every point, in the order a lifecycle reaches them (tests iterate over this).
POINTS = (
    "create:after-state-dir",
    "create:after-cgroup",
    "create:before-overlay",  # hostjob run IMAGE only
    "create:after-mount",
    "create:after-fork",
    "create:mid-hook",
    "create:before-created",
    "start:after-release",
    "delete:after-kill",
    "delete:after-cgroup",
    "delete:after-unmount",
    "delegate:after-route",  # a container that is not a job container: before runc's create
    "delegate:after-runtime-delete",  # ... after runc's delete, before the route goes
    "unpack:mid-layer",
    "pull:mid-blob",
)


# Points only `hostjob run IMAGE` reaches (a bundle has no overlay to mount).
IMAGE_POINTS = ("create:before-overlay",)


def point(name: str) -> None:
    if name == _CRASH_AT:
        posix.kill(posix.getpid(), 9)
