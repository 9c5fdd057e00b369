"""Property test: whatever a tar holds, unpacking writes nothing outside the layer, and
a failure leaves no layer behind."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostjob.images import unpack
from hostjob.images.errors import ImageError
from tests.fixtures.tars import entry, make_tar

ROOT = os.geteuid() == 0

_component = st.sampled_from(["a", "b", "..", ".", "", ".wh.a", ".wh..wh..opq", ".wh..", "c d"])
_name = st.lists(_component, min_size=1, max_size=4).map("/".join) | st.sampled_from(
    ["/a", "/../a", "a/../../x", "./a/b"]
)


# Where link targets name the directory outside the layer: the test's own directory is
# made when it runs (and removed after), so the strategy names it by this mark.
OUTSIDE = "@OUTSIDE@"


def _entries():
    target = st.sampled_from(
        [
            "/" + OUTSIDE,
            "/" + OUTSIDE + "/secret",
            "/" + OUTSIDE + "/dir",
            "../" * 4 + OUTSIDE,
            "a",
            "a/b",
            "b",
            "/etc",
            "..",
        ]
    )
    kinds = st.sampled_from(
        ["file", "dir", "symlink", "hardlink", "fifo"] + (["char"] if ROOT else [])
    )

    @st.composite
    def one(draw):
        kind = draw(kinds)
        name = draw(_name)
        if kind in ("symlink", "hardlink"):
            return entry(name, kind, linkname=draw(target))
        if kind == "char":
            return entry(name, kind, devmajor=1, devminor=3)
        if kind == "file":
            return entry(name, kind, data=draw(st.binary(max_size=64)))
        return entry(name, kind)

    return st.lists(one(), min_size=1, max_size=8)


def _snapshot(path: str) -> dict[str, tuple[int, int, bytes | None]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st_ = os.lstat(p)
            data = Path(p).read_bytes() if stat.S_ISREG(st_.st_mode) else None
            out[os.path.relpath(p, path)] = (st_.st_mode, st_.st_nlink, data)
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("unpack-property")
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


def _placed(entries: list[dict], outside: str) -> list[dict]:
    """The entries with their link targets naming ``outside``."""

    def place(link: str) -> str:
        return link.replace("/" + OUTSIDE, outside).replace(OUTSIDE, outside.lstrip("/"))

    return [dict(e, linkname=place(e["linkname"])) if "linkname" in e else e for e in entries]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=_entries())
def test_nothing_escapes(base: str, entries: list[dict]) -> None:
    outside = os.path.join(base, "outside")
    layers = os.path.join(base, "layers")
    shutil.rmtree(layers, ignore_errors=True)
    shutil.rmtree(outside, ignore_errors=True)
    os.makedirs(os.path.join(outside, "dir"))
    os.makedirs(layers)
    Path(outside, "secret").write_text("secret")
    before = _snapshot(outside)
    before_base = sorted(os.listdir(base))
    tar = make_tar(_placed(entries, outside))
    try:
        unpack.unpack_to(_Reader(tar), os.path.join(layers, "L"))
    except ImageError as err:
        assert "\n" not in str(err)
        assert os.listdir(layers) == []
    else:
        assert os.listdir(layers) == ["L"]
    assert _snapshot(outside) == before
    assert sorted(os.listdir(base)) == before_base


class _Reader:
    def __init__(self, data: bytes) -> None:
        import io

        self.f = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self.f.read(n)
