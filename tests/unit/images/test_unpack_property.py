"""Property test: whatever a tar holds, unpacking writes nothing outside the layer, and
a failure leaves no layer behind."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostjob.errors import ImageError
from hostjob.images import unpack
from tests.fixtures.tars import entry, make_tar

ROOT = os.geteuid() == 0

_component = st.sampled_from(["a", "b", "..", ".", "", ".wh.a", ".wh..wh..opq", ".wh..", "c d"])
_name = st.lists(_component, min_size=1, max_size=4).map("/".join) | st.sampled_from(
    ["/a", "/../a", "a/../../x", "./a/b"]
)


def _entries(outside: str):
    target = st.sampled_from(
        [
            outside,
            outside + "/secret",
            outside + "/dir",
            "../" * 4 + outside.lstrip("/"),
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


_BASE = tempfile.mkdtemp(prefix="hostjob-prop-")
_OUTSIDE = os.path.join(_BASE, "outside")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=_entries(_OUTSIDE))
def test_nothing_escapes(entries):
    layers = os.path.join(_BASE, "layers")
    shutil.rmtree(layers, ignore_errors=True)
    shutil.rmtree(_OUTSIDE, ignore_errors=True)
    os.makedirs(os.path.join(_OUTSIDE, "dir"))
    os.makedirs(layers)
    Path(_OUTSIDE, "secret").write_text("secret")
    before = _snapshot(_OUTSIDE)
    before_base = sorted(os.listdir(_BASE))
    tar = make_tar(entries)
    try:
        unpack.unpack_to(_Reader(tar), os.path.join(layers, "L"))
    except ImageError as err:
        assert "\n" not in str(err)
        assert os.listdir(layers) == []
    else:
        assert os.listdir(layers) == ["L"]
    assert _snapshot(_OUTSIDE) == before
    assert sorted(os.listdir(_BASE)) == before_base


class _Reader:
    def __init__(self, data: bytes) -> None:
        import io

        self.f = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self.f.read(n)


def teardown_module() -> None:
    shutil.rmtree(_BASE, ignore_errors=True)
