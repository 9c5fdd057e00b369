"""Bind mode's links under the rootfs, on a tmp tree, without root: each volume also at
``<rootfs>/<destination>`` (a link to its destination, as the job sees it there)
unless the image has that path; every link and directory recorded before it is made,
and the undo log leaves the rootfs as it was. The namespace that binds the volumes is
root's: tests/integration/test_bind_mode.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hostjob.runtime.sandbox.bindlinks import link_volumes
from hostjob.runtime.sandbox.undo import REMOVE, undo
from hostjob.spec import runtime as wire
from hostjob.specconv.convert import to_job_config
from hostjob.specconv.jobconfig import JobConfig
from tests.helpers import base_config
from tests.unit.runtime.test_sandbox_host import tree, volume


def bind_job(bundle: Path, mounts: list[dict[str, Any]]) -> JobConfig:
    config = base_config(mounts=mounts, annotations={"io.hostjob.mount-mode": "bind"})
    config["root"] = {"path": "rootfs"}
    return to_job_config(wire.Spec.decode(config), str(bundle), "c1")


def test_each_volume_is_linked_where_the_image_has_nothing(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "hosts").write_text("image")
    (rootfs / "var").mkdir()
    (rootfs / "var" / "run").symlink_to("/run")  # the image's own link on the way
    source = tmp_path / "src"
    source.mkdir()
    before = tree(rootfs)
    mounts = [
        volume(source, "/etc/config/app"),  # parents missing in the image: made
        volume(source, "/etc/hosts"),  # the image has it: its own stays
        volume(source, "/var/run/secrets/token"),  # through the image's link: left
        volume(source, "/data"),
    ]
    recorded: list[list[str]] = []
    link_volumes(bind_job(tmp_path, mounts), lambda *e: recorded.extend(e))
    real = os.path.realpath(rootfs)
    assert recorded == [
        [REMOVE, f"{real}/etc/config"],
        [REMOVE, f"{real}/etc/config/app"],
        [REMOVE, f"{real}/data"],
    ]
    assert os.readlink(rootfs / "etc/config/app") == "/etc/config/app"
    assert os.readlink(rootfs / "data") == "/data"
    assert (rootfs / "etc/hosts").read_text() == "image"
    assert not (Path("/run/secrets/token").is_symlink())
    undo(recorded)
    assert tree(rootfs) == before
