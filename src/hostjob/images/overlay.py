"""Overlay mounts of layer dirs: the mechanism under ``hostjob.images.rootfs``.

``mount_overlay(layers, upper, work, target)`` stacks the layer dirs (given bottom
first, as ``ResolvedImage.layer_dirs`` lists them) under a writable upper dir. Many
layers must work, beyond mount(2)'s one-page option string, so the methods are, in
order:

1. the new mount API (``fsopen``/``fsconfig``/``fsmount``/``move_mount``), one
   ``lowerdir+`` per layer (Linux 6.8+): no length limit, no escaping;
2. mount(2) with absolute paths, when the options fit in a page;
3. mount(2) from a forked helper that ``chdir``s into a directory of short symlinks
   (``0``, ``1``, ...) to the layers, so each lower dir costs a few bytes.

A kernel without ``lowerdir+`` refuses it at whichever step it checks: one whose
overlayfs parses parameters itself (6.5 to 6.7) at the first ``fsconfig`` of it; an
older one (6.1, Debian 12; 5.15, Ubuntu 22.04; 5.14, RHEL 9), whose overlayfs still
takes the mount(2) option string, accepts every key there and refuses the string only
at ``FSCONFIG_CMD_CREATE`` (EINVAL, "unrecognized mount option" in the kernel log).
Either way the next method is tried.

``volatile`` (no syncs to the upper dir) is on by default: the upper dir is thrown
away with the container, so losing it in a crash costs nothing.

Every overlay is ``nosuid,nodev``: an image's setuid-root file or device
node is data, never a privilege, for the container's own processes as for any other
local user who can reach the mount.
"""

from __future__ import annotations

import errno
import os

from hostjob.errors import MountError
from hostjob.linux import syscalls

PAGE_LIMIT = 4095  # mount(2) copies at most one page of options, NUL included
# An image's setuid bits, file capabilities and device nodes never take effect.
MOUNT_FLAGS = syscalls.MS_NOSUID | syscalls.MS_NODEV
MOUNT_ATTRS = syscalls.MOUNT_ATTR_NOSUID | syscalls.MOUNT_ATTR_NODEV
METHODS = ("auto", "fsconfig", "mount", "shortnames")


def _escape(path: str) -> str:
    """Escape the characters overlayfs's option parser splits on."""
    return path.replace("\\", "\\\\").replace(":", "\\:").replace(",", "\\,")


def mount_overlay(
    layers: list[str],
    upper: str,
    work: str,
    target: str,
    *,
    volatile: bool = True,
    method: str = "auto",
) -> str:
    """Mount ``layers`` (bottom first) + ``upper``/``work`` at ``target``.

    ``upper``, ``work`` and ``target`` must exist; ``upper`` and ``work`` on the same
    filesystem. Returns the method used. Raises ``MountError``.
    """
    if method not in METHODS:
        raise MountError(f"unknown overlay mount method {method!r}")
    if not layers:
        raise MountError("an overlay needs at least one lower layer")
    lowers = [os.path.abspath(p) for p in reversed(layers)]  # overlayfs wants top first
    upper, work, target = (os.path.abspath(p) for p in (upper, work, target))
    attempts = [volatile, False] if volatile else [False]
    last: MountError | None = None
    for use_volatile in attempts:
        try:
            return _mount(lowers, upper, work, target, use_volatile, method)
        except MountError as err:
            last = err
            if getattr(err, "errno", None) != errno.EINVAL:
                break
    assert last is not None
    raise last


class _Failed(MountError):
    def __init__(self, message: str, err: int) -> None:
        super().__init__(message)
        self.errno = err


def _mount(
    lowers: list[str], upper: str, work: str, target: str, volatile: bool, method: str
) -> str:
    if method in ("auto", "fsconfig"):
        try:
            _mount_fsconfig(lowers, upper, work, target, volatile)
            return "fsconfig"
        except _Unsupported as err:
            if method == "fsconfig":
                raise _Failed(
                    "the new mount API with lowerdir+ is not supported", errno.ENOSYS
                ) from err
    options = f"upperdir={_escape(upper)},workdir={_escape(work)}"
    if volatile:
        options += ",volatile"
    data = f"lowerdir={':'.join(_escape(p) for p in lowers)},{options}"
    if method == "mount" or (method == "auto" and len(data) < PAGE_LIMIT):
        try:
            syscalls.mount("overlay", target, "overlay", MOUNT_FLAGS, data)
        except OSError as err:
            raise _Failed(
                f"cannot mount overlay at {target}: {err.strerror}", err.errno or 0
            ) from err
        return "mount"
    _mount_shortnames(lowers, upper, work, target, volatile)
    return "shortnames"


class _Unsupported(Exception):
    pass


def _mount_fsconfig(lowers: list[str], upper: str, work: str, target: str, volatile: bool) -> None:
    try:
        fs = syscalls.fsopen("overlay")
    except OSError as err:
        if err.errno in (errno.ENOSYS, errno.EPERM, errno.ENODEV):
            raise _Unsupported from err
        raise _Failed(f"fsopen(overlay): {err.strerror}", err.errno or 0) from err
    try:
        try:
            syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "source", "hostjob")
            syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "lowerdir+", lowers[0])
        except OSError as err:
            if err.errno == errno.EINVAL:  # no lowerdir+ before Linux 6.8
                raise _Unsupported from err
            raise _Failed(_context_error(fs, "lowerdir+", err), err.errno or 0) from err
        try:
            for lower in lowers[1:]:
                syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "lowerdir+", lower)
        except OSError as err:
            if err.errno == errno.EINVAL:
                # Before 6.5 each option is only appended to one page of text, parsed
                # at FSCONFIG_CMD_CREATE: many layers overflow it here ("Cumulative
                # options too large"); mount(2) and its short names take them.
                raise _Unsupported from err
            raise _Failed(_context_error(fs, "lowerdir+", err), err.errno or 0) from err
        try:
            syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "upperdir", upper)
            syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_STRING, "workdir", work)
            if volatile:
                syscalls.fsconfig(fs, syscalls.FSCONFIG_SET_FLAG, "volatile")
        except OSError as err:
            raise _Failed(_context_error(fs, "overlay", err), err.errno or 0) from err
        try:
            syscalls.fsconfig(fs, syscalls.FSCONFIG_CMD_CREATE)
        except OSError as err:
            if err.errno == errno.EINVAL:
                # Before 6.5 the option string is parsed only here, and "lowerdir+"
                # is one it does not know: mount(2) says whether anything else is
                # wrong (with volatile, then without: mount_overlay).
                raise _Unsupported from err
            raise _Failed(_context_error(fs, "overlay", err), err.errno or 0) from err
        try:
            mnt = syscalls.fsmount(fs, attr_flags=MOUNT_ATTRS)
        except OSError as err:
            raise _Failed(_context_error(fs, "overlay", err), err.errno or 0) from err
        try:
            syscalls.move_mount(
                mnt, "", syscalls.AT_FDCWD, target, syscalls.MOVE_MOUNT_F_EMPTY_PATH
            )
        except OSError as err:
            raise _Failed(
                f"cannot attach overlay at {target}: {err.strerror}", err.errno or 0
            ) from err
        finally:
            os.close(mnt)
    finally:
        os.close(fs)


def _context_error(fs: int, what: str, err: OSError) -> str:
    messages = [m.partition(" ")[2] or m for m in syscalls.fs_context_messages(fs)]
    detail = "; ".join(messages) or err.strerror or str(err)
    return f"cannot mount overlay ({what}): {detail}"


def _mount_shortnames(
    lowers: list[str], upper: str, work: str, target: str, volatile: bool
) -> None:
    """mount(2) with ``lowerdir=0:1:...`` relative to a dir of symlinks, in a child."""
    import tempfile

    links = tempfile.mkdtemp(prefix=".lower-", dir=os.path.dirname(upper))
    try:
        for i, lower in enumerate(lowers):
            os.symlink(lower, os.path.join(links, f"{i:x}"))
        options = f"upperdir={_escape(upper)},workdir={_escape(work)}"
        if volatile:
            options += ",volatile"
        data = f"lowerdir={':'.join(f'{i:x}' for i in range(len(lowers)))},{options}"
        if len(data) >= PAGE_LIMIT:
            raise _Failed(f"too many layers ({len(lowers)}) for one overlay mount", errno.E2BIG)
        pid = os.fork()
        if pid == 0:  # the child: chdir, mount, report errno as the exit status
            code = 0
            try:
                os.chdir(links)
                syscalls.mount("overlay", target, "overlay", MOUNT_FLAGS, data)
            except OSError as err:
                code = err.errno or 1
            except BaseException:
                code = 255
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            reason = os.strerror(code) if 0 < code < 255 else "helper failed"
            raise _Failed(f"cannot mount overlay at {target}: {reason}", code)
    finally:
        from hostjob.linux import fsremove

        fsremove.remove_tree(links, ignore_errors=True)


def unmount(target: str) -> None:
    """Unmount ``target`` if it is mounted; a busy mount is detached lazily."""
    from hostjob.linux import fsutil

    # Its parent reached without following a symlink, itself never followed.
    target = os.path.abspath(target)
    target = os.path.join(fsutil.canonical(os.path.dirname(target)), os.path.basename(target))
    for _ in range(16):  # stacked mounts
        try:
            if not fsutil.unmount(target, 0):
                return
        except OSError as err:
            if err.errno == errno.EBUSY:
                fsutil.unmount(target, syscalls.MNT_DETACH)
            elif err.errno in (errno.EINVAL, errno.ELOOP, errno.ENOTDIR):
                return  # not a mount point after all, or not one reached without symlinks
            else:
                raise MountError(f"cannot unmount {target}: {err.strerror}") from err
