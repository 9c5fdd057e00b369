"""``pack`` of a directory another user can write.

The owner of the tree races root's ``pack``: ``renameat2(RENAME_EXCHANGE)`` swaps a
file with a symlink to a root-only canary, and a directory with a symlink to the
canary's directory, as fast as it can. A path-based reader (``lstat``, then ``open``
by path, as pack was) is shown to read the canary; pack, reading fd-relative and
checking each file it opens against the walk, either packs the tree as it was or
fails with one line — the canary's content never reaches a layer.
"""

from __future__ import annotations

import gzip
import io
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from hostjob.images import archive
from hostjob.images.errors import ImageError
from tests.helpers import Hostjob

NOBODY = 65534
RACE_SECONDS = 6.0  # each phase stops after this long, or at its first proof

# Runs as the tree's owner, in the tree: swap each pair as fast as it can.
RACER = r"""
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint]
AT_FDCWD, RENAME_EXCHANGE = -100, 2
pairs = [(b"f", b"l"), (b"sub", b"subl")]
deadline = time.monotonic() + float(sys.argv[1])
swaps = 0
print("racing", flush=True)
try:
    while time.monotonic() < deadline:
        for a, b in pairs:
            if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
                swaps += 1
except KeyboardInterrupt:  # SIGINT: the test is done
    pass
print(swaps, flush=True)
"""


@pytest.fixture
def raced_tree(open_tmp: Path):  # type: ignore[no-untyped-def]
    """(tree, canary secret, racer process): nobody's tree, raced by nobody."""
    secret_dir = open_tmp / "secret"
    secret_dir.mkdir(mode=0o700)
    token = os.urandom(16).hex()
    canary = secret_dir / "canary"
    canary.write_text(f"CANARY {token}\n")
    canary.chmod(0o600)
    tree = open_tmp / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "f").write_text("public data\n")
    (tree / "sub" / "canary").write_text("public too\n")
    os.symlink(canary, tree / "l")
    os.symlink(secret_dir, tree / "subl")
    for path in (tree, tree / "sub", tree / "f", tree / "sub" / "canary"):
        os.chown(path, NOBODY, NOBODY)
    for path in (tree / "l", tree / "subl"):
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    racer = subprocess.Popen(
        ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
         "/usr/bin/python3", "-c", RACER, str(3 * RACE_SECONDS + 30)],
        cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert racer.stdout is not None and racer.stdout.readline() == "racing\n", racer
    try:
        yield tree, token, racer
    finally:
        racer.terminate()
        racer.wait(10)


def test_a_path_based_reader_is_fooled(raced_tree) -> None:  # type: ignore[no-untyped-def]
    """The attack works: lstat says a regular file, open by path reads the canary."""
    tree, token, _racer = raced_tree
    deadline = time.monotonic() + RACE_SECONDS
    stolen = 0
    while not stolen and time.monotonic() < deadline:
        for name in ("f", "l"):
            path = tree / name
            try:
                if stat.S_ISREG(os.lstat(path).st_mode) and token in path.read_text():
                    stolen += 1
            except OSError:
                pass
    assert stolen, "the racer never won against lstat + open: the test proves nothing"


def test_pack_never_packs_the_canary(raced_tree, hj: Hostjob) -> None:  # type: ignore[no-untyped-def]
    tree, token, racer = raced_tree
    secret = token.encode()
    outcomes = {"packed": 0, "refused": 0}
    deadline = time.monotonic() + RACE_SECONDS
    while time.monotonic() < deadline:
        layer = io.BytesIO()
        try:
            archive.write_layer(str(tree), layer)
        except ImageError as err:
            message = str(err)
            assert "\n" not in message and "changed while it was being packed" in message
            outcomes["refused"] += 1
            continue
        assert secret not in gzip.decompress(layer.getvalue()), "the canary was packed"
        outcomes["packed"] += 1
    # The command too: a layout, or one line and nothing of the canary.
    layout = tree.parent / "layout"
    done = hj("pack", str(tree), "--to", f"oci:{layout}:v1")
    if done.returncode != 0:
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    for blob in (layout / "blobs" / "sha256").glob("*"):
        data = blob.read_bytes()
        assert secret not in (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    racer.send_signal(signal.SIGINT)
    out, _ = racer.communicate(timeout=10)
    print(f"pack under race: {outcomes}; the racer swapped {out.strip()} times")
    assert int(out) > 0 and outcomes["packed"] + outcomes["refused"] > 0
