"""Hostile input through the CLI: path traversal in IDs and image
references is refused, malformed configs get a one-line error and change nothing,
a job never adopts a cgroup that holds other processes, state and store directories
are not world-writable, and a non-root user is told what hostjob needs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.images import register_container
from tests.helpers import (
    CGROUP_ROOT,
    REPO,
    Hostjob,
    base_config,
    cgroup_dirs,
    containers_left,
    new_id,
)

BAD_IDS = [
    "..", ".", "../x", "../../etc", "a/b", "/abs", "x/..", "a" * 1025, "", "a b", "~root",
    "$(id)", "a\\b", "id\n", "\u00e9", "*", "a:b",
]  # fmt: skip

VERBS = [
    ("state",), ("start",), ("kill",), ("delete",), ("delete", "--force"), ("pause",),
    ("resume",), ("ps",), ("events", "--stats"), ("stats",), ("update", "--pids-limit", "5"),
    ("exec",),
]  # fmt: skip


def left(hj: Hostjob) -> list[str]:
    """What the state root holds (nothing when it was never made)."""
    return containers_left(hj.root)


def tree(path: Path) -> list[str]:
    """Everything under ``path`` but hostjob's log file."""
    if not path.exists():
        return []
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.name != "hostjob.log")


@pytest.mark.parametrize("bad", BAD_IDS)
def test_ids_that_try_traversal_are_refused(hj: Hostjob, bundle, tmp_path: Path, bad: str) -> None:
    b = bundle(base_config("sleep", "300"))
    (tmp_path / "state").mkdir(exist_ok=True)
    before = tree(tmp_path)
    err = hj.fail("create", "--bundle", str(b), bad)
    assert "invalid container ID" in err or err.startswith("invalid"), err
    err = hj.fail("run", "--bundle", str(b), bad)
    assert "invalid container ID" in err, err
    for verb in VERBS:
        extra = ("true",) if verb == ("exec",) else ()
        result = hj(*verb, bad, *extra)
        if verb == ("delete", "--force") and result.returncode == 0:
            continue  # runc: an unknown ID with --force exits 0
        assert result.returncode == 1, (verb, result)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert tree(tmp_path) == before
    assert left(hj) == []


def test_image_references_that_try_traversal_are_refused(tmp_path: Path) -> None:
    """Names go into the store's index and container records, never into paths unchecked."""
    from hostjob.errors import HostjobError
    from hostjob.images import reference as refs
    from hostjob.images import rootfs
    from hostjob.images.store import Store

    store = Store(str(tmp_path / "store"))
    hostile = [
        "../../etc/passwd", "docker://../x", "localhost/../x:tag", "a/../../b:tag",
        "busybox@sha256:../../../etc/passwd", "busybox@sha256:" + "g" * 64, "a//b", "/abs/name",
        "x:../../tag", "docker://localhost:5000/a/./b", "busybox:" + "t" * 200, "\x00",
    ]  # fmt: skip
    for ref in hostile:
        with pytest.raises(HostjobError) as info:
            refs.parse(ref)
        assert "\n" not in str(info.value)
        with pytest.raises(HostjobError):
            store.pull(ref)
    for container_id in ("..", "../x", "a/b", ".", ""):
        with pytest.raises(HostjobError):
            register_container(store, container_id, "busybox")
        with pytest.raises(HostjobError):
            rootfs.rw_dir(store.gc, container_id)
    assert [p for p in tree(tmp_path) if not p.startswith("store")] == []


def test_cli_image_commands_refuse_traversal(hj: Hostjob, tmp_path: Path) -> None:
    """pull, import, rmi, inspect and run IMAGE refuse traversing references and names."""
    store = str(tmp_path / "store")
    refs = (
        "../../etc/passwd",
        "localhost/../x:tag",
        "busybox@sha256:../../x",
        "a//b",
        "docker://..",
    )
    for ref in refs:
        for verb in (["pull", "--store", store], ["rmi", "--store", store],
                     ["inspect", "--store", store], ["run", "--rm", "--store", store]):  # fmt: skip
            err = hj.fail(*verb, ref)
            assert "Traceback" not in err
    for name in ("../x", "..", "a/b"):
        err = hj.fail("run", "--rm", "--store", store, "--name", name, "busybox")
        assert "invalid container ID" in err, err
    err = hj.fail("import", "--store", store, "oci:/nonexistent/../../etc")
    assert [p for p in tree(tmp_path) if not p.startswith(("store", "state"))] == []
    assert left(hj) == []


# --- malformed configs through `create` ---------------------------------------------------
# Mutated configs through the CLI's create and run: the bundle_cli fuzz target
# (tests/fuzz/cli.py), run by tests/integration/test_fuzz_cli.py.


def test_config_with_a_lone_surrogate(hj: Hostjob, bundle) -> None:
    """Regression (fuzzer): an escaped unpaired surrogate crashed create with a traceback."""
    config = base_config("sleep", "300")
    config["process"]["env"].append("A=\udca4")
    b = bundle(config)
    (b / "config.json").write_text(json.dumps(config))  # ensure_ascii: "\udca4" escaped
    cid = new_id()
    err = hj.fail("create", "--bundle", str(b), cid)
    assert "unpaired UTF-16 surrogate" in err
    assert left(hj) == []


# --- a job never adopts a busy cgroup ----------------------------------------------------


def test_busy_cgroup_is_refused_and_its_processes_live(hj: Hostjob, bundle) -> None:
    """Regression: cgroupsPath naming a cgroup that holds processes, plus a create that
    fails later (a missing program), killed every process in it and removed it."""
    name = new_id("victim")
    made = []
    for hierarchy in os.listdir(CGROUP_ROOT):
        top = os.path.join(CGROUP_ROOT, hierarchy)
        if os.path.islink(top) or not os.path.isdir(top):
            continue
        try:
            os.mkdir(os.path.join(top, name))
            made.append(os.path.join(top, name))
        except OSError:
            pass
    victim = subprocess.Popen(["sleep", "300"])
    try:
        for path in made:
            try:
                Path(path, "cgroup.procs").write_text(str(victim.pid))
            except OSError:
                pass
        for args in (["/nonexistent"], ["sleep", "300"]):
            config = base_config(*args)
            config["linux"] = {"cgroupsPath": f"/{name}"}
            b = bundle(config, name=f"bundle-{len(args)}")
            err = hj.fail("create", "--bundle", str(b), new_id())
            assert f"cgroup /{name} already holds processes ({victim.pid})" in err, err
        time.sleep(0.1)
        assert victim.poll() is None, "a process of the busy cgroup was killed"
        assert all(os.path.isdir(p) for p in made), "the busy cgroup was removed"
        assert left(hj) == []
    finally:
        victim.kill()
        victim.wait()
        for path in made:
            try:
                os.rmdir(path)
            except OSError:
                pass


# --- permissions ---------------------------------------------------------------------------


def test_state_directories_are_private(hj: Hostjob, bundle) -> None:
    b = bundle(base_config("sleep", "300"))
    cid = new_id()
    hj.ok("create", "--bundle", str(b), cid)
    for path in (hj.root, hj.root / cid):
        # 0700, or 0710 (traversable by the job's group, for image containers running as
        # another user)
        assert stat.S_IMODE(path.stat().st_mode) & 0o066 == 0, path
    for entry in (hj.root / cid).iterdir():
        assert not entry.stat().st_mode & 0o002, f"{entry} is world-writable"
    hj.ok("delete", "--force", cid)


def test_world_writable_state_root_is_refused(hj: Hostjob, bundle) -> None:
    hj.root.mkdir(parents=True, exist_ok=True)
    hj.root.chmod(0o777)
    b = bundle(base_config("sleep", "300"))
    err = hj.fail("create", "--bundle", str(b), new_id())
    assert "writable by others" in err
    assert os.listdir(hj.root) == []
    hj.root.chmod(0o700)


def test_store_directories_are_not_world_writable(tmp_path: Path) -> None:
    from hostjob.images.store import Store
    from tests.fixtures.images import write_layout
    from tests.fixtures.tars import entry, make_tar

    layout = str(tmp_path / "layout")
    write_layout(layout, [make_tar([entry("a/b", data=b"x"), entry("c", "dir", mode=0o777)])])
    old = os.umask(0)  # the worst umask a caller can have
    try:
        store = Store(str(tmp_path / "store"))
        store.pull(f"oci:{layout}")
    finally:
        os.umask(old)
    loose = [] if not (tmp_path / "store").stat().st_mode & 0o002 else ["store"]
    for dirpath, dirnames, filenames in os.walk(tmp_path / "store"):
        if os.path.basename(dirpath) == "diff":
            dirnames.clear()  # the image's own tree keeps the image's modes
            continue
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.lstat(path).st_mode & 0o002 and not os.path.islink(path):
                loose.append(path)
    assert loose == []


def _as_nobody(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    """hostjob run as uid/gid 65534 with the repository's sources (readable by all)."""
    python = "/usr/bin/python3"  # Debian's: reachable by every user
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(REPO / "src")}
    argv = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    argv += [python, "-m", "hostjob", "--root", str(root), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


def test_non_root_gets_a_clear_error(tmp_path: Path, bundle) -> None:
    for directory in (REPO, *REPO.parents):
        if not os.stat(directory).st_mode & 0o005:
            pytest.fail(f"{directory} is not readable by others; cannot run as nobody")
    b = bundle(base_config("sleep", "300"))
    root = tmp_path / "state"
    for verb in (
        ["create", "--bundle", str(b), "x1"], ["run", "--bundle", str(b), "x1"], ["state", "x1"],
        ["list"], ["kill", "x1"], ["delete", "x1"], ["start", "x1"], ["exec", "x1", "true"],
        ["ps", "x1"], ["pause", "x1"], ["events", "--stats", "x1"], ["update", "x1"],
    ):  # fmt: skip
        done = _as_nobody(*verb, root=root)
        assert done.returncode == 1, (verb, done)
        assert done.stderr.strip() == f"hostjob {verb[0]} needs root (euid 0): run it as root"
    assert _as_nobody("spec", "--bundle", str(tmp_path / "nobody"), root=root).returncode in (0, 1)
    assert _as_nobody("features", root=root).returncode == 0
    assert not root.exists()


# --- symlinks in the image never lead hostjob's own writes out of it ---------------------


def test_cwd_through_an_image_symlink_is_not_made_on_the_host(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    """Regression: an image with `w -> <host dir>` and cwd `/w/new`, run as an unprivileged
    user, had root create `<host dir>/new` owned by that user (say /root/.ssh)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    config = base_config("sleep", "300")
    config["process"]["user"] = {"uid": 65534, "gid": 65534}
    config["process"]["cwd"] = "/w/new/deeper"
    b = bundle(config)
    (b / "rootfs" / "w").symlink_to(outside)
    err = hj.fail("create", "--bundle", str(b), new_id())
    assert "leads outside the container's root through a symlink" in err, err
    assert os.listdir(outside) == []
    assert left(hj) == []
    # inside the image a missing cwd is still made, for the process's user
    config["process"]["cwd"] = "/made/here"
    (b / "config.json").write_text(json.dumps(config))
    cid = new_id()
    hj.ok("create", "--bundle", str(b), cid)
    made = b / "rootfs" / "made" / "here"
    assert made.is_dir() and made.stat().st_uid == 65534
    hj.ok("delete", "--force", cid)


def test_volume_link_through_an_image_symlink_is_refused(
    hj: Hostjob, bundle, tmp_path: Path
) -> None:
    """Regression: a volume destination below an image symlink (`v -> <host dir>`, or a
    plain image's var/run -> /run) put the link and its parents on the host."""
    outside = tmp_path / "outside"
    outside.mkdir()
    config = base_config("sleep", "300")
    config["mounts"] = [{"destination": "/v/sub/data", "type": "bind", "source": str(tmp_path)}]
    b = bundle(config)
    (b / "rootfs" / "v").symlink_to(outside)
    err = hj.fail("create", "--bundle", str(b), new_id())
    assert "is a symlink leading outside it" in err, err
    assert os.listdir(outside) == []
    assert left(hj) == []


# --- a damaged state file ---------------------------------------------------------------


@pytest.mark.parametrize(
    "damage", ['{"id": "x", "pid": 1', "[]", "", '{"pid": "one"}', "\x00\xff", '{"id": "\\ud800"}']
)
def test_corrupt_state_file(hj: Hostjob, bundle, damage: str) -> None:
    """Regression: a truncated state.json made state/list/delete print a traceback, and
    any damaged one made `list` fail for every container and `delete --force` fail for
    ever. Now: one line naming the container; list shows it stopped; delete --force
    removes its default cgroup (and what runs there) and its state."""
    b = bundle(base_config("sleep", "300"))
    good, bad = new_id(), new_id()
    for cid in (good, bad):
        hj.ok("run", "-d", "--bundle", str(b), cid, stdin=open(os.devnull))  # noqa: SIM115
    pid = hj.state(bad)["pid"]
    (hj.root / bad / "state.json").write_text(damage, errors="surrogateescape")
    for verb in (("state",), ("kill",), ("delete",), ("pause",), ("ps",)):
        err = hj.fail(*verb, bad)
        assert err.startswith(f"state of container {bad} is corrupt"), err
    listed = {c["id"]: c["status"] for c in json.loads(hj.ok("list", "--format", "json"))}
    assert listed == {good: "running", bad: "stopped"}
    hj.ok("delete", "--force", bad)
    assert left(hj) == [good]
    assert cgroup_dirs(f"/hostjob/{bad}") == []
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and _state_of(pid) not in ("Z", ""):
        assert time.monotonic() < deadline, "the container process outlived delete --force"
        time.sleep(0.01)
    hj.ok("delete", "--force", good)


def test_library_delete_by_id_of_a_corrupt_record(tmp_path: Path, bundle) -> None:
    """The clean-up of a damaged record is the library's, not the CLI's: a program using the
    library gets the same from ``Container.delete_by_id``: the job's processes killed,
    its cgroup and every parent hostjob made for it removed, the ID free again."""
    from hostjob import Container, ContainerNotFound, StateCorrupt

    root = tmp_path / "state"
    cid = new_id()
    container = Container.create(cid, str(bundle(base_config("sleep", "300"))), root=str(root))
    container.start()
    pid = container.pid
    (root / cid / "state.json").write_text('{"id": "x", "pid": 1')
    with pytest.raises(StateCorrupt):
        Container.delete_by_id(cid, root=str(root))
    assert cgroup_dirs(f"/hostjob/{cid}") != []
    Container.delete_by_id(cid, root=str(root), force=True)
    assert cgroup_dirs(f"/hostjob/{cid}") == []
    assert not (root / cid).exists()
    os.waitpid(pid, 0)  # killed: the library's caller is its parent
    Container.delete_by_id(cid, root=str(root), force=True)  # gone: fine with force
    with pytest.raises(ContainerNotFound):
        Container.delete_by_id(cid, root=str(root))


def _state_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return ""
