"""``hostjob node install`` and ``uninstall`` against a real containerd (Debian's, with its
CRI plugin) whose node is a directory: the installer sees it as the DaemonSet's pod sees the
host (``--host-root``), and containerd runs in a mount namespace of its own where that
directory's ``/etc/containerd`` and ``/opt`` are the ones it reads (the drop-in's import is
an absolute path, the handlers' ``BinaryName`` too). Nothing of the machine's own changes.

What cannot exist here is the node's systemd: the restart is the test's (containerd stopped
and started again); the VM lane restarts it through systemd. The installer's tree is a
small stand-in (its identity file and the two commands, which run this hostjob): the image
``scripts/installer-image`` makes is the VM lane's.

Checked: the drop-in written, the node file given one imports line, the handlers served by
the CRI; an install over an install changes nothing and restarts nothing; uninstall gives
back the node's file byte for byte and removes all the installer made; a configuration the
installer cannot merge safely is one line, exit status 1, and the node unchanged.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.compat import harness
from tests.helpers import hostjob_cmd, hostjob_env, require_peer

if TYPE_CHECKING:
    from collections.abc import Iterator

SOCKET = "/run/ctd.sock"  # on the node (a short path: a unix socket's is at most 107 bytes)
NODE_CONFIG = """version = 2
# the node's own file, as its admin wrote it
root = "{work}/root"
state = "{work}/state"
disabled_plugins = {disabled}

[grpc]
  address = "{node}{socket}"

[ttrpc]
  address = "{node}{socket}.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "{work}/runc-root"
"""


class NodeDir:
    """A node directory and its containerd, which reads the node's /etc/containerd and /opt."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.root = work / "node"
        self.log = work / "containerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        node = self.root
        script = (
            f"mount --make-rprivate / && mount --bind {node}/etc/containerd /etc/containerd"
            f" && mount --bind {node}/opt /opt && exec containerd --config"
            " /etc/containerd/config.toml"
        )
        self.proc = harness.start_daemon(["unshare", "-m", "sh", "-c", script], self.log)
        from hostjob.node import cri

        deadline = time.monotonic() + 30
        cri.wait(f"{node}{SOCKET}", lambda path: bool(cri.version(path)), deadline)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.proc = None

    def restart(self) -> None:
        self.restarts += 1
        self.stop()
        self.start()

    def files(self) -> dict[str, bytes | str]:
        """Every file, link and directory of the node but its sockets: what must be as before."""
        out: dict[str, bytes | str] = {}
        for top, dirs, names in os.walk(self.root):
            for name in [*dirs, *names]:
                path = Path(top) / name
                rel = str(path.relative_to(self.root))
                if rel.startswith("run"):
                    continue
                if path.is_symlink():
                    out[rel] = "-> " + os.readlink(path)
                elif path.is_dir():
                    out[rel] = "dir"
                else:
                    out[rel] = path.read_bytes()
        return out


@pytest.fixture
def node() -> Iterator[NodeDir]:
    if os.geteuid() != 0:
        pytest.fail("the node installer's test needs root", pytrace=False)
    require_peer("containerd", "containerd", "containerd-shim-runc-v2")
    traces = harness.HostTraces()
    work = Path(tempfile.mkdtemp(prefix="hj-node-", dir="/tmp"))
    n = NodeDir(work)
    (n.root / "etc" / "containerd").mkdir(parents=True)
    (n.root / "opt").mkdir()
    (n.root / "run").mkdir()
    disabled = '["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
    disabled += ' "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",'
    disabled += ' "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]'
    text = NODE_CONFIG.format(work=work, node=n.root, socket=SOCKET, disabled=disabled)
    (n.root / "etc" / "containerd" / "config.toml").write_text(text)
    try:
        n.start()
        yield n
    finally:
        n.stop()
        shutil.rmtree(work, ignore_errors=True)
        traces.cleanup()


def installer_tree(work: Path) -> Path:
    """The installer image's /opt/hostjob, in little: its identity and the two commands."""
    tree = work / "image" / "opt" / "hostjob"
    (tree / "bin").mkdir(parents=True)
    (tree / ".hostjob-node").write_text("hostjob test build 1\n")
    hostjob = " ".join(hostjob_cmd())
    for name, flag in (("hostjob", ""), ("hostjob-join", " --default-pod-namespaces=join")):
        (tree / "bin" / name).write_text(f'#!/bin/sh\nexec {hostjob}{flag} "$@"\n')
        (tree / "bin" / name).chmod(0o755)
    return tree


def installer(n: NodeDir) -> object:
    from hostjob.node import install

    class Installer(install.Node):
        def restart(self) -> None:
            n.restart()

        def check_restart(self) -> None:
            pass  # the test restarts its containerd itself

    return Installer(str(n.root), SOCKET, source=str(installer_tree(n.work)), timeout=30)


def served(n: NodeDir) -> set[str]:
    from hostjob.node import cri

    return cri.runtime_handlers(f"{n.root}{SOCKET}")


def test_install_serves_the_handlers_and_uninstall_puts_the_node_back(node: NodeDir) -> None:
    from hostjob.node import install

    before = node.files()
    assert served(node) == {"runc"}
    inst = installer(node)
    install.install(inst)  # type: ignore[arg-type]
    assert node.restarts == 1
    assert served(node) == {"runc", "hostjob", "hostjob-join"}
    config = (node.root / "etc/containerd/config.toml").read_text()
    original = before["etc/containerd/config.toml"]
    assert isinstance(original, bytes)
    added = set(config.splitlines()) - set(original.decode().splitlines())
    assert added == {
        'imports = ["/etc/containerd/hostjob/runtimes.toml"]  # hostjob node installer'
    }
    dropin = (node.root / "etc/containerd/hostjob/runtimes.toml").read_text()
    assert 'BinaryName = "/opt/hostjob/bin/hostjob-join"' in dropin
    assert (node.root / "opt/hostjob/.hostjob-node").read_text() == "hostjob test build 1\n"
    installed = node.files()

    # again: nothing to change, no restart
    install.install(inst)  # type: ignore[arg-type]
    assert node.restarts == 1
    assert node.files() == installed

    assert install.uninstall(inst) is True  # type: ignore[arg-type]
    assert node.restarts == 2
    assert served(node) == {"runc"}
    assert node.files() == before
    # and again: nothing left to undo
    assert install.uninstall(inst) is True  # type: ignore[arg-type]
    assert node.files() == before


def test_an_unmergeable_config_is_one_line_and_leaves_the_node_unchanged(
    node: NodeDir,
) -> None:
    config = node.root / "etc/containerd/config.toml"
    text = config.read_text().replace(
        "# the node's own file", 'imports = [\n  "/etc/containerd/extra.toml",\n]\n#'
    )
    config.write_text(text)
    (node.root / "etc/containerd/extra.toml").write_text("# the admin's own\n")
    node.restart()
    before = node.files()
    done = subprocess.run(
        [*hostjob_cmd(), "node", "install", "--host-root", str(node.root), "--socket", SOCKET],
        capture_output=True, text=True, timeout=60, env=hostjob_env(),
    )  # fmt: skip
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "imports array over several lines" in lines[0], done.stderr
    assert node.files() == before
    assert node.restarts == 1  # the test's own
    assert served(node) == {"runc"}


def test_a_node_file_changed_after_the_install_is_left_and_containerd_still_starts(
    node: NodeDir,
) -> None:
    """The admin edited config.toml after the install: uninstall leaves it (the imports
    line included) and empties the drop-in instead of removing it -- containerd does not
    start when a file it imports is missing."""
    from hostjob.node import install

    inst = installer(node)
    install.install(inst)  # type: ignore[arg-type]
    config = node.root / "etc/containerd/config.toml"
    edited = config.read_text() + "# the admin's later change\n"
    config.write_text(edited)
    assert install.uninstall(inst) is True  # type: ignore[arg-type]
    assert node.restarts == 2  # and it came back: the restart waits for the CRI
    assert served(node) == {"runc"}
    assert config.read_text() == edited
    dropin = node.root / "etc/containerd/hostjob/runtimes.toml"
    assert dropin.read_text() == install.EMPTIED
    assert not (node.root / "opt/hostjob").exists()
    assert install.uninstall(inst) is True  # type: ignore[arg-type]
    assert node.restarts == 2  # nothing left to undo


def test_a_node_without_systemd_is_one_line_and_left_unchanged(node: NodeDir) -> None:
    """The command as the DaemonSet's pod runs it, on a node whose systemd it cannot
    reach (this machine's): refused before any change."""
    before = node.files()
    done = subprocess.run(
        [*hostjob_cmd(), "node", "install", "--host-root", str(node.root), "--socket", SOCKET],
        capture_output=True, text=True, timeout=60, env=hostjob_env(),
    )  # fmt: skip
    assert done.returncode == 1, done
    assert done.stderr.splitlines() == [
        "the host has no systemd socket at /run/systemd/private: the installer restarts"
        " containerd through systemd"
    ], done.stderr
    assert node.files() == before
    assert served(node) == {"runc"}
