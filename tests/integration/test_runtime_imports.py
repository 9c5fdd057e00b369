"""The import pin on real containers: every runtime command of a whole lifecycle, and a
cached `run IMAGE`, imports only hostjob modules declared on the runtime path
(tests/unit/runtime_path.py) and light standard-library modules (each command is a
fresh interpreter), C bindings (`_ctypes`, never the `ctypes` package) only where a
syscall the standard library lacks is due, and the commands that read or signal a
container nothing of the parts they do not need (``ROLES``), within a budget of modules
each."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, base_config, containers_left, new_id
from tests.unit.runtime_path import FORBIDDEN, NOT_OS, undeclared

# Where the job has a cgroup2 cgroup (a v2 host, a hybrid host's unified hierarchy), its
# processes are started in it by clone3(CLONE_INTO_CGROUP): create, exec and run bind C.
CGROUP2 = os.path.isfile("/sys/fs/cgroup/cgroup.controllers") or os.path.isfile(
    "/sys/fs/cgroup/unified/cgroup.controllers"
)
CLONE3 = {"_ctypes"} if CGROUP2 else set()
# What a command may still need: `run` also makes itself a subreaper (prctl).
ALLOWED = {"run": {"_ctypes"}, "create": CLONE3, "exec": CLONE3}
CLONE3_COMMANDS = ("create", "exec", "run")

# What a runtime command may load of hostjob, by the role of each part (not by file
# name): a command that only reads or signals a container loads the core of the runtime
# (its record, handle, status, process identity), its own verb's module and, for a
# running one, the cgroup paths; never what another verb does.
ROLES = {
    "process launch": ("hostjob.runtime.launch",),
    "the sandbox": ("hostjob.runtime.sandbox",),
    "the supervisor of run -d": ("hostjob.supervisor",),
    "the image side": ("hostjob.images", "hostjob.cli.render"),
    "the conversion of a bundle": ("hostjob.specconv.convert", "hostjob.runtime.bundle"),
    "a cgroup manager": (
        "hostjob.cgroups._manager",
        "hostjob.cgroups.v1",
        "hostjob.cgroups.v2",
        "hostjob.cgroups.unified",
    ),
    "mountinfo": ("hostjob.linux.mountinfo", "hostjob.cgroups.hierarchy"),
    "delegation to another runtime": ("hostjob.runtime.delegate",),
}
READERS = (
    "process launch",
    "the sandbox",
    "the supervisor of run -d",
    "the image side",
    "the conversion of a bundle",
    "a cgroup manager",
    "mountinfo",
)
NOT_LOADED = {
    "start": (*READERS, "delegation to another runtime"),
    "state": (*READERS, "delegation to another runtime"),
    "kill": (*READERS, "delegation to another runtime"),
    "list": READERS,
    # an ended job's cgroup goes by rmdir (cgroups.remove_if_empty), without a manager
    # but when the killed init has not quite left it yet
    "delete": (
        "process launch",
        "the supervisor of run -d",
        "the image side",
        "the conversion of a bundle",
        "delegation to another runtime",
    ),
}
# The verb each runs (hostjob.runtime.verbs.<verb>): it loads that verb's module and no
# other (`list` reads the state of each container).
VERBS = "hostjob.runtime.verbs"
OWN_VERB = {"start": "start", "state": "state", "kill": "kill", "list": "state", "delete": "delete"}
# And how many of hostjob's modules with code each may load at most: a new one on their
# path is a decision (raise the figure in the change that needs it). A package whose
# __init__ is its docstring alone (hostjob.boot, hostjob.runtime.verbs, ...) is not
# counted: it holds nothing to run (its import is the finder's fixed cost alone, ~0.04 M
# instructions of a command's ~25 M). Each counts its own verb's module; delete's counts
# hostjob.runtime.state_root, which spares `delete --force` of an unknown ID the record.
MOST_MODULES = {"start": 21, "state": 21, "kill": 21, "list": 21, "delete": 26}


def holds_code(module: str) -> bool:
    """Whether ``module`` has more than a docstring (an empty package's does not)."""
    path = REPO / "src" / module.replace(".", "/")
    init = path / "__init__.py"
    if not init.is_file():
        return True
    body = ast.parse(init.read_text()).body
    return any(
        not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in body
    )


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
    counts: dict[str, list[str]] = {}
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
        assert undeclared(modules) == [], f"{argv[0]}: declare in tests/unit/runtime_path.py"
        if argv[0] in CLONE3_COMMANDS:
            assert ("_ctypes" in modules) == bool(ALLOWED[argv[0]]), argv[0]
        ours = {m for m in modules if m.startswith("hostjob")}
        if argv[0] in OWN_VERB:
            own = f"{VERBS}.{OWN_VERB[argv[0]]}"
            others = sorted(m for m in ours if m.startswith(f"{VERBS}.") and m != own)
            assert others == [], f"{argv[0]} loads another verb's module: {others}"
        for role in NOT_LOADED.get(argv[0], ()):
            loaded = sorted(m for m in ours if m.startswith(ROLES[role]))
            assert loaded == [], f"{argv[0]} loads {role}: {loaded}"
        if argv[0] in MOST_MODULES:
            counts[argv[0]] = sorted(m for m in ours if holds_code(m))
    over = {
        name: f"{len(ours)} > {MOST_MODULES[name]}: {ours}"
        for name, ours in counts.items()
        if len(ours) > MOST_MODULES[name]
    }
    assert over == {}, "modules loaded over the budget:\n" + "\n".join(over.values())


# What a cached `run IMAGE` (the image in the store, nothing to pull) may load of hostjob's
# image side: reading the store and mounting the overlay, never the pull machinery.
PULL_MODULES = (
    "hostjob.images.pull",
    "hostjob.images.registry",
    "hostjob.images.remotes",
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
    assert undeclared(modules) == [], "declare in tests/unit/runtime_path.py"
    assert containers_left(root) == []
