"""cgroup v1 freezer: ``freezer.state`` FROZEN/THAWED.

v1 may sit in FREEZING while processes keep forking; as runc does, keep asking,
thaw now and then to let stragglers settle, and give up (thawed) after a deadline.
"""

from __future__ import annotations

import time

from hostjob.cgroups._fs import Dir
from hostjob.errors import CgroupError

FREEZE_TIMEOUT = 5.0


def freeze(d: Dir, timeout: float = FREEZE_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    i = 0
    while True:
        if i % 50 == 49:
            d.write("freezer.state", "THAWED")
            time.sleep(0.01)
        d.write("freezer.state", "FROZEN")
        state = d.read("freezer.state").strip()
        if state == "FROZEN":
            return
        if state != "FREEZING":
            raise CgroupError(f"unexpected {d.path}/freezer.state {state!r} while freezing")
        if time.monotonic() > deadline:
            d.try_write("freezer.state", "THAWED")  # never leave it half frozen
            raise CgroupError(
                f"cannot freeze cgroup {d.path}: its processes did not stop within {timeout:g}s"
            )
        if i % 25 == 24:
            time.sleep(0.001)
        i += 1


def thaw(d: Dir) -> None:
    d.write("freezer.state", "THAWED")


def frozen(d: Dir) -> bool:
    # self_freezing: frozen on its own account, not through an ancestor.
    own = d.read_optional("freezer.self_freezing")
    if own is not None:
        return own.strip() == "1"
    return (d.read_optional("freezer.state") or "").strip() == "FROZEN"
