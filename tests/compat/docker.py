"""Debian's docker (dockerd 20.10 + its own containerd 1.6 and runc v2 shim) with all its
state in a scratch directory, for the compat tests (``test_docker.py``) and the benchmarks
(``bench/clients``).

A private daemon per run: its own ``--data-root``, ``--exec-root``, ``--pidfile`` and ``-H``
socket, the containerd it starts itself (state under the exec root, content under the data
root), cgroupfs (``native.cgroupdriver=cgroupfs``, every container under one
``cgroup-parent`` of its own), and no network set-up at all (``--iptables=false``,
``--ip-forward=false``, ``--ip-masq=false``, ``--bridge=none``: nothing of the host's
firewall or sysctls changes; containers run with ``--network host``). The runtimes come
from a ``daemon.json`` it is given (``runtimes``): ``hostjob`` (host mode) and
``hostjob-bind`` (``"runtimeArgs": ["--default-mount-mode=bind"]``), runc beside them as the
sanity check. The daemon's ID key goes to the scratch directory too
(``deprecated-key-path``; by default ``/etc/docker/key.json``), and the client's config
(``DOCKER_CONFIG``). What dockerd 20.10 makes at fixed host paths whatever it is told --
``/run/docker/plugins`` (and ``/run/docker``) -- is removed at ``stop`` when it was not
there before, as are the containerd shims' ``/run/containerd/s`` sockets
(``harness.HostTraces``).

The ``docker`` client is ``/usr/bin/docker`` by absolute path: another ``docker`` (a newer
client alone, unrelated to Debian's daemon) may come first on ``PATH``.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from tests.helpers import KEPT_IN_ROOT, wait_for

from . import harness
from .image import IMAGE_REF, build_rootfs

if TYPE_CHECKING:
    from collections.abc import Sequence

DOCKER = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"
BIND_MODE = "hostjob-bind"  # the runtime name that gives docker users bind mode
# docker 20.10 gives every runtime runc's state root, whatever its name
RUNTIME_ROOT = "runtime-runc/moby"
# made by dockerd at fixed paths, whatever its flags say
FIXED_PATHS = ("/run/docker/plugins", "/run/docker")
# Where the tests put volumes and tmpfs mounts: bind mode mounts them at these real paths
# (in the job's namespace), making a missing one on the host for the container's life.
SCRATCH = f"/srv/hostjob-compat-{os.getpid()}"
MARKER = "made by docker import"  # the image's /etc/compat-image: the image, not the host


class DockerRuntime:
    """A runtime as docker names it (``--runtime NAME``), and what it is."""

    __slots__ = ("is_job_container", "mode", "name", "runtime")

    def __init__(self, name: str, runtime: harness.Runtime, mode: str = "") -> None:
        self.name = name
        self.runtime = runtime
        self.mode = mode  # "host" or "bind" for hostjob; "" for runc
        self.is_job_container = runtime.is_job_container

    def __repr__(self) -> str:
        return f"DockerRuntime({self.name!r})"


def docker_runtimes(runtimes: Sequence[harness.Runtime]) -> list[DockerRuntime]:
    """Each runtime by its own name; hostjob also by the name that gives bind mode."""
    found = []
    for r in runtimes:
        if r.name == "hostjob":
            found += [DockerRuntime("hostjob", r, "host"), DockerRuntime(BIND_MODE, r, "bind")]
        else:
            found.append(DockerRuntime(r.name, r))
    return found


@functools.cache
def dockerd_version() -> tuple[int, int]:
    """(major, minor) of Debian's dockerd: 20.10 (Debian 12), 26.1 (13), 28.5 (unstable)."""
    return harness.client_version(DOCKERD, r"version (\d+)\.(\d+)")


def daemon_json(workdir: Path, runtimes: Sequence[DockerRuntime], cgroup_parent: str) -> dict:  # type: ignore[type-arg]
    """The daemon's whole configuration (docs/operators.md shows its ``runtimes``). dockerd
    keeps an ID key only up to 24 (it refuses the key's option after)."""
    table: dict[str, dict[str, object]] = {}
    for r in runtimes:
        if r.name == "runc":
            continue  # docker's own
        entry: dict[str, object] = {"path": str(r.runtime.client_path)}
        if r.mode == "bind":
            entry["runtimeArgs"] = ["--default-mount-mode=bind"]
        table[r.name] = entry
    key = {"deprecated-key-path": str(workdir / "key.json")} if dockerd_version() < (24, 0) else {}
    return {
        "data-root": str(workdir / "data"),
        "exec-root": str(workdir / "exec"),
        "pidfile": str(workdir / "docker.pid"),
        "hosts": [f"unix://{workdir / 'docker.sock'}"],
        **key,
        "iptables": False,
        "ip-forward": False,
        "ip-masq": False,
        "bridge": "none",
        "exec-opts": ["native.cgroupdriver=cgroupfs"],
        "cgroup-parent": cgroup_parent,
        "storage-driver": "overlay2",
        "log-level": "info",
        "runtimes": table,
    }


class Docker:
    """A private dockerd in ``workdir``; ``docker(...)`` runs the client against it."""

    def __init__(self, workdir: Path, runtimes: Sequence[harness.Runtime]) -> None:
        self.dir = workdir
        self.runtimes = docker_runtimes(runtimes)
        self.socket = workdir / "docker.sock"
        self.config = workdir / "daemon.json"
        self.log = workdir / "dockerd.log"
        self.cgroup_parent = f"/hostjob-compat-docker-{os.getpid()}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.names: list[str] = []
        self.fixed_before = {p for p in FIXED_PATHS if os.path.lexists(p)}
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")},
            "DOCKER_CONFIG": str(workdir / "client"),
        }

    # -- life cycle
    def start(self, timeout: float = 180) -> Docker:
        harness.require_root()
        harness.ensure_peer("docker", [DOCKER, DOCKERD])
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "client").mkdir(exist_ok=True)
        config = daemon_json(self.dir, self.runtimes, self.cgroup_parent)
        self.config.write_text(json.dumps(config, indent=2))
        self.proc = harness.start_daemon([DOCKERD, "--config-file", str(self.config)], self.log)
        ok = wait_for(
            lambda: (
                self.proc is not None
                and self.proc.poll() is None
                and self.socket.exists()
                and self.answers()
            ),
            timeout,
            0.2,
        )
        if not ok:
            tail = self.log_tail()
            self.stop()
            raise harness.HarnessError(f"dockerd did not start within {timeout}s:\n{tail}")
        return self

    def answers(self) -> bool:
        """``docker version`` works (a slow start -- a guest under emulation -- is not yet)."""
        try:
            return self.docker("version", timeout=30).returncode == 0
        except harness.HarnessError:
            return False

    def log_tail(self, n: int = 30) -> str:
        return harness.log_tail(self.log, n)

    def argv(self, *args: str | os.PathLike[str]) -> list[str]:
        return [DOCKER, "-H", f"unix://{self.socket}", *map(os.fspath, args)]

    def docker(
        self,
        *args: str | os.PathLike[str],
        timeout: float = 60,
        check: bool = False,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return harness.run(
            self.argv(*args), timeout=timeout, env=self.env, check=check, input=input
        )

    def new_name(self, prefix: str) -> str:
        """A fresh container name, remembered so that the teardown removes it."""
        name = f"{prefix}-{len(self.names)}-{os.getpid()}"
        self.names.append(name)
        return name

    def import_image(self, ref: str = IMAGE_REF) -> str:
        """The compat busybox rootfs as an image (``docker import`` of its tar: no network,
        no registry)."""
        rootfs = build_rootfs(self.dir / "image-rootfs")
        (rootfs / "etc" / "compat-image").write_text(f"{MARKER}\n")
        tar = self.dir / "image.tar"
        with tarfile.open(tar, "w") as t:
            for entry in sorted(os.listdir(rootfs)):
                t.add(rootfs / entry, arcname=entry)
        changes = [
            f"ENV PATH={'/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'}",
            'CMD ["sh"]',
            "WORKDIR /",
        ]
        args: list[str] = ["import"]
        for change in changes:
            args += ["--change", change]
        self.docker(*args, tar, ref, timeout=120, check=True)
        listed = self.docker("images", "--format", "{{.Repository}}:{{.Tag}}", check=True)
        if ref not in listed.stdout.split():
            raise harness.HarnessError(f"{ref} not listed after docker import: {listed.stdout}")
        return ref

    # -- inspection
    def inspect(self, name: str, fmt: str) -> str:
        return self.docker("inspect", "--format", fmt, name, check=True).stdout.strip()

    def container_id(self, name: str) -> str:
        return self.inspect(name, "{{.Id}}")

    def cgroup_path(self, cid: str) -> str:
        return f"{self.cgroup_parent}/{cid}"

    def runtime_state(self, cid: str) -> Path:
        return self.dir / "exec" / RUNTIME_ROOT / cid

    def shims(self, cid: str | None = None) -> list[tuple[int, str]]:
        found = harness.processes_matching("containerd-shim", str(self.dir))
        return [(p, c) for p, c in found if cid is None or f" -id {cid} " in f" {c} "]

    def leftovers(self, cid: str) -> list[str]:
        """Everything container ``cid`` (full ID) left behind after docker removed it."""
        bad = []
        listed = self.docker("ps", "-a", "-q", "--no-trunc", check=True).stdout.split()
        if cid in listed:
            bad.append(f"container {cid[:12]} still listed")
        bad += [f"mount {m}" for m in harness.mounts_mentioning(cid)]
        bad += [f"cgroup {d}" for d in harness.cgroup_dirs(self.cgroup_path(cid))]
        for p in (self.runtime_state(cid), Path("/run/hostjob") / cid):
            if os.path.lexists(p):
                bad.append(f"runtime state {p}")
        bad += [f"shim {p}: {c[:120]}" for p, c in self.shims(cid)]
        bad += [f"process {p}: {c[:120]}" for p, c in harness.processes_matching(cid)
                if "containerd-shim" not in c]  # fmt: skip
        return sorted(set(bad))

    def traces(self) -> dict[str, list[str]]:
        """What the daemon's containers have on the host now: mounts under its dir, cgroups
        under its parent, runtime state, shims, and what bind mode made under ``SCRATCH``."""
        cgroups = []
        for top in harness.cgroup_dirs(self.cgroup_parent):
            cgroups += [str(p) for p in top.rglob("*") if p.is_dir()]
        state = self.dir / "exec" / RUNTIME_ROOT
        scratch = Path(SCRATCH)
        netns = str(self.dir / "exec" / "netns")
        return {
            "mounts": [m for m in harness.mounts_under(self.dir) if not m.startswith(netns)],
            "cgroups": sorted(cgroups),
            "runtime state": sorted(set(os.listdir(state)) - KEPT_IN_ROOT)
            if state.is_dir()
            else [],
            "shims": sorted(c for _p, c in self.shims()),
            "host paths": sorted(str(p) for p in scratch.rglob("*")) if scratch.exists() else [],
        }

    # -- cleanup
    def stop(self) -> list[str]:
        """Remove every container, stop dockerd, and make sure nothing is left (mounts
        under the work dir, shims, the cgroup parent, the fixed paths it made). Returns the
        problems found (each was cleaned up by force)."""
        problems: list[str] = []
        if self.proc is not None and self.proc.poll() is None:
            try:
                ids = self.docker("ps", "-a", "-q", timeout=30).stdout.split()
                if ids:
                    problems.append(f"containers left at teardown: {ids}")
                    self.docker("unpause", *ids, timeout=60)
                    self.docker("rm", "--force", *ids, timeout=120)
            except harness.HarnessError as e:
                problems.append(f"cleanup through docker failed: {e}")
        if self.proc is not None:
            problems += harness.stop_daemon(self.proc, "dockerd", 30)
        self.proc = None
        problems += harness.kill_shims(self.shims())
        inner = harness.processes_matching("containerd", str(self.dir / "exec"))
        if inner:
            problems.append(f"docker's containerd left: {inner}")
            harness.kill_pids(p for p, _ in inner)
        # dockerd's own bind of the host's network namespace (its "host" network's
        # sandbox), which it leaves mounted when it stops
        harness.unmount_all_under(self.dir / "exec" / "netns")
        mounts = harness.unmount_all_under(self.dir)
        if mounts:
            problems.append(f"mounts left under {self.dir}: {mounts}")
        stuck = harness.remove_cgroup(self.cgroup_parent)
        if stuck:
            problems.append(f"cgroups left: {stuck}")
        for path in FIXED_PATHS:
            if path not in self.fixed_before:
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    problems.append(f"{path} made by dockerd, cannot be removed: {e}")
        return problems
