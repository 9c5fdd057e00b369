"""Property test: an image config of any shape goes through every command that reads
one, by the CLI, with success or a one-line error (exit 1, one line on stderr, never
"internal error" or a traceback), and leaves nothing behind.

Each config (``tests.fixtures.image_configs``: every field absent, null, empty or a
value, the documented extremes, and wrong JSON types) is written into an OCI layout
beside a busybox layer and driven through ``import``, ``images`` (table and JSON),
``inspect``, ``run`` in the foreground (the image's own command when it can only start
a harmless program, else ``--entrypoint /bin/true``), ``create`` from the image through
the library (``images.run_image.create_image``), ``run -d`` with a restart policy (the
program exits 3 once, is restarted, then sleeps), ``logs``, ``generate systemd``,
``stop``, ``delete``, ``pack --base``, ``push`` to a real ``docker-registry`` on
127.0.0.1 and ``pull`` back into a second store, ``rmi`` and ``prune``. After each:
no container state, job cgroup, mount, writable layer, log or watcher, and both
stores as empty as before. A config of a wrong type fails at ``import`` naming its
field's JSON path.

Bounded to about a minute on two cores; ``HOSTJOB_EXAMPLES=N`` (or ``--long``, ten
times as many) runs more. The library's side of the same shapes, many more of them,
is ``tests/unit/images/test_image_configs.py``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hostjob.errors import HostjobError
from hostjob.images.run_image import create_image
from hostjob.images.runspec import RunFlags
from hostjob.images.store import Store
from tests.fixtures import image_configs as shapes
from tests.fixtures.images import digest_of, write_config_layout
from tests.fixtures.registry import DockerRegistry
from tests.fixtures.tars import entry, gz, make_tar
from tests.helpers import BUSYBOX, Hostjob, example_count, image_leftovers, new_id, wait_for

NO_AUTHFILES = {"DOCKER_CONFIG": "/nonexistent", "REGISTRY_AUTH_FILE": "", "XDG_RUNTIME_DIR": ""}
LAYER_TAR = make_tar(
    [
        entry("bin", "dir"),
        entry("bin/busybox", data=Path(BUSYBOX).read_bytes(), mode=0o755),
        *(entry(f"bin/{name}", "symlink", linkname="busybox") for name in shapes.HARMLESS),
        entry("etc", "dir"),
    ]
)
LAYER = gz(LAYER_TAR)
DIFF_IDS = [digest_of(LAYER_TAR)]
DAEMON_ENTRYPOINT = '["/bin/busybox", "sh", "-c"]'


def one_line(result: Any, what: str) -> str:
    """The one line of a failed command (exit 1), or "" for a success."""
    assert "internal error" not in result.stderr, f"{what}: {result.stderr}"
    assert "Traceback" not in result.stderr, f"{what}: {result.stderr}"
    if result.returncode == 0:
        return ""
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and len(lines) == 1 and lines[0].strip(), (
        f"{what}: exit {result.returncode}, stderr {result.stderr!r}"
    )
    return str(lines[0])


def files(root: Path) -> list[str]:
    """What a store holds: its files and links, and directories with something in them
    (its name index, emptied but kept by rmi, and locks are its own)."""
    if not root.exists():
        return []
    out = []
    for d, dirs, names in os.walk(root):
        for name in names:
            if name not in ("images.json",) and not name.endswith(".lock"):
                out.append(str(Path(d, name).relative_to(root)))
        for name in dirs:
            path = Path(d, name)
            if path.is_symlink() or not any(path.iterdir()):
                continue
            out.append(str(path.relative_to(root)) + "/")
    return sorted(out)


class World:
    """A layout to write images into, two stores, a state root, a registry."""

    def __init__(self, hj: Hostjob, tmp: Path, registry: DockerRegistry) -> None:
        self.hj, self.tmp, self.registry = hj, tmp, registry
        self.layout = tmp / "layout"
        self.store = tmp / "store"
        self.pulled = tmp / "pulled"
        self.markers = tmp / "markers"
        self.markers.mkdir()
        self.markers.chmod(0o1777)  # the program may run as anyone
        (tmp / "src").mkdir()
        (tmp / "src" / "added").write_text("stacked\n")
        self.count = 0
        for store in (self.store, self.pulled):  # an empty store's own skeleton
            assert self.run("prune", "--store", str(store)).returncode == 0
        self.baseline = {"store": files(self.store), "pulled": files(self.pulled)}

    def run(self, *args: str, timeout: float = 60) -> Any:
        return self.hj(*args, timeout=timeout, env=NO_AUTHFILES)

    def leftovers(self, cid: str, watcher: int | None = None) -> list[str]:
        return image_leftovers(self.hj.root, self.store, cid, watcher)

    def drive(self, raw: bytes, wrong_path: str | None = None, registry: bool = True) -> None:
        self.count += 1
        tag = f"s{self.count}"
        name = f"localhost/shape:{tag}"
        write_config_layout(str(self.layout), [(LAYER, "gzip")], raw, tag)
        s = ("--store", str(self.store))
        imported = self.run("import", *s, "-q", "--name", name, f"oci:{self.layout}:{tag}")
        error = one_line(imported, "import")
        if wrong_path is not None:
            assert error and wrong_path in error, (wrong_path, imported.stderr)
        if error:
            assert files(self.store) == self.baseline["store"], "a failed import left content"
            return
        self.listing(name)
        config = json.loads(raw)
        self.foreground(name, config)
        self.library_create(name)
        self.detached(name, config)
        self.stacked(name)
        if registry:
            self.registry_round_trip(name, tag)
        assert self.run("rmi", *s, name).returncode == 0
        assert self.run("prune", *s).returncode == 0
        assert files(self.store) == self.baseline["store"], "rmi and prune left content"

    def listing(self, name: str) -> None:
        s = ("--store", str(self.store))
        table = self.run("images", *s)
        assert not one_line(table, "images")
        assert len(table.stdout.splitlines()) == 2, table.stdout  # no cell starts a row
        listed = self.run("images", *s, "--format", "json")
        assert not one_line(listed, "images --format json")
        assert [row["name"] for row in json.loads(listed.stdout)] == [name]
        inspected = self.run("inspect", *s, name)
        assert not one_line(inspected, "inspect")
        assert json.loads(inspected.stdout)["names"] == [name]

    def foreground(self, name: str, config: dict[str, Any]) -> None:
        """``run --rm``: the image's own command if it can only start something
        harmless, else /bin/true with the image's every other default."""
        defaults = config.get("config") if isinstance(config.get("config"), dict) else {}
        argv = list(defaults.get("Entrypoint") or []) + list(defaults.get("Cmd") or [])
        cid = new_id("fg")
        if not argv:  # no command of its own (a one-line error): one is given, as it must be
            words = [name, "/bin/true"]
        elif shapes.safe_to_run(argv):
            words = [name]
        else:
            words = ["--entrypoint", "/bin/true", name]
        done = self.run("run", "--rm", "-q", "--store", str(self.store), "--name", cid, *words)
        assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        if done.returncode not in (0, 1) or (done.returncode == 1 and done.stderr):
            # Not the program's own exit: hostjob's error, one line. (false exits 1
            # saying nothing; echo and true say nothing on stderr.)
            one_line(done, "run")
        assert self.leftovers(cid) == []

    def library_create(self, name: str) -> None:
        """``create`` from the image through the library, then ``delete``."""
        store = Store(str(self.store))
        cid = new_id("lc")
        try:
            image = store.resolve(name)
            container = create_image(
                store, image, RunFlags(args=["/bin/true"]), root=str(self.hj.root), name=cid
            )
        except HostjobError as err:
            assert "\n" not in str(err) and "internal error" not in str(err)
        else:
            assert container.status() == "created"
            pid = container.state().pid
            container.delete(force=True)
            if pid:
                os.waitpid(pid, 0)  # the init was this process's child
        assert self.leftovers(cid) == []

    def detached(self, name: str, config: dict[str, Any]) -> None:
        """``run -d`` under a restart policy: the program exits 3 once, is restarted
        and sleeps; ``logs``, ``generate systemd``, ``stop``, ``delete``."""
        cid = new_id("d")
        marker = self.markers / cid
        script = (
            f"echo out; echo err >&2; if [ -e {marker} ]; then exec /bin/busybox sleep 30; fi;"
            f" : > {marker}; exit 3"
        )
        started = self.run(
            "run", "-d", "-q", "--store", str(self.store), "--name", cid, "--stop-timeout", "1",
            "--restart", "on-failure:1", "--entrypoint", DAEMON_ENTRYPOINT, name, script,
        )  # fmt: skip
        if one_line(started, "run -d"):
            assert self.leftovers(cid) == []
            return
        assert started.stdout == f"{cid}\n"
        # Nothing of the image became policy: the only annotation is the one hostjob
        # sets when neither the image nor --user names a user (then the launcher's).
        annotations = self.hj.state(cid).get("annotations") or {}
        assert set(annotations) <= {"io.hostjob.inherit-user"}, annotations
        user = (config.get("config") or {}).get("User") if isinstance(config, dict) else None
        assert ("io.hostjob.inherit-user" in annotations) == (not user), (annotations, user)
        record = json.loads((self.hj.root / cid / "state.json").read_text())
        watcher = int(record["watcher"][0])
        # Restarted by its policy: the program said "out" twice (the second time it
        # sleeps, or exits 3 again if it may not write the marker: then it is stopped).
        assert wait_for(lambda: self.run("logs", cid).stdout.count("out") >= 2, timeout=15)
        logs = self.run("logs", cid)
        assert not one_line(logs, "logs") and "err" in logs.stderr
        unit = self.run("generate", "systemd", cid)
        assert not one_line(unit, "generate systemd")
        signum = int(record["daemon"]["stopSignal"])
        assert re.search(rf"^ExecStop=.* stop -t 1 -s {signum} {cid}$", unit.stdout, re.M)
        assert not one_line(self.run("stop", cid), "stop")
        assert self.hj.status(cid) == "stopped"
        assert not one_line(self.run("delete", cid), "delete")
        assert self.leftovers(cid, watcher) == []

    def stacked(self, name: str) -> None:
        """``pack --base``: a layer stacked on the image from the store."""
        out = self.tmp / f"stacked-{self.count}"
        packed = self.run(
            "pack", str(self.tmp / "src"), "--to", f"oci:{out}:x", "--base", name,
            "--store", str(self.store), "-q",
        )  # fmt: skip
        one_line(packed, "pack --base")

    def registry_round_trip(self, name: str, tag: str) -> None:
        """``push`` to the registry, ``pull`` into another store, ``rmi`` there."""
        ref = f"{self.registry.host}/shapes:{tag}"
        pushed = self.run("push", "--store", str(self.store), "--plain-http", "-q", name, ref)
        if one_line(pushed, "push"):
            return
        p = ("--store", str(self.pulled))
        pulled = self.run("pull", *p, "--plain-http", "-q", ref)
        if not one_line(pulled, "pull"):
            assert self.run("rmi", *p, ref).returncode == 0
        assert self.run("prune", *p).returncode == 0
        assert files(self.pulled) == self.baseline["pulled"], "pull left content"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with DockerRegistry(str(tmp_path_factory.mktemp("registry"))) as reg:
        yield reg


@pytest.fixture
def world(hj: Hostjob, tmp_path: Path, registry: DockerRegistry) -> World:
    # The program may run as another user: it must reach its rootfs under the state
    # root and the store, which pytest's private (0700) temp dirs would hide.
    for directory in (tmp_path, *tmp_path.parents):
        if str(directory).startswith("/tmp/") and directory.is_dir():
            directory.chmod(directory.stat().st_mode | 0o711)
    return World(hj, tmp_path, registry)


def _shape(fields: dict[str, Any]) -> bytes:
    config = {
        "architecture": shapes.HOST_ARCH,
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": DIFF_IDS},
        **fields,
    }
    return json.dumps(config).encode()


# The issue's shapes (a failure found later joins them): each optional field absent,
# null and empty; the extremes; User and StopSignal in each of their forms.
SHAPES = [
    {},  # no config object: `run -d` crashed on it
    {"config": None},
    {"config": {name: None for name in shapes.CONTAINER_FIELDS}},
    {"config": {name: empty for name, (empty, _s) in shapes.CONTAINER_FIELDS.items()}},
    {"config": {"Env": [f"V{i}=value-{i}" for i in range(10_000)], "Cmd": [""]}},
    {"config": {"StopSignal": "SIGQUIT", "User": "65534", "WorkingDir": "relative/dir"}},
    {"config": {"StopSignal": "9", "User": "65534:65534", "Cmd": ["/bin/echo", "hi"]}},
    {"config": {"StopSignal": "garbage", "User": "nobody"}},
    {"config": {"User": "nobody:nogroup", "Entrypoint": ["busybox", "true"]}},
    {"config": {"User": "no-such-user-here"}},
    {
        "config": {
            "Healthcheck": {"Test": ["CMD", "true"], "Interval": 30_000_000_000, "Retries": 3},
            "Volumes": {"/data": {}},
            "ExposedPorts": {"80/tcp": {}},
            "Labels": {key: "true" for key in shapes.POLICY_LABELS},
        }
    },
    {"created": "2024-01-01T00:00:00+\u00b2\u00b2:00"},  # `images` crashed on this
]


@pytest.mark.parametrize("fields", SHAPES, ids=lambda f: json.dumps(f)[:50])
def test_the_issues_shapes(world: World, fields: dict[str, Any]) -> None:
    world.drive(_shape(fields))


def test_any_config(world: World, request: pytest.FixtureRequest) -> None:
    @settings(
        max_examples=example_count(request, 10),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    # The registry's round trip (a second of the few seconds each costs) for a third.
    @given(shapes.valid_config(DIFF_IDS, runnable=True), st.integers(0, 2))
    def one(config: dict[str, Any], which: int) -> None:
        world.drive(json.dumps(config).encode(), registry=which == 0)

    one()


def test_any_wrong_type_is_refused_naming_its_field(
    world: World, request: pytest.FixtureRequest
) -> None:
    @settings(
        max_examples=example_count(request, 8),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(shapes.wrong_config(DIFF_IDS))
    @example(
        (json.loads(_shape({"config": {"StopSignal": 15}})), "config.StopSignal"),
    )
    def one(wrong: tuple[dict[str, Any], str]) -> None:
        config, path = wrong
        world.drive(json.dumps(config).encode(), wrong_path=path)

    one()


def test_stop_takes_a_signal(world: World) -> None:
    """``stop -s``, which a ``generate systemd`` unit's ExecStop gives: the signal named
    reaches the program, whatever its own stop signal."""
    name = "localhost/shape:stop"
    s = ("--store", str(world.store))
    layout = world.layout
    write_config_layout(
        str(layout), [(LAYER, "gzip")], _shape({"config": {"StopSignal": "SIGKILL"}}), "stop"
    )
    assert world.run("import", *s, "-q", "--name", name, f"oci:{layout}:stop").returncode == 0
    cid = new_id("st")
    script = "trap 'echo got-usr1; exit 0' USR1; while :; do /bin/busybox sleep 0.05; done"
    started = world.run(
        "run", "-d", "-q", *s, "--name", cid, "--entrypoint", DAEMON_ENTRYPOINT, name, script
    )
    assert started.returncode == 0, started.stderr
    assert world.run("stop", "-s", "USR1", "-t", "5", cid).returncode == 0
    assert wait_for(lambda: "got-usr1" in world.run("logs", cid).stdout, timeout=10)
    bad = world.run("stop", "-s", "NOSUCH", cid)
    assert one_line(bad, "stop -s NOSUCH") == "unknown signal 'NOSUCH'"
    assert world.run("delete", "--force", cid).returncode == 0
    assert world.leftovers(cid) == []
    assert world.run("rmi", *s, name).returncode == 0
