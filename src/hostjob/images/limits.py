"""What one image may unpack to: bytes of file data and inodes, across its layers.

A layer blob of a few KiB can inflate to GiBs (a gzip or zstd bomb, a sparse entry)
or to millions of empty files, and fill the store's filesystem. A pull (an import,
``run IMAGE``'s pull) charges every file byte and every inode it writes to one
``Budget``, shared by the layers it unpacks at once; past either limit the unpack
fails with ``UnpackLimit`` and the pull takes back what it had added.

The limits are the operator's (``hostjob.images.options.UnpackLimits``, from
``--max-image-size`` and ``--max-image-inodes``), else the store's defaults: the
filesystem's free space and free inodes (``statvfs``, what an unprivileged user may
use) less a reserve, 5% of the filesystem and at most 1 GiB and 100,000 inodes, so
that a pull never takes the last of either.
"""

from __future__ import annotations

import _thread
import os
from typing import TYPE_CHECKING

from hostjob.images.errors import UnpackLimit
from hostjob.units import human_size

if TYPE_CHECKING:
    from hostjob.images.options import UnpackLimits

RESERVE_FRACTION = 20  # 1/20: 5% of the filesystem
RESERVE_BYTES = 1 << 30
RESERVE_INODES = 100_000


class Budget:
    """Bytes and inodes left to one image's unpacking (None: no limit)."""

    __slots__ = ("bytes_left", "bytes_why", "inodes_left", "inodes_why", "lock")

    def __init__(
        self,
        max_bytes: int | None,
        max_inodes: int | None,
        bytes_why: str = "--max-image-size",
        inodes_why: str = "--max-image-inodes",
    ) -> None:
        self.bytes_left = max_bytes
        self.inodes_left = max_inodes
        self.bytes_why = bytes_why
        self.inodes_why = inodes_why
        self.lock = _thread.allocate_lock()  # layers unpack in threads

    def data(self, size: int) -> None:
        """Charge ``size`` bytes of file data, before they are written."""
        if self.bytes_left is None:
            return
        with self.lock:
            self.bytes_left -= size
            over = self.bytes_left < 0
        if over:
            raise UnpackLimit(
                f"the image unpacks to more than its limit of bytes ({self.bytes_why}):"
                " the pull stops and keeps nothing of it"
            )

    def inode(self) -> None:
        """Charge one inode (a file, directory, link, device), before it is made."""
        if self.inodes_left is None:
            return
        with self.lock:
            self.inodes_left -= 1
            over = self.inodes_left < 0
        if over:
            raise UnpackLimit(
                f"the image unpacks to more than its limit of inodes ({self.inodes_why}):"
                " the pull stops and keeps nothing of it"
            )


def budget(store_path: str, given: UnpackLimits | None = None) -> Budget:
    """The budget of one image pulled into the store at ``store_path``: the limits
    given, else the store filesystem's free space and inodes less the reserve."""
    max_bytes = None if given is None else given.max_bytes
    max_inodes = None if given is None else given.max_inodes
    bytes_why = f"--max-image-size {human_size(max_bytes, binary=True)}"
    inodes_why = f"--max-image-inodes {max_inodes}"
    if max_bytes is None or max_inodes is None:
        try:
            fs = os.statvfs(store_path)
        except OSError:
            fs = None
        if fs is not None and max_bytes is None:
            size = fs.f_blocks * fs.f_frsize
            free = fs.f_bavail * fs.f_frsize
            reserve = min(size // RESERVE_FRACTION, RESERVE_BYTES)
            max_bytes = max(free - reserve, 0)
            bytes_why = (
                f"the store's free space, {human_size(free, binary=True)}, less a reserve of"
                f" {human_size(reserve, binary=True)}; --max-image-size sets it"
            )
        if fs is not None and max_inodes is None and fs.f_files > 0:
            reserve = min(fs.f_files // RESERVE_FRACTION, RESERVE_INODES)
            max_inodes = max(fs.f_favail - reserve, 0)
            inodes_why = (
                f"the store's {fs.f_favail} free inodes less a reserve of {reserve};"
                " --max-image-inodes sets it"
            )
    return Budget(max_bytes, max_inodes, bytes_why, inodes_why)
