"""Credentials kept out of argv (``remotes/credentials.py``): ``--creds -`` read from
stdin, and ``--creds USER:PASS`` overwritten in the process's own argument memory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hostjob.images.errors import RegistryError
from hostjob.images.remotes.credentials import read_creds, take_creds
from tests.helpers import REPO

HIDE = """
import os, sys
from hostjob.images.remotes.credentials import hide_from_cmdline
print(hide_from_cmdline(os.environ["SECRET"]))
sys.stdout.flush()
sys.stdout.buffer.write(open("/proc/self/cmdline", "rb").read())
"""


def hidden(secret: str, *words: str) -> tuple[str, list[bytes]]:
    done = subprocess.run(
        [sys.executable, "-c", HIDE, *words],
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "SECRET": secret},
    )
    first, _, cmdline = done.stdout.partition(b"\n")
    return first.decode(), cmdline.rstrip(b"\0").split(b"\0")


@pytest.mark.parametrize(
    "form",
    [["--creds", "alice:s3cret"], ["--creds=alice:s3cret"], ["-creds", "alice:s3cret"]],
    ids=["two words", "one word", "one dash"],
)
def test_creds_are_overwritten_in_argv(form: list[str]) -> None:
    result, words = hidden("alice:s3cret", "pull", *form, "--plain-http", "r/x:1")
    assert result == "True"
    after = words[words.index(b"pull") :]
    shown = [w.encode().replace(b"alice:s3cret", b"***") for w in form]
    assert after[: 1 + len(shown) + 2] == [b"pull", *shown, b"--plain-http", b"r/x:1"]
    assert all(w == b"" for w in after[1 + len(shown) + 2 :])  # the space left, zeroed


def test_only_the_flags_value_is_touched() -> None:
    """The same text elsewhere is not the flag's: hiding the flag's copy would not hide
    the secret, so nothing is rewritten and the caller is told (a warning follows)."""
    result, words = hidden("a:b", "pull", "--creds", "a:b", "a:b")
    assert result == "False"
    assert words[-4:] == [b"pull", b"--creds", b"a:b", b"a:b"]


def test_the_stdin_line_is_read_and_nothing_after_it() -> None:
    read, write = os.pipe()
    os.write(write, b"alice:pa:ss\r\nthe container's input\n")
    os.close(write)
    try:
        assert read_creds(read) == "alice:pa:ss"
        assert os.read(read, 100) == b"the container's input\n"
    finally:
        os.close(read)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "no USER:PASSWORD line on stdin"),
        (b"\n", "no USER:PASSWORD line on stdin"),
        (b"nocolon\n", "USER:PASSWORD"),
        (b"x" * 5000, "longer than 4 KiB"),
        (b"u:\xff\n", "not UTF-8"),
    ],
)
def test_a_bad_stdin_line_is_one_error(data: bytes, message: str) -> None:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    try:
        with pytest.raises(RegistryError, match=message):
            read_creds(read)
    finally:
        os.close(read)


def test_take_creds_passes_nothing_through() -> None:
    assert take_creds(None) is None


def test_take_creds_gives_the_pair_the_library_takes() -> None:
    assert take_creds("alice:pa:ss") == ("alice", "pa:ss")
    with pytest.raises(RegistryError, match="USER:PASSWORD"):
        take_creds("")
