"""``pack`` keeps the modes it read: what only its owner could read stays so.

A tree with a 0600 secret (and a 0644 file in a 0700 directory): the layer's tar
keeps each mode, and the files ``pack`` writes (the layer blob in an ``oci:``
layout, the ``oci-archive:`` and the blob inside it) are 0600, so ``nobody`` reads
the secret from none of them, nor from the archive once ``tar`` unpacked it. First
the attack: a blob as open as ``pack`` used to write them all (0644, as a tree
everyone can read still gets) is read by ``nobody``. ``--keep-owner`` changes
owners and privilege bits only, never these modes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from hostjob.images.pack import pack

SECRET = b"the operator's token\n"
REF_NAME = "org.opencontainers.image.ref.name"
Nobody = Callable[..., subprocess.CompletedProcess[str]]


def tree(root: Path, private: bool) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_text("#!/bin/sh\n")
    (root / "bin" / "tool").chmod(0o755)
    (root / "etc").mkdir()
    (root / "etc" / "token").write_bytes(SECRET)
    (root / "etc" / "token").chmod(0o600 if private else 0o644)
    (root / "keys").mkdir(mode=0o700 if private else 0o755)
    (root / "keys" / "k").write_bytes(SECRET)
    (root / "keys" / "k").chmod(0o644)
    return root


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def layer_blob(layout: Path, tag: str = "v1") -> Path:
    """The layer blob of the image ``tag`` of an OCI layout."""
    index = json.loads((layout / "index.json").read_text())
    (desc,) = [d for d in index["manifests"] if d["annotations"][REF_NAME] == tag]
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / desc["digest"].removeprefix("sha256:")).read_text())
    return blobs / manifest["layers"][-1]["digest"].removeprefix("sha256:")


def readable_by_nobody(as_nobody: Nobody, path: Path) -> bool:
    return as_nobody('cat "$1" > /dev/null', "sh", str(path)).returncode == 0


def test_an_open_blob_gives_anyone_the_secret(open_tmp: Path, as_nobody: Nobody) -> None:
    """Where nothing narrows it (a tree anyone can read): the blob is 0644 and nobody
    reads what it holds: a 0600 file packed into such a blob would be theirs too."""
    out = open_tmp / "open"
    pack(str(tree(open_tmp / "public", private=False)), f"oci:{out}:v1")
    blob = layer_blob(out)
    assert mode(blob) == 0o644 and readable_by_nobody(as_nobody, blob)


@pytest.mark.parametrize("keep_owner", [False, True], ids=["owners-0", "keep-owner"])
def test_a_private_file_keeps_its_mode_in_everything_pack_writes(
    open_tmp: Path, as_nobody: Nobody, keep_owner: bool
) -> None:
    src = tree(open_tmp / "private", private=True)
    out = open_tmp / "layout"
    pack(str(src), f"oci:{out}:v1", keep_owner=keep_owner)
    blob = layer_blob(out)
    assert mode(blob) == 0o600 and not readable_by_nobody(as_nobody, blob)
    with tarfile.open(blob) as tf:
        modes = {m.name: stat.S_IMODE(m.mode) for m in tf.getmembers()}
    assert modes["etc/token"] == 0o600 and modes["keys"] == 0o700 and modes["bin/tool"] == 0o755
    assert mode(out / "index.json") == 0o644  # metadata, no file of the tree

    archive = open_tmp / "image.tar"
    pack(str(src), f"oci-archive:{archive}:v1", keep_owner=keep_owner)
    assert mode(archive) == 0o600 and not readable_by_nobody(as_nobody, archive)
    with tarfile.open(archive) as tf:
        entries = {m.name: stat.S_IMODE(m.mode) for m in tf.getmembers() if m.isfile()}
    assert entries[f"blobs/sha256/{blob.name}"] == 0o600
    assert entries["index.json"] == 0o644
    unpacked = open_tmp / "unpacked"
    unpacked.mkdir(mode=0o755)
    subprocess.run(["tar", "-xpf", str(archive), "-C", str(unpacked)], check=True)
    assert not readable_by_nobody(as_nobody, unpacked / "blobs" / "sha256" / blob.name)


def test_a_group_readable_tree_gives_a_group_readable_blob(open_tmp: Path) -> None:
    src = tree(open_tmp / "group", private=False)
    (src / "etc" / "token").chmod(0o640)
    out = open_tmp / "layout"
    pack(str(src), f"oci:{out}:v1")
    assert mode(layer_blob(out)) == 0o640


def test_packing_the_same_tree_again_narrows_an_open_blob(open_tmp: Path) -> None:
    """A layout that already holds the blob (packed when its files were open): the blob
    is made as private as the tree now is."""
    src = tree(open_tmp / "again", private=False)
    out = open_tmp / "layout"
    pack(str(src), f"oci:{out}:v1")
    blob = layer_blob(out)
    os.chmod(src, 0o700)  # the packed tree's root: not in the layer, same digest
    pack(str(src), f"oci:{out}:v2")
    assert layer_blob(out, "v2") == blob and mode(blob) == 0o600
