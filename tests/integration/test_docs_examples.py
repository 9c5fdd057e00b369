"""Every example of the pages users read runs, as typed, and prints what its page says.

The pages are README.md and docs/ (docs/commands/ too); an example is a fenced block marked
``example`` (tests/doc_blocks.py says how blocks are marked). Each page is one test: its
examples run in order, after the examples they name with ``after=`` (their
preconditions, documented on the pages too), each in a shell of its own started in this
repository's top directory, as root. A block must exit 0, and print the lines of the
``text output`` block that follows it.

The examples use a reader's paths and defaults, and nothing they write may outlive them:
each page runs in a private mount namespace with fresh tmpfs mounts over ``/tmp``,
``/run/hostjob`` (the default state root) and ``/var/lib/hostjob`` (the default store), which
also keeps this machine's own state root and store out of their way. Afterwards every
container left is deleted (``delete --force``), and the test fails on any process still in
the namespace (an example that leaves one running) and on any job cgroup the page left.
A ``needs=registry`` example talks to a real registry on 127.0.0.1 (the page's address,
``127.0.0.1:5000``, is replaced by the test registry's); a ``needs=systemd`` one runs where
systemd is PID 1 on cgroup v2 (the VM lane, where ``HOSTJOB_REQUIRE_SYSTEMD=1`` makes it
fail rather than skip). The command a ``ci=`` setting names is left to CI, which runs it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostjob.cgroups import systemd
from tests import doc_blocks
from tests.doc_blocks import Block
from tests.fixtures.registry import DockerRegistry
from tests.helpers import REPO, cgroup_mountpoints, hostjob_cmd

PAGES = [p for p in doc_blocks.RUN_PAGES if doc_blocks.examples(p)]
PAGE_ADDRESS = "127.0.0.1:5000"  # the registry the pages talk to
PRIVATE = ("/tmp", "/run/hostjob", "/var/lib/hostjob")  # a tmpfs over each, in the namespace
BLOCK_TIMEOUT = 180.0
SYSTEMD = systemd.booted() and os.path.isfile("/sys/fs/cgroup/cgroup.controllers")
REQUIRE_SYSTEMD = os.environ.get("HOSTJOB_REQUIRE_SYSTEMD") == "1"


def plan(page: Path) -> list[Block]:
    """The page's examples, each after the named examples it starts from (once each)."""
    named = doc_blocks.named_examples()
    ordered: list[Block] = []

    def add(block: Block, chain: tuple[str, ...]) -> None:
        for name in block.after:
            assert name in named, f"{block.where}: after={name}: no example has that name"
            assert name not in chain, f"{block.where}: after={name} goes round in a circle"
            add(named[name], (*chain, name))
        if block not in ordered:
            ordered.append(block)

    for block in doc_blocks.examples(page):
        add(block, ())
    return ordered


def runnable(block: Block) -> str:
    """The block's text, but the lines of the command ``ci=`` names: CI runs that one (the
    Quick start's ``scripts/test``, the whole suite: tests/unit/test_docs.py checks that
    ``.ci/run`` runs it)."""
    ci = block.settings.get("ci")
    lines = block.text.splitlines()
    return "\n".join(line for line in lines if not ci or line.split()[:1] != [ci]) + "\n"


def job_cgroups() -> set[str]:
    """The job cgroups of every hierarchy: ``/hostjob/<id>``, and the systemd driver's
    ``system.slice/hostjob-<id>.scope``."""
    found = set()
    for mount in cgroup_mountpoints():
        for parent, prefix in (("hostjob", ""), ("system.slice", "hostjob-")):
            with contextlib.suppress(OSError):
                for entry in os.scandir(f"{mount}/{parent}"):
                    if entry.is_dir() and entry.name.startswith(prefix):
                        found.add(entry.path)
    return found


class Namespace:
    """A private mount namespace with tmpfs mounts over ``PRIVATE``, held open by a
    sleeping process; commands enter it with nsenter."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.made: list[str] = []
        self.holder: subprocess.Popen[str] | None = None
        self.inode = 0
        self.blocks = 0
        bin_dir = workdir / "bin"
        bin_dir.mkdir()
        command = hostjob_cmd()
        if len(command) == 1:
            (bin_dir / "hostjob").symlink_to(command[0])
        else:  # python -m hostjob on src/
            script = bin_dir / "hostjob"
            script.write_text(f'#!/bin/sh\nexec {" ".join(command)} "$@"\n')
            script.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOSTJOB_")}
        interpreter = Path(command[0]).parent
        env["PATH"] = f"{bin_dir}:{interpreter}:{env.get('PATH', '/usr/bin:/bin')}"
        if len(command) > 1:
            env["PYTHONPATH"] = str(REPO / "src")
        self.env = env

    def __enter__(self) -> Namespace:
        for path in PRIVATE:
            if not os.path.isdir(path):
                os.makedirs(path)
                self.made.append(path)
        # What the examples run from stays visible when it lies under a private directory
        # (a clone in /tmp, as CI may make): opened before the tmpfs hides it, bound back
        # after, through the open directory.
        keep = sorted({str(REPO), str(Path(hostjob_cmd()[0]).parent.parent), str(self.workdir)})
        keep = [k for k in keep if any(k.startswith(p + "/") for p in PRIVATE)]
        keep = [k for k in keep if not any(k.startswith(o + "/") for o in keep)]
        opens = "".join(f"exec {3 + i}<{shlex.quote(k)} && " for i, k in enumerate(keep))
        mounts = " && ".join(f"mount -t tmpfs -o mode=0755 hostjob-docs {p}" for p in PRIVATE)
        binds = "".join(
            f" && mkdir -p {shlex.quote(k)} && mount --no-canonicalize --bind /proc/self/fd/{3 + i}"
            f" {shlex.quote(k)}"
            for i, k in enumerate(keep)
        )
        closes = "".join(f" && exec {3 + i}<&-" for i in range(len(keep)))
        script = f"{opens}{mounts}{binds}{closes} && chmod 1777 /tmp && echo ready"
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--",
             "sh", "-c", f"{script} && exec sleep 86400"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.holder.stdout is not None
        ready = self.holder.stdout.readline()
        assert ready == "ready\n", "the private mount namespace could not be set up"
        self.inode = os.stat(f"/proc/{self.holder.pid}/ns/mnt").st_ino
        return self

    def run(self, block: Block, text: str) -> tuple[int, str]:
        """Run one block: its exit status, and what it printed (stdout and stderr)."""
        assert self.holder is not None
        if block.language == "python":
            program = ["python3", "-c", text]
        else:
            program = ["bash", "-euo", "pipefail", "-c", text]
        # Output into a file, not a pipe: a detached container's process keeps the stdio
        # it was given, as runc's does, and a pipe would not end before it does.
        self.blocks += 1
        out = self.workdir / f"block-{self.blocks}.out"
        with out.open("w+") as sink:
            code = subprocess.run(
                ["nsenter", f"--target={self.holder.pid}", "--mount", f"--wd={REPO}", "--", *program],
                cwd=REPO, env=self.env, stdin=subprocess.DEVNULL, stdout=sink,
                stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT,
            ).returncode  # fmt: skip
        return code, out.read_text(errors="replace")

    def left_behind(self) -> list[str]:
        """Delete every container left, then end the namespace: the processes still in it
        (the holder aside), each as ``pid: command line``."""
        assert self.holder is not None
        clean = 'for c in $(hostjob list -q); do hostjob delete --force "$c"; done'
        subprocess.run(
            ["nsenter", f"--target={self.holder.pid}", "--mount", f"--wd={REPO}", "--", "sh", "-c", clean],
            cwd=REPO, env=self.env, capture_output=True, timeout=BLOCK_TIMEOUT,
        )  # fmt: skip
        self.holder.kill()
        self.holder.wait()
        found = []
        for pid in self.namespace_pids():
            with contextlib.suppress(OSError):
                line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                found.append(f"{pid}: {line.decode(errors='replace').strip()}")
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.namespace_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        return found

    def namespace_pids(self) -> list[int]:
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{name}/ns/mnt").st_ino == self.inode:
                        pids.append(int(name))
        return pids

    def __exit__(self, *exc: object) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait()
        for path in reversed(self.made):
            os.rmdir(path)


@contextlib.contextmanager
def registry_if_needed(blocks: list[Block], workdir: Path) -> Iterator[str]:
    """The registry's address the examples get: a real one when a block needs it."""
    if not any("registry" in b.needs for b in blocks):
        yield PAGE_ADDRESS
        return
    with DockerRegistry(str(workdir / "registry")) as registry:
        yield registry.host


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_examples_run(page: Path, tmp_path: Path) -> None:
    blocks = plan(page)
    waiting = [b for b in blocks if "systemd" in b.needs and not SYSTEMD]
    assert not (waiting and REQUIRE_SYSTEMD), "HOSTJOB_REQUIRE_SYSTEMD=1, but no systemd"
    cgroups_before = job_cgroups()
    with registry_if_needed(blocks, tmp_path) as address, Namespace(tmp_path) as namespace:
        try:
            for block in blocks:
                if block in waiting:
                    continue
                text = runnable(block).replace(PAGE_ADDRESS, address)
                code, output = namespace.run(block, text)
                assert code == 0, f"{block.where}: exit status {code}:\n{output}"
                if block.output is not None:
                    missing = doc_blocks.output_matches(
                        block.output.replace(PAGE_ADDRESS, address), output
                    )
                    assert missing is None, f"{block.where}: no line {missing!r} in:\n{output}"
        finally:
            left = namespace.left_behind()
    assert not left, f"{page.name}: processes left running: {left}"
    cgroups_left = sorted(job_cgroups() - cgroups_before)
    for path in cgroups_left:
        with contextlib.suppress(OSError):
            os.rmdir(path)
    assert not cgroups_left, f"{page.name}: job cgroups left: {cgroups_left}"
    if waiting:
        pytest.skip(
            "every example ran but those that need systemd as PID 1 on cgroup v2 (the VM "
            "lane runs them): " + ", ".join(b.where for b in waiting)
        )
