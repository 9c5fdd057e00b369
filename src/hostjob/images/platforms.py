"""Platforms: the host's, parsing ``os/arch[/variant]``, and picking from an index."""

from __future__ import annotations

import platform as _platform
from typing import TYPE_CHECKING

from hostjob.images.errors import ImageError, InvalidReference

if TYPE_CHECKING:
    from hostjob.images.imagespec import Descriptor

# platform.machine() -> (GOARCH, variant)
_MACHINES = {
    "x86_64": ("amd64", None),
    "amd64": ("amd64", None),
    "aarch64": ("arm64", "v8"),
    "arm64": ("arm64", "v8"),
    "armv8l": ("arm", "v8"),
    "armv7l": ("arm", "v7"),
    "armv6l": ("arm", "v6"),
    "armv5tel": ("arm", "v5"),
    "i386": ("386", None),
    "i686": ("386", None),
    "ppc64le": ("ppc64le", None),
    "s390x": ("s390x", None),
    "riscv64": ("riscv64", None),
    "mips64": ("mips64", None),
    "loongarch64": ("loong64", None),
}


class Platform:
    __slots__ = ("architecture", "os", "variant")

    def __init__(self, os: str, architecture: str, variant: str | None = None) -> None:
        self.os = os
        self.architecture = architecture
        self.variant = variant

    def __str__(self) -> str:
        out = f"{self.os}/{self.architecture}"
        return f"{out}/{self.variant}" if self.variant else out

    def __repr__(self) -> str:
        return f"Platform({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Platform and str(other) == str(self)

    def __hash__(self) -> int:
        return hash(str(self))


# What an architecture or a variant may hold: they are shown in tables and chosen
# by, so an image's config gets no terminal escape or newline into them.
_WORD = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")


def check_field(field: str, value: str | None, what: str = "image config") -> None:
    """An ``ImageError`` unless ``value`` (absent, or ``[a-z0-9._-]*``) is fit to be
    a platform's ``field``."""
    if value is not None and not _WORD.issuperset(value):
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise ImageError(f"{what}: {field} {shown!r} is not made of [a-z0-9._-]: refused")


def host() -> Platform:
    machine = _platform.machine().lower()
    arch, variant = _MACHINES.get(machine, (machine, None))
    return Platform("linux", arch, variant)


def parse(text: str) -> Platform:
    """``linux/arm64``, ``linux/arm/v7``, ``arm64`` (os defaults to linux)."""
    parts = text.strip().lower().split("/")
    if len(parts) == 1:
        parts.insert(0, "linux")
    if not 2 <= len(parts) <= 3 or not all(parts):
        raise InvalidReference(f"invalid platform {text!r}: expected os/arch[/variant]")
    os_name, arch = parts[0], parts[1]
    variant = parts[2] if len(parts) == 3 else None
    arch, implied = {"x86_64": ("amd64", None), "aarch64": ("arm64", None)}.get(arch, (arch, None))
    if arch == "arm64" and variant is None:
        variant = implied
    return Platform(os_name, arch, variant)


def _variant_rank(wanted: Platform, variant: str | None) -> int | None:
    """How well ``variant`` fits (lower is better), or None if it does not."""
    if wanted.variant is None or variant is None or variant == wanted.variant:
        return 0 if variant == wanted.variant else 1
    if wanted.architecture == "arm" and variant.startswith("v") and wanted.variant.startswith("v"):
        try:
            have, want = int(variant[1:]), int(wanted.variant[1:])
        except ValueError:
            return None
        return 1 + want - have if have <= want else None  # older ARM code runs on newer
    return None


def choose(manifests: list[Descriptor], wanted: Platform) -> Descriptor:
    """The index entry for ``wanted``; an ``ImageError`` listing what the index has."""
    best: tuple[int, int] | None = None
    found: Descriptor | None = None
    for position, desc in enumerate(manifests):
        plat = desc.platform
        if plat is None or plat.os != wanted.os or plat.architecture != wanted.architecture:
            continue
        rank = _variant_rank(wanted, plat.variant)
        if rank is None:
            continue
        if best is None or (rank, position) < best:
            best, found = (rank, position), desc
    if found is None:
        have = sorted(
            {
                str(
                    Platform(
                        d.platform.os or "?", d.platform.architecture or "?", d.platform.variant
                    )
                )
                for d in manifests
                if d.platform is not None
            }
        )
        raise ImageError(
            f"no image for platform {wanted} in the index (it has: {', '.join(have) or 'none'})"
        )
    return found
