"""An image's labels are data, never policy.

A hostile image labels itself with the annotations that steer the runtime
(inherit-user, the mount point and mode, hcsshim's keys). The same keys given by the
operator (``--annotation``) do take effect, which shows they are worth stealing; from
the image they change nothing: ``--user`` holds, the image's ``User`` holds, nothing
is mounted at or created under the directories the labels name, and ``inspect`` still
shows the labels.
"""

from __future__ import annotations

import json
from pathlib import Path

from hostjob.linux.mountinfo import is_mountpoint
from tests.helpers import Hostjob, new_id

SHOW = 'id -u; echo "$CONTAINER_SANDBOX_MOUNT_POINT"'


def hostile_image(hj_open: Hostjob, tmp: Path, *extra: str) -> tuple[str, Path, Path]:
    """(reference, a host dir the labels mount over, a host dir they would create)."""
    tree = tmp / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "motd").write_text("hostile\n")
    victim = tmp / "victim"
    victim.mkdir()
    location = tmp / "location"
    layout = tmp / "layout"
    hj_open.ok(
        "pack", str(tree), "--to", f"oci:{layout}:v1", "--cmd", "sh", "--cmd", "-c",
        "--cmd", SHOW, *extra,
        "--label", "io.hostjob.inherit-user=true",
        "--label", f"io.hostjob.rootfs-mount-point={victim}",
        "--label", "io.hostjob.mount-mode=host",
        "--label", "microsoft.com/hostprocess-inherit-user=true",
        "--label", "microsoft.com/hostprocess-container=true",
        "--label", f"microsoft.com/hostprocess-rootfs-location={location}",
    )  # fmt: skip
    return f"oci:{layout}:v1", victim, location


def test_the_label_keys_steer_the_runtime_when_the_operator_gives_them(
    hj_open: Hostjob, open_tmp: Path
) -> None:
    ref, _victim, _location = hostile_image(hj_open, open_tmp, "--user", "65534:65534")
    store = str(open_tmp / "store")
    chosen = open_tmp / "operators-choice"
    out = hj_open.ok("run", "--rm", "-q", "--store", store,
                "--annotation", f"io.hostjob.rootfs-mount-point={chosen}",
                "--annotation", "io.hostjob.inherit-user=true", ref)  # fmt: skip
    assert out == f"0\n{chosen}\n", "an operator's annotation beats the image's User"


def test_hostile_labels_change_nothing(hj_open: Hostjob, open_tmp: Path) -> None:
    ref, victim, location = hostile_image(hj_open, open_tmp)
    store = str(open_tmp / "store")
    cid = new_id()
    script = f'{SHOW}; grep -c " {victim} " /proc/self/mountinfo || true'
    out = hj_open.ok("run", "--rm", "-q", "--store", store, "--name", cid,
                "--user", "65534:65534", ref, "sh", "-c", script)  # fmt: skip
    assert out == f"65534\n{hj_open.root / cid / 'rootfs'}\n0\n"
    assert not is_mountpoint(str(victim)) and list(victim.iterdir()) == []
    assert not location.exists()
    labels = json.loads(hj_open.ok("inspect", "--store", store, "localhost/layout:v1"))["config"][
        "config"
    ]["Labels"]
    assert labels["io.hostjob.rootfs-mount-point"] == str(victim), "the labels stay data"


def test_the_images_user_holds_against_its_labels(hj_open: Hostjob, open_tmp: Path) -> None:
    ref, victim, _location = hostile_image(hj_open, open_tmp, "--user", "65534:65534")
    cid = new_id()
    out = hj_open.ok("run", "--rm", "-q", "--store", str(open_tmp / "store"), "--name", cid, ref)
    assert out == f"65534\n{hj_open.root / cid / 'rootfs'}\n"
    assert list(victim.iterdir()) == []


def test_an_explicit_user_wins_over_an_operators_inherit_annotation(
    hj_open: Hostjob, open_tmp: Path
) -> None:
    ref, _victim, _location = hostile_image(hj_open, open_tmp)
    out = hj_open.ok("run", "--rm", "-q", "--store", str(open_tmp / "store"),
                "--annotation", "io.hostjob.inherit-user=true",
                "--user", "65534:65534", ref, "id", "-u")  # fmt: skip
    assert out == "65534\n"
