"""Which overlay mount method is used, kernel by kernel, without root: a fake ``syscalls``
layer answers the new mount API as each kernel does, and mount(2) succeeds, so each
refusal point shows where ``mount_overlay`` falls back.

* 6.8 and later: ``lowerdir+`` works, the new mount API mounts;
* 6.5 to 6.7: overlayfs parses its parameters itself and refuses ``lowerdir+`` at the
  first ``fsconfig`` of it (EINVAL);
* before 6.5 (6.1, Debian 12; 5.15; 5.14): the legacy parser takes any key and the
  option string is refused only at ``FSCONFIG_CMD_CREATE`` (EINVAL) -- where nothing
  fell back, so every image container failed on these kernels -- or, with many
  layers, at the ``lowerdir+`` that overflows its one page of text (EINVAL,
  "Cumulative options too large");
* no new mount API at all (ENOSYS at ``fsopen``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from hostjob.errors import MountError
from hostjob.images import overlay


class FakeKernel:
    """The new mount API and mount(2), as a kernel with ``refuse`` answers them."""

    def __init__(self, refuse: str | None, mount_errno: int = 0) -> None:
        self.refuse = refuse  # "fsopen", "lowerdir+", "second lowerdir+", "create", or None
        self.mount_errno = mount_errno
        self.calls: list[str] = []
        self.mounted: list[str] = []

    def fsopen(self, name: str, flags: int = 0) -> int:
        self.calls.append("fsopen")
        if self.refuse == "fsopen":
            raise OSError(errno.ENOSYS, "Function not implemented")
        return os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)

    def fsconfig(self, fd: int, cmd: int, key: str | None = None, value: str | None = None) -> None:
        if cmd == overlay.syscalls.FSCONFIG_CMD_CREATE:
            self.calls.append("create")
            if self.refuse == "create":
                raise OSError(errno.EINVAL, "Invalid argument")
            return
        self.calls.append(f"fsconfig {key}")
        if key == "lowerdir+" and self.refuse == "lowerdir+":
            raise OSError(errno.EINVAL, "Invalid argument")
        if self.refuse == "second lowerdir+" and self.calls.count("fsconfig lowerdir+") == 2:
            raise OSError(errno.EINVAL, "Invalid argument")

    def fsmount(self, fd: int, flags: int = 0, attr_flags: int = 0) -> int:
        self.calls.append("fsmount")
        return os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)

    def move_mount(self, *args: object) -> None:
        self.calls.append("move_mount")
        self.mounted.append("fsconfig")

    def mount(self, source: str, target: str, fstype: str, flags: int, data: str) -> None:
        self.calls.append("mount")
        if self.mount_errno:
            raise OSError(self.mount_errno, os.strerror(self.mount_errno))
        self.mounted.append(data)

    def fs_context_messages(self, fd: int) -> list[str]:
        return []


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name in ("l1", "l2", "upper", "work", "target"):
        (tmp_path / name).mkdir()
        out[name] = str(tmp_path / name)
    return out


def mount_with(kernel: FakeKernel, dirs: dict[str, str], monkeypatch, **kw) -> str:  # type: ignore[no-untyped-def]
    for name in ("fsopen", "fsconfig", "fsmount", "move_mount", "mount", "fs_context_messages"):
        monkeypatch.setattr(overlay.syscalls, name, getattr(kernel, name))
    return overlay.mount_overlay(
        [dirs["l1"], dirs["l2"]], dirs["upper"], dirs["work"], dirs["target"], **kw
    )


def test_a_kernel_with_lowerdir_plus_uses_the_new_mount_api(dirs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    kernel = FakeKernel(None)
    assert mount_with(kernel, dirs, monkeypatch) == "fsconfig"
    assert kernel.calls.count("fsconfig lowerdir+") == 2 and "mount" not in kernel.calls


@pytest.mark.parametrize(
    ("refuse", "kernel_is"),
    [
        ("fsopen", "without the new mount API"),
        ("lowerdir+", "6.5-6.7"),
        ("create", "before 6.5"),
        ("second lowerdir+", "before 6.5, a page of layers"),
    ],
)
def test_each_refusal_point_falls_back_to_mount(
    dirs, monkeypatch, refuse: str, kernel_is: str
) -> None:  # type: ignore[no-untyped-def]
    kernel = FakeKernel(refuse)
    assert mount_with(kernel, dirs, monkeypatch) == "mount", kernel_is
    assert kernel.calls[-1] == "mount" and "fsmount" not in kernel.calls
    (data,) = kernel.mounted
    top, bottom = os.path.realpath(dirs["l2"]), os.path.realpath(dirs["l1"])
    assert data.startswith(f"lowerdir={top}:{bottom},upperdir=") and data.endswith(",volatile")


def test_a_real_error_of_an_old_kernel_is_still_told(dirs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """EINVAL at create was not lowerdir+ after all (an upper dir overlayfs refuses):
    mount(2) says so, with volatile and then without, and the error is mount(2)'s."""
    kernel = FakeKernel("create", mount_errno=errno.EINVAL)
    with pytest.raises(MountError, match=r"cannot mount overlay at .*: Invalid argument"):
        mount_with(kernel, dirs, monkeypatch)
    assert kernel.calls.count("mount") == 2  # volatile, then not
    assert kernel.calls.count("create") == 2


def test_method_fsconfig_alone_says_it_is_not_supported(dirs, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MountError, match=r"new mount API with lowerdir\+ is not supported"):
        mount_with(FakeKernel("create"), dirs, monkeypatch, method="fsconfig")
