"""Fuzz targets that drive the ``hostjob`` command itself: root and the real kernel.

``bundle_cli`` mutates the rich seed config (``targets.CONFIG_SEED``) by the bytes, as
``config_mutated`` does, and hands the bundle to the CLI's ``create`` (then ``state``)
and ``run`` (its program made ``true``: the host is not the fuzzer's to run things
on), each followed by ``delete --force``. Each must exit 0, or 1 with one line on
stderr (never "internal error" or a traceback); after the delete nothing of the
container is left: no state, no job cgroup (its default one or the config's
``cgroupsPath``), no mount, no mount point or volume target it made, nothing new in
the bundle's rootfs but the working directories ``create`` makes there (as runc does).

The bytes choose the config; where a path of it would let the container touch the
host outside the sandbox (the mount point and its annotations, the rootfs, volume
sources and destinations, hook programs), an absolute value is moved under the
sandbox and a relative one that climbs out of it is moved back in: the checks of
those values themselves are the unit tests'.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.fuzz.chooser import Chooser, mutate
from tests.fuzz.targets import CONFIG_KEYS, CONFIG_SEED, Finding

_MOUNT_POINT_KEYS = ("io.hostjob.rootfs-mount-point", "microsoft.com/hostprocess-rootfs-location")


class CliSandbox:
    """A temp dir: a busybox bundle, a state root, room for mount points."""

    def __init__(self) -> None:
        from tests.helpers import make_rootfs

        if os.geteuid() != 0:
            raise PermissionError("the CLI fuzz targets need root (they create containers)")
        self.base = tempfile.mkdtemp(prefix="hostjob-fuzz-cli-")
        os.chmod(self.base, 0o755)  # containers may run as other users
        self.bundle = os.path.join(self.base, "bundle")
        self.rootfs = os.path.join(self.bundle, "rootfs")
        os.makedirs(self.bundle)
        make_rootfs(Path(self.rootfs))
        os.mkdir(os.path.join(self.rootfs, "work"))  # the seed's cwd, in a read-only rootfs
        self.root = os.path.join(self.base, "state")
        self.inside = os.path.join(self.base, "inside")  # where absolute paths go
        os.mkdir(self.inside)
        self.cgroup = f"/hostjob/fuzz-cli-{os.getpid()}"
        self.count = 0
        self.rootfs_entries = self.walk(self.rootfs)

    @staticmethod
    def walk(top: str) -> dict[str, tuple[int, int]]:
        out = {}
        for d, dirs, files in os.walk(top):
            for name in dirs + files:
                path = os.path.join(d, name)
                st = os.lstat(path)
                out[os.path.relpath(path, top)] = (st.st_mode, st.st_size)
        return out

    def close(self) -> None:
        """Whatever a finding left (the checks stop at the first one), then the dir."""
        for cid in os.listdir(self.root) if os.path.isdir(self.root) else []:
            _call(self, "delete", "--force", cid)
        shutil.rmtree(self.base, ignore_errors=True)


_BOX: CliSandbox | None = None


def cli_sandbox() -> CliSandbox:
    global _BOX
    if _BOX is None:
        _BOX = CliSandbox()
        atexit.register(close_cli_sandbox)
    return _BOX


def close_cli_sandbox() -> None:
    """Remove the process's CLI sandbox and its containers, if it made one."""
    global _BOX
    if _BOX is not None:
        _BOX.close()
        _BOX = None


def _hostjob() -> list[str]:
    from tests.helpers import hostjob_cmd

    return hostjob_cmd()


def _env() -> dict[str, str]:
    from tests.helpers import hostjob_env

    return hostjob_env()


def seed(box: CliSandbox) -> dict[str, Any]:
    """The rich seed, made to create on this host: its paths in the sandbox, and no
    throttled block device (8:0 need not exist; a mutation may still name one)."""
    doc = copy.deepcopy(CONFIG_SEED)
    del doc["linux"]["resources"]["blockIO"]["throttleReadBpsDevice"]
    doc["windows"]["jobContainer"]["rootfsMountPoint"] = os.path.join(box.inside, "mp")
    doc["linux"]["cgroupsPath"] = box.cgroup
    doc["mounts"][0]["source"] = box.inside
    return doc


def _moved(value: Any, box: CliSandbox, base: str | None = None) -> Any:
    """An absolute path moved under the sandbox; a relative one (against ``base``)
    that climbs out of it moved back in; anything else as it is."""
    if not isinstance(value, str) or "\x00" in value:
        return value
    if value.startswith("/"):
        normal = os.path.normpath(value)
        if normal.startswith(box.base + "/"):
            return value
        return box.inside + normal.rstrip("/")
    if base is not None:
        resolved = os.path.normpath(os.path.join(base, value))
        if resolved != box.base and not resolved.startswith(box.base + "/"):
            return os.path.join(box.inside, "climbed")
    return value


def contain(doc: Any, box: CliSandbox) -> Any:
    """``doc`` with every host path it could act on kept inside the sandbox."""
    if not isinstance(doc, dict):
        return doc
    windows = doc.get("windows")
    job = windows.get("jobContainer") if isinstance(windows, dict) else None
    if isinstance(job, dict) and "rootfsMountPoint" in job:
        job["rootfsMountPoint"] = _moved(job["rootfsMountPoint"], box)
    annotations = doc.get("annotations")
    if isinstance(annotations, dict):
        for key in _MOUNT_POINT_KEYS:
            if key in annotations:
                annotations[key] = _moved(annotations[key], box)
        asked = isinstance(job, dict) and bool(job.get("rootfsMountPoint"))
        if not asked and not any(annotations.get(k) for k in _MOUNT_POINT_KEYS):
            # bind mode's default mount point is /hpc, on the host
            annotations["io.hostjob.rootfs-mount-point"] = os.path.join(box.inside, "mp")
    else:
        doc["annotations"] = {"io.hostjob.rootfs-mount-point": os.path.join(box.inside, "mp")}
    root = doc.get("root")
    if isinstance(root, dict) and "path" in root:
        root["path"] = _moved(root["path"], box, box.bundle)
    mounts = doc.get("mounts")
    if isinstance(mounts, list):
        for mount in mounts:
            if isinstance(mount, dict):
                for key in ("source", "destination"):
                    if key in mount:
                        mount[key] = _moved(mount[key], box, box.bundle)
    hooks = doc.get("hooks")
    if isinstance(hooks, dict):
        for kind in hooks.values():
            for hook in kind if isinstance(kind, list) else []:
                if isinstance(hook, dict) and _runs_something(hook.get("path")):
                    hook["path"] = "/bin/true"
    return doc


def _runs_something(path: Any) -> bool:
    """A hook program that exists on the host (other than ``true``)."""
    if not isinstance(path, str) or "\x00" in path or path == "/bin/true":
        return False
    try:
        return os.path.exists(path) and os.access(path, os.X_OK) and not os.path.isdir(path)
    except (ValueError, OSError):
        return False


def _cgroup_of(doc: Any, cid: str) -> str | None:
    """The job cgroup the config asks for, if it can be told."""
    from hostjob.cgroups import resolve_path
    from hostjob.errors import HostjobError

    linux = doc.get("linux") if isinstance(doc, dict) else None
    path = linux.get("cgroupsPath") if isinstance(linux, dict) else None
    try:
        return resolve_path(path if isinstance(path, str) else "", cid)
    except (HostjobError, ValueError):
        return None


def _call(box: CliSandbox, *args: str) -> subprocess.CompletedProcess[str]:
    # Output to files, not pipes: a created container's init inherits them.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        done = subprocess.run(
            [*_hostjob(), "--root", box.root, *args],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True, timeout=120,
            env=_env(), check=False,
        )  # fmt: skip
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(done.args, done.returncode, out.read(), err.read())


def _check_output(done: subprocess.CompletedProcess[str], what: str) -> None:
    text = done.stderr
    if "internal error" in text or "Traceback" in text:
        raise Finding(f"{what}: {text.strip()[-2000:]}")
    if done.returncode != 0:
        lines = text.splitlines()
        if done.returncode != 1 or len(lines) != 1 or not lines[0].strip():
            raise Finding(f"{what}: exit {done.returncode} with stderr {text!r}")


def _leftovers(box: CliSandbox, cid: str, cgroup: str | None) -> list[str]:
    from tests.helpers import cgroup_dirs, mounts_under

    found = []
    if os.path.lexists(os.path.join(box.root, cid)):
        found.append(f"state of {cid}")
    for path in {f"/hostjob/{cid}", *([cgroup] if cgroup else [])}:
        if path.strip("/") and path != "/hostjob":
            found += [f"cgroup {d}" for d in cgroup_dirs(path)]
    found += [f"mount {m}" for m in mounts_under(box.base)]
    found += [f"made {os.path.join(box.inside, n)}" for n in os.listdir(box.inside)]
    now = box.walk(box.rootfs)
    for path, (mode, size) in now.items():
        before = box.rootfs_entries.get(path)
        if before is None and not stat.S_ISDIR(mode):
            found.append(f"rootfs gained {path}")
        elif before is not None and before != (mode, before[1] if stat.S_ISDIR(mode) else size):
            found.append(f"rootfs changed {path}")  # a directory's size is its entries
    found += [f"rootfs lost {p}" for p in box.rootfs_entries if p not in now]
    return found


def _reset_rootfs(box: CliSandbox) -> None:
    """The working directories ``create`` made in the rootfs, removed (runc leaves
    them too); what else changed is a finding, reported before this runs."""
    now = box.walk(box.rootfs)
    for path in sorted((p for p in now if p not in box.rootfs_entries), reverse=True):
        shutil.rmtree(os.path.join(box.rootfs, path), ignore_errors=True)


def bundle_cli(data: bytes) -> None:
    box = cli_sandbox()
    # No bytes: the seed itself, which must create, run and delete cleanly (mutate would
    # read zeros as "replace the whole document by null").
    doc = contain(mutate(seed(box), Chooser(data), CONFIG_KEYS) if data else seed(box), box)
    for verb in ("create", "run"):
        box.count += 1
        cid = f"fz{os.getpid()}x{box.count}"
        config = copy.deepcopy(doc)
        process = config.get("process") if isinstance(config, dict) else None
        if verb == "run" and isinstance(process, dict) and isinstance(process.get("args"), list):
            process["args"] = ["$CONTAINER_SANDBOX_MOUNT_POINT/bin/true"]
        raw = json.dumps(config).encode("utf-8", "surrogatepass")
        with open(os.path.join(box.bundle, "config.json"), "wb") as f:
            f.write(raw)
        try:
            done = _call(box, verb, "--bundle", box.bundle, cid)
            if verb == "run" and done.returncode > 128 and not done.stderr:
                pass  # true died of a signal (a memory limit of a few pages, say)
            else:
                _check_output(done, verb)
            if verb == "create" and done.returncode == 0:
                _check_output(_call(box, "state", cid), "state")
        finally:
            deleted = _call(box, "delete", "--force", cid)
        _check_output(deleted, "delete --force")
        if deleted.returncode != 0:
            raise Finding(f"delete --force {cid}: {deleted.stderr.strip()}")
        left = _leftovers(box, cid, _cgroup_of(config, cid))
        _reset_rootfs(box)
        if left:
            raise Finding(f"{verb} then delete --force left {left} (config {raw[:3000]!r})")


CLI_TARGETS = {"bundle_cli": bundle_cli}
