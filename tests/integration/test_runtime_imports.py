"""The import pin on real containers: every runtime command of a whole lifecycle
imports only light standard-library modules (each command is a fresh interpreter),
C bindings (`_ctypes`, never the `ctypes` package) only where a syscall the standard
library lacks is due, and the read-only commands exactly the hostjob modules pinned
here: a new import on their path shows up as a failure, with the module named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, base_config, new_id
from tests.unit.test_imports import FORBIDDEN, NOT_OS

# Where the job has a cgroup2 cgroup (a v2 host, a hybrid host's unified hierarchy), its
# processes are started in it by clone3(CLONE_INTO_CGROUP): create, exec and run bind C.
CGROUP2 = os.path.isfile("/sys/fs/cgroup/cgroup.controllers") or os.path.isfile(
    "/sys/fs/cgroup/unified/cgroup.controllers"
)
CLONE3 = {"_ctypes"} if CGROUP2 else set()
# What a command may still need: `run` also makes itself a subreaper (prctl).
ALLOWED = {"run": {"_ctypes"}, "create": CLONE3, "exec": CLONE3}
CLONE3_COMMANDS = ("create", "exec", "run")

# The hostjob modules of the commands that only read or signal (no mounts, no config
# conversion, no cgroup manager but for delete).
COMMON = {
    "hostjob", "hostjob.cli", "hostjob.cli.args", "hostjob.cli.commands",
    "hostjob.cli.main", "hostjob.job", "hostjob.errors", "hostjob.faults", "hostjob.jsonio",
    "hostjob.log", "hostjob.runtime", "hostjob.runtime.container", "hostjob.runtime.proc",
    "hostjob.runtime.status", "hostjob.runtime.state_dir", "hostjob.spec",
    "hostjob.spec._decode", "hostjob.paths", "hostjob.env",
}  # fmt: skip
MANAGER = (
    "hostjob.cgroups.v2"
    if os.path.isfile("/sys/fs/cgroup/cgroup.controllers")
    else "hostjob.cgroups.v1"
)
PINNED = {
    # start and delete lock the container's directory (flock); state, list and kill never do
    # a created container's start asks nothing of its cgroup
    "start": COMMON | {"hostjob.cli.commands.start", "hostjob.flock"},
    # a running one's status asks its freezer; the cgroup hierarchies come from the
    # container's record: no look at mountinfo
    "state": COMMON | {"hostjob.cli.commands.state", "hostjob.spec.state", "hostjob.cgroups"},
    "list": COMMON | {"hostjob.cli.commands.list", "hostjob.spec.state", "hostjob.cgroups"},
    "kill": COMMON | {"hostjob.cli.commands.kill", "hostjob.cgroups"},
    # an ended job's cgroup goes by rmdir (cgroups.remove_if_empty), without a manager;
    # none of the verbs but delete loads its module (nor create's)
    "delete": COMMON
    | {"hostjob.cli.commands.delete", "hostjob.runtime.delete"}
    | {"hostjob.cgroups", "hostjob.cgroups._fs"}
    | {"hostjob.flock", "hostjob.fsutil"},
}
# Loaded only when the killed init has not quite left its cgroup yet: the manager
# kills and removes what is left (cgroup.kill on cgroup2).
OPTIONAL = {"delete": {"hostjob.cgroups._manager", MANAGER, "hostjob.cgroups._core2"}}


def modules_of(root: Path, argv: list[str], tmp_path: Path) -> tuple[int, set[str]]:
    dump = tmp_path / f"modules-{argv[0]}"
    code = (
        "import sys\n"
        "from hostjob.cli.main import main\n"
        f"code = main({['--root', str(root), *argv]!r})\n"
        f"open({str(dump)!r}, 'w').write(' '.join(sorted(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    with open(os.devnull, "w") as null:
        result = subprocess.run(
            [sys.executable, "-S", "-c", code], env=env, stdout=null, stderr=null, timeout=60
        )
    return result.returncode, set(dump.read_text().split())


def test_lifecycle_imports(tmp_path: Path, bundle, hj) -> None:
    root = hj.root  # the fixture deletes what a failed step left (its container, its cgroup)
    cid = new_id()
    b = bundle(base_config("sleep", "300"))
    steps = [
        ["create", "-b", str(b), cid],
        ["start", cid],
        ["state", cid],
        ["list"],
        ["exec", cid, "true"],
        ["pause", cid],
        ["resume", cid],
        ["ps", "--format", "json", cid],
        ["events", "--stats", cid],
        ["update", "--pids-limit", "50", cid],
        ["kill", cid, "KILL"],
        ["delete", "--force", cid],
        ["run", "-b", str(b), new_id()],
    ]
    b2 = bundle(base_config("true"), "quick")
    steps[-1] = ["run", "-b", str(b2), new_id()]
    for argv in steps:
        code, modules = modules_of(root, argv, tmp_path)
        assert code == 0, argv
        heavy = sorted(
            m for m in modules if m.split(".")[0] in FORBIDDEN - ALLOWED.get(argv[0], set())
        )
        assert heavy == [], f"{argv[0]} imports {heavy}"
        assert not any(m.startswith(("hostjob.images", "hostjob.cli.render")) for m in modules), (
            argv
        )
        assert "ctypes" not in modules, f"{argv[0]} imports ctypes, not just _ctypes"
        assert sorted(modules & NOT_OS) == [], f"{argv[0]} imports os"
        if argv[0] in CLONE3_COMMANDS:
            assert ("_ctypes" in modules) == bool(ALLOWED[argv[0]]), argv[0]
        pinned = PINNED.get(argv[0])
        if pinned is not None:
            ours = {m for m in modules if m.startswith("hostjob")}
            ours -= OPTIONAL.get(argv[0], set())
            assert ours == pinned, (
                f"{argv[0]}: new {sorted(ours - pinned)}, no longer {sorted(pinned - ours)}"
            )


# What a cached `run IMAGE` (the image in the store, nothing to pull) may load of hostjob's
# image side: reading the store and mounting the overlay, never the pull machinery.
PULL_MODULES = (
    "hostjob.images.pull",
    "hostjob.images.registry",
    "hostjob.images.sources",
    "hostjob.images.unpack",
    "hostjob.images.pack",
    "hostjob.images.push",
    "hostjob.cli.render",
)


def test_cached_run_image_imports(tmp_path: Path) -> None:
    """A cached `run --rm IMAGE true` is a runtime command too: no json, re, enum, hashlib,
    tempfile, shutil, threading (nor anything else heavy), and no pull code."""
    from hostjob.images.pack import pack
    from tests.helpers import hostjob_cmd, hostjob_env, make_rootfs

    src = make_rootfs(tmp_path / "tree")
    pack(str(src), f"oci:{tmp_path / 'layout'}:v1", cmd=["true"], env=["PATH=/bin"])
    store = str(tmp_path / "store")
    subprocess.run(
        [*hostjob_cmd(), "import", "--store", store, "-q", f"oci:{tmp_path / 'layout'}:v1"],
        check=True,
        capture_output=True,
        env=hostjob_env(),
    )
    root = tmp_path / "state"
    argv = ["run", "--rm", "-q", "--store", store, "localhost/layout:v1", "true"]
    code, modules = modules_of(root, argv, tmp_path)
    assert code == 0
    heavy = sorted(m for m in modules if m.split(".")[0] in FORBIDDEN - {"_ctypes"})
    assert heavy == [], f"a cached run IMAGE imports {heavy}"
    assert "ctypes" not in modules
    pulling = sorted(m for m in modules if m.startswith(PULL_MODULES))
    assert pulling == [], f"a cached run IMAGE imports {pulling}"
    assert not root.exists() or os.listdir(root) == []
