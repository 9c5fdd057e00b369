"""The container process's identity: its user, groups and capability sets, set as
the last root steps of the child's set-up (``hostjob.runtime.launch.child``)."""

from __future__ import annotations

import posix

from hostjob.errors import StartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hostjob.runtime.launch.plan import LaunchPlan


def reason(err: OSError) -> str:
    """An OSError's reason, as the child's messages give it."""
    return err.strerror or str(err)


def switch(plan: LaunchPlan) -> None:
    """The target user and capability sets, in runc's order: the bounding set, keep
    capabilities across setuid, the user switch, then the sets."""
    user = plan.user
    wanted = plan.capabilities
    if wanted is None:
        current = (posix.getuid(), posix.getgid(), sorted(posix.getgroups()))
        if (user.uid, user.gid, sorted(user.groups)) != current:
            _set_user(user.uid, user.gid, user.groups)
        return  # no capability sets asked: keep what the user switch leaves
    from hostjob.linux import syscalls
    from hostjob.linux.capabilities import cap_name

    # runc's order: bounding set, keep caps across setuid, switch, then the sets.
    bounding = wanted[0]
    try:
        syscalls.drop_bounding(c for c in range(_last_cap() + 1) if not bounding & (1 << c))
    except OSError as err:
        what = f"cannot drop {err.filename} from the bounding set"
        raise StartError(f"{what}: {reason(err)}") from err
    cap = 0
    try:
        step = "keep capabilities across the user switch (prctl PR_SET_KEEPCAPS)"
        syscalls.set_keepcaps(True)
        _set_user(user.uid, user.gid, user.groups)
        step = "clear PR_SET_KEEPCAPS"
        syscalls.set_keepcaps(False)
        _bounding, effective, permitted, inheritable, ambient = wanted
        step = (
            f"set capabilities (capset: effective {effective:#x}, permitted {permitted:#x},"
            f" inheritable {inheritable:#x})"
        )
        syscalls.capset(effective, permitted, inheritable)
        # The kernel raises an ambient capability only if it is permitted and inheritable.
        # runc and crun skip the others (`runc spec` itself asks for ambient capabilities
        # without inheritable ones), so a config they run runs here too.
        ambient &= permitted & inheritable
        step = "raise ambient capability {}"
        for cap in range(_last_cap() + 1):
            if ambient & (1 << cap):
                syscalls.raise_ambient(cap)
    except OSError as err:
        step = step.format(cap_name(cap))
        raise StartError(f"cannot {step}: {reason(err)}") from err


def _set_user(uid: int, gid: int, groups: list[int]) -> None:
    try:
        step = f"set the additional groups {groups}"
        posix.setgroups(groups)
        step = f"set gid {gid}"
        posix.setgid(gid)
        step = f"set uid {uid}"
        posix.setuid(uid)
    except OSError as err:
        raise StartError(f"cannot {step}: {reason(err)}") from err


def _last_cap() -> int:
    from hostjob.linux.capabilities import last_cap

    return last_cap()
