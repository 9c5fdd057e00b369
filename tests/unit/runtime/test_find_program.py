"""The program: a bare name is the image's own program first (its ``PATH`` under the
mount point, symlinks resolved inside it), then the host's; on a tmp tree, as the child finds
it after its identity switch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostjob.errors import StartError
from hostjob.runtime.launch import plan as launch_plan
from hostjob.runtime.launch import program as launch_program
from hostjob.specconv.jobconfig import ProcessConfig

IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"


class Tree:
    """A mount point (the image) and a host PATH directory side by side."""

    def __init__(self, tmp: Path) -> None:
        self.mp = tmp / "mp"
        self.host = tmp / "host-bin"
        self.mp.mkdir()
        self.host.mkdir()

    def find(self, name: str, image_path: str = IMAGE_PATH) -> str:
        # The process's PATH as build_env makes it: the host's entries first, then the
        # mount point's copies.
        path = launch_plan.extend_path(str(self.host), str(self.mp))
        return launch_program.find_program(name, "/", path, str(self.mp), image_path)


def program(path: Path, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def test_the_image_has_it(tree: Tree) -> None:
    found = program(tree.mp / "bin" / "top")
    assert tree.find("top") == str(found)


def test_only_the_host_has_it(tree: Tree) -> None:
    found = program(tree.host / "top")
    assert tree.find("top") == str(found)


def test_both_have_it_the_images_wins(tree: Tree) -> None:
    program(tree.host / "top")
    image = program(tree.mp / "usr" / "bin" / "top")
    assert tree.find("top") == str(image)


def test_the_images_path_order_is_kept(tree: Tree) -> None:
    program(tree.mp / "bin" / "top")
    first = program(tree.mp / "usr" / "local" / "bin" / "top")
    assert tree.find("top") == str(first)


def test_neither_has_it(tree: Tree) -> None:
    with pytest.raises(StartError, match=r'exec: "top": executable file not found in \$PATH'):
        tree.find("top")


def test_without_an_image_path_the_host_path_alone_decides(tree: Tree) -> None:
    program(tree.mp / "bin" / "top")
    host = program(tree.host / "top")
    assert tree.find("top", image_path="") == str(host)


def test_a_directory_is_skipped_for_the_hosts_program(tree: Tree) -> None:
    (tree.mp / "bin" / "top").mkdir(parents=True)
    host = program(tree.host / "top")
    assert tree.find("top") == str(host)


def test_a_directory_alone_is_an_error(tree: Tree) -> None:
    (tree.mp / "bin" / "top").mkdir(parents=True)
    with pytest.raises(StartError, match=r'exec: "top": is a directory'):
        tree.find("top")


def test_a_non_executable_alone_is_an_error(tree: Tree) -> None:
    program(tree.mp / "bin" / "top", 0o644)
    with pytest.raises(StartError, match=r'exec: "top": permission denied'):
        tree.find("top")


def test_a_non_executable_is_skipped_for_the_next(tree: Tree) -> None:
    program(tree.mp / "usr" / "bin" / "top", 0o644)
    found = program(tree.mp / "bin" / "top")
    assert tree.find("top") == str(found)


def test_an_absolute_symlink_in_the_image_resolves_inside_it(tree: Tree) -> None:
    """busybox's applets: ``/bin/top -> /bin/busybox``. The host has a ``busybox`` at the
    very path the link names: the image's runs."""
    host_busybox = program(tree.host / "busybox")
    image_busybox = program(tree.mp / str(host_busybox).lstrip("/"))
    (tree.mp / "bin").mkdir()
    (tree.mp / "bin" / "top").symlink_to(host_busybox)
    assert tree.find("top") == str(image_busybox)


def test_an_absolute_symlink_never_reaches_the_host(tree: Tree) -> None:
    """The link's target exists on the host only: not the image's program, so the search
    goes on (and finds nothing: the host's PATH has no ``top``)."""
    host_only = program(tree.host / "elsewhere" / "top")
    (tree.mp / "bin").mkdir()
    (tree.mp / "bin" / "top").symlink_to(host_only)
    with pytest.raises(StartError, match="executable file not found"):
        tree.find("top")


def test_dotdot_in_a_symlink_stops_at_the_mount_point(tree: Tree) -> None:
    target = program(tree.mp / "real" / "top")
    (tree.mp / "bin").mkdir()
    (tree.mp / "bin" / "top").symlink_to("../../../../../../real/top")
    assert tree.find("top") == str(target)


def test_a_symlinked_path_entry_resolves_inside_the_image(tree: Tree) -> None:
    """usrmerge images: ``/bin -> usr/bin`` (relative) and ``/sbin -> /usr/sbin``."""
    found = program(tree.mp / "usr" / "sbin" / "tool")
    (tree.mp / "sbin").symlink_to("/usr/sbin")
    assert tree.find("tool", image_path="/sbin") == str(found)


def test_a_symlink_loop_is_an_error(tree: Tree) -> None:
    (tree.mp / "bin").mkdir()
    (tree.mp / "bin" / "top").symlink_to("/bin/top")
    with pytest.raises(StartError, match="many levels of symbolic links"):
        tree.find("top")


def test_an_entry_already_under_the_mount_point(tree: Tree) -> None:
    found = program(tree.mp / "opt" / "tools" / "top")
    assert tree.find("top", image_path=f"{tree.mp}/opt/tools") == str(found)


def test_relative_image_entries_are_not_searched(tree: Tree) -> None:
    program(tree.mp / "bin" / "top")
    with pytest.raises(StartError, match="executable file not found"):
        tree.find("top", image_path="bin")


def test_the_mount_point_copies_in_the_process_path_resolve_inside_too(tree: Tree) -> None:
    """Even with no image PATH, the process's PATH reaches the image through the mount
    point's copies of the host entries: those follow the image's links inside it too."""
    host_busybox = program(tree.host / "busybox")
    image_busybox = program(tree.mp / str(host_busybox).lstrip("/"))
    copy = tree.mp / str(tree.host).lstrip("/")
    (copy / "applet").parent.mkdir(parents=True, exist_ok=True)
    (copy / "applet").symlink_to(host_busybox)
    assert tree.find("applet", image_path="") == str(image_busybox)


def test_a_path_with_a_slash_is_unchanged(tree: Tree, tmp_path: Path) -> None:
    tool = program(tmp_path / "work" / "bin" / "top")
    program(tree.mp / "bin" / "top")
    path = launch_plan.extend_path(str(tree.host), str(tree.mp))
    found = launch_program.find_program("bin/top", str(tmp_path / "work"), path, str(tree.mp))
    assert found == str(tool)


def test_the_image_path_is_process_envs_before_it_is_extended() -> None:
    mp = "/var/lib/job/rootfs"
    proc = ProcessConfig(
        args=["top"],
        env=["PATH=/ignored", "A=1", "PATH=/bin:$CONTAINER_SANDBOX_MOUNT_POINT/opt"],
    )
    assert launch_plan.image_path(proc, mp) == f"/bin:{mp}/opt"
    assert launch_plan.image_path(ProcessConfig(args=["top"], env=[]), mp) == ""


def test_the_plan_keeps_the_image_path_and_the_process_path_host_first() -> None:
    from hostjob.spec import runtime as wire
    from hostjob.specconv.convert import to_job_config
    from tests.helpers import base_config

    config = base_config("top")
    config["process"]["env"] = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
    job = to_job_config(wire.Spec.decode(config), "/b", "c1")
    plan = launch_plan.plan(job, job.process)
    assert plan.image_path == "/usr/sbin:/usr/bin:/sbin:/bin"
    assert plan.path_value().startswith("/usr/sbin:/usr/bin:/sbin:/bin:")
    assert os.path.join(job.mount_point, "usr/bin") in plan.path_value().split(":")


def test_an_absolute_path_the_host_lacks_resolves_inside_the_image(tree: Tree) -> None:
    """/usr/bin/lua -> /etc/alternatives/lua-interpreter -> /usr/bin/lua5.4, absolute
    links of the image, are followed inside it (the host has none of them)."""
    real = program(tree.mp / "usr" / "bin" / "hostjob-test-lua5.4")
    alternatives = tree.mp / "etc" / "alternatives"
    alternatives.mkdir(parents=True)
    (alternatives / "hostjob-test-lua").symlink_to("/usr/bin/hostjob-test-lua5.4")
    (tree.mp / "usr" / "bin" / "hostjob-test-lua").symlink_to("/etc/alternatives/hostjob-test-lua")
    path = launch_plan.extend_path(str(tree.host), str(tree.mp))
    found, named = launch_program.find_program_named(
        "/usr/bin/hostjob-test-lua", "/", path, str(tree.mp), IMAGE_PATH
    )
    assert found == str(real)
    assert named == f"{tree.mp}/usr/bin/hostjob-test-lua"  # the name it was called by
