"""Host platform mapping and index selection."""

from __future__ import annotations

import pytest

from hostjob.images import platforms
from hostjob.images.errors import ImageError, InvalidReference
from hostjob.images.imagespec import Descriptor, Platform

D = "sha256:" + "0" * 64


def desc(plat: str, n: int = 0) -> Descriptor:
    parts = plat.split("/")
    return Descriptor(
        digest="sha256:" + f"{n:064x}",
        size=1,
        platform=Platform(
            os=parts[0], architecture=parts[1], variant=parts[2] if len(parts) > 2 else None
        ),
    )


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        ("x86_64", "linux/amd64"),
        ("aarch64", "linux/arm64/v8"),
        ("armv7l", "linux/arm/v7"),
        ("i686", "linux/386"),
    ],
)
def test_host_mapping(monkeypatch, machine, expected):
    monkeypatch.setattr(platforms._platform, "machine", lambda: machine)
    assert str(platforms.host()) == expected


def test_parse():
    assert str(platforms.parse("linux/arm64")) == "linux/arm64"
    assert str(platforms.parse("arm64")) == "linux/arm64"
    assert str(platforms.parse("linux/arm/v7")) == "linux/arm/v7"
    assert str(platforms.parse("linux/x86_64")) == "linux/amd64"
    for bad in ("", "a/b/c/d", "linux/"):
        with pytest.raises(InvalidReference):
            platforms.parse(bad)


def test_choose():
    index = [
        desc("linux/amd64", 1),
        desc("linux/arm64/v8", 2),
        desc("linux/arm/v6", 3),
        desc("linux/arm/v7", 4),
        desc("windows/amd64", 5),
    ]
    assert platforms.choose(index, platforms.parse("linux/amd64")).digest.endswith("1")
    assert platforms.choose(index, platforms.Platform("linux", "arm64", "v8")).digest.endswith("2")
    assert platforms.choose(index, platforms.parse("linux/arm64")).digest.endswith("2")
    assert platforms.choose(index, platforms.parse("linux/arm/v7")).digest.endswith("4")
    assert platforms.choose(index[:3], platforms.parse("linux/arm/v7")).digest.endswith("3"), (
        "v6 runs on v7"
    )
    with pytest.raises(ImageError, match=r"no image for platform linux/arm/v5 .*linux/amd64"):
        platforms.choose(index, platforms.parse("linux/arm/v5"))
    with pytest.raises(ImageError, match="linux/s390x"):
        platforms.choose(index, platforms.parse("linux/s390x"))
    # Entries without a variant match any wanted variant.
    assert platforms.choose(
        [desc("linux/arm64", 9)], platforms.parse("linux/arm64/v8")
    ).digest.endswith("9")


@pytest.mark.parametrize("value", ["amd64", "arm64", "v8", "ppc64le", "a.b_c-1", "", None])
def test_a_platform_field_of_the_usual_words_is_taken(value: str | None) -> None:
    platforms.check_field("architecture", value)


@pytest.mark.parametrize(
    "value", ["amd64\x1b]0;t\x07", "v8\nfake row", "AMD64", "x86 64", "arm/v7", "\x9b", "é"]
)
def test_a_platform_field_with_anything_else_is_refused(value: str) -> None:
    with pytest.raises(ImageError) as info:
        platforms.check_field("variant", value, "config sha256:ab")
    message = str(info.value)
    assert message.startswith("config sha256:ab: variant ") and message.isprintable()
