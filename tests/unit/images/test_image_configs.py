"""Property test: an image config of any shape the image-spec allows goes through the
library's whole image side without anything but one-line ``HostjobError``s -- packed
into a layout, imported into a store, listed, inspected, stacked on (``pack --base``),
made into a container's config (every ``run`` flag that meets the image's: ``--user``,
``--entrypoint``, arguments, the inherit annotation), planned as the runtime would start
it, and turned into a detached container's settings and its systemd unit. A config of
a type the schema does not allow is refused with the field's JSON path. Nothing is
left in the store beyond the image, and nothing of the image becomes policy.

No root needed: the run itself is ``tests/integration/images/test_image_configs.py``.
The strategies are ``tests.fixtures.image_configs``; ``HOSTJOB_EXAMPLES=N`` (or
``--long``) raises the example counts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hostjob.boot import jsonio
from hostjob.cli.render import ago, details_json, summary_json, table
from hostjob.errors import HostjobError
from hostjob.images.pack import pack
from hostjob.images.run_image import stop_signal
from hostjob.images.runspec import RunFlags, build_spec
from hostjob.images.store import Store
from hostjob.runtime.launch import plan as launch
from hostjob.spec import runtime as wire
from hostjob.specconv import convert as conversion
from tests.fixtures import image_configs as shapes
from tests.fixtures.images import digest_of, write_config_layout
from tests.fixtures.tars import entry, gz, make_tar
from tests.helpers import example_count

LAYER_TAR = make_tar([entry("bin/true", data=b"#!/bin/sh\n", mode=0o755), entry("etc", "dir")])
LAYER = gz(LAYER_TAR)
DIFF_IDS = [digest_of(LAYER_TAR)]


def one_line(err: HostjobError) -> str:
    message = str(err)
    assert message.strip() and "\n" not in message, repr(message)
    assert "internal error" not in message
    return message


def attempt(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn``'s result, or None after a one-line HostjobError; anything else fails."""
    try:
        return fn(*args, **kwargs)
    except HostjobError as err:
        one_line(err)
        return None


def store_tree(root: Path) -> list[str]:
    return sorted(
        str(Path(d, name).relative_to(root))
        for d, dirs, files in os.walk(root)
        for name in dirs + files
    )


class Case:
    """One config in a layout, and an empty store to import it into."""

    def __init__(self, tmp: Path, config: dict[str, Any] | bytes) -> None:
        self.raw = config if isinstance(config, bytes) else json.dumps(config).encode()
        self.layout = tmp / "layout"
        write_config_layout(str(self.layout), [(LAYER, "gzip")], self.raw, "t")
        self.store = Store(str(tmp / "store"))
        self.store.prune()  # makes the store's own skeleton: what an empty store holds
        self.empty = store_tree(tmp / "store")
        self.tmp = tmp

    def left(self) -> list[str]:
        """What the store holds beyond an empty one's skeleton (and its name index,
        made by the first name: it must name nothing)."""
        assert self.store.images() == []
        index = ("images.json", "images.lock")
        return [p for p in store_tree(self.tmp / "store") if p not in (*self.empty, *index)]


FLAG_USERS = [None, None, None, "65534:65534", "0", "nobody", "nobody:nogroup", ":", "x:y:z"]
FLAG_ARGS: list[list[str]] = [[], [], ["/bin/true"], ["", "x"]]
FLAG_ENTRYPOINTS = [None, None, "/bin/true", "", '["/bin/true", "-x"]', "[]"]
FLAG_ANNOTATIONS: list[list[str]] = [[], [], ["io.hostjob.inherit-user=true"]]

flags_strategy = st.builds(
    RunFlags,
    user=st.sampled_from(FLAG_USERS),
    args=st.sampled_from(FLAG_ARGS),
    entrypoint=st.sampled_from(FLAG_ENTRYPOINTS),
    annotations=st.sampled_from(FLAG_ANNOTATIONS).map(list),
    mount_mode=st.sampled_from([None, None, "bind"]),
)


def check_library(case: Case, flags: RunFlags) -> None:
    """Import, list, inspect, pack --base, then the container's config and settings."""
    pulled = attempt(case.store.import_archive, f"oci:{case.layout}:t")
    if pulled is None:
        assert case.left() == [], "a failed import left content in the store"
        return
    rows = case.store.images()
    assert [row.name for row in rows] == [pulled.name] and rows[0].error is None
    print_table(rows)
    jsonio.dumps([summary_json(row) for row in rows], 2).encode()
    details = case.store.inspect(pulled.name)
    jsonio.dumps(details_json(details), 2).encode()
    image = case.store.resolve(pulled.name)
    packed = attempt(
        pack,
        str(case.tmp / "layout"),  # any directory: the layout itself, packed on top
        f"oci:{case.tmp / 'stacked'}:s",
        base=pulled.name,
        store_root=case.store.root,
        cmd=["/bin/true"],
    )
    if packed is not None:
        check_stacked(json.loads(case.raw), case.tmp / "stacked", packed.config)
    defaults = image.config.container()
    spec = attempt(build_spec, defaults, flags)
    if spec is not None:
        check_policy(defaults, flags, spec)
        job = attempt(conversion.to_job_config, wire.Spec.decode(spec), str(case.tmp), "c")
        if job is not None:
            attempt(launch.plan, job, job.process)
            jsonio.dumps(job.to_json()).encode()
    check_daemon(defaults.stop_signal)
    removed = case.store.remove(pulled.name)
    assert removed is not None
    case.store.prune()
    assert case.left() == [], "rmi and prune left content behind"


def check_stacked(base: dict[str, Any], layout: Path, digest: str) -> None:
    """``pack --base`` keeps every field of the base's config it does not change, those
    hostjob never reads too; ``Cmd`` is the one given, the layer and history one more."""
    stacked = json.loads((layout / "blobs" / "sha256" / digest.partition(":")[2]).read_bytes())
    for key in base.keys() - {"config", "rootfs", "history", "created"}:
        assert stacked[key] == base[key], key
    assert stacked["config"] == {**(base.get("config") or {}), "Cmd": ["/bin/true"]}
    assert stacked["rootfs"]["diff_ids"][:-1] == base["rootfs"]["diff_ids"]
    assert len(stacked["history"]) == len(base.get("history") or []) + 1


def print_table(rows: list[Any]) -> None:
    cells = [(r.name, r.id or "-", str(r.size), ago(r.created), r.platform or "-") for r in rows]
    text = table(cells)
    assert len(text.splitlines()) == len(rows), "a cell started a row of its own"


def check_policy(defaults: Any, flags: RunFlags, spec: dict[str, Any]) -> None:
    """Only flags make annotations; an explicit --user always wins; WorkingDir stays in
    the image."""
    expected = dict(a.partition("=")[::2] for a in flags.annotations)
    if flags.mount_mode:
        expected[conversion.ANNOTATION_MOUNT_MODE] = flags.mount_mode
    if flags.user:
        expected.pop(conversion.ANNOTATION_INHERIT_USER, None)
    inherit = expected.get(conversion.ANNOTATION_INHERIT_USER) == "true"
    if not flags.user and not inherit and not defaults.user:
        expected[conversion.ANNOTATION_INHERIT_USER] = "true"
    assert spec["annotations"] == expected
    user = spec["process"].get("user")
    if flags.user:
        assert user is not None
        name, _, _group = flags.user.partition(":")
        assert user.get("username", str(user.get("uid"))) == name
    elif inherit or not defaults.user:
        assert user is None
    if flags.cwd is None:
        cwd = spec["process"]["cwd"]
        inside = cwd.removeprefix("$CONTAINER_SANDBOX_MOUNT_POINT/")
        assert inside != cwd and ".." not in inside.split("/")


def check_daemon(image_signal: str | None) -> None:
    """``run -d``'s stop signal and a unit file of it."""
    from hostjob.supervisor.options import daemon_config
    from hostjob.supervisor.units import unit_file

    signum = attempt(stop_signal, image_signal)
    if signum is None:
        return
    daemon = daemon_config(detach=True, restart="on-failure:2")
    assert daemon is not None
    daemon.stop_signal = signum
    daemon.command = ["--store", "/s", "-q", "localhost/t:t"]
    unit = unit_file("c", "localhost/t:t", daemon, ["/usr/bin/hostjob"], "/run/hostjob")
    directives = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line)
    assert directives["ExecStop"].endswith(f" -s {signum} c")
    assert str(128 + signum) in directives["SuccessExitStatus"].split()


@pytest.fixture
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Any:
    def make(config: dict[str, Any] | bytes) -> Case:
        return Case(tmp_path_factory.mktemp("case"), config)

    return make


# The issue's shapes, each kept as an example (a failure found later joins them).
ALL_ABSENT = {"architecture": shapes.HOST_ARCH, "os": "linux"}
SHAPES = [
    {},  # no config object
    {"config": None},
    {"config": {}},
    {"config": {name: None for name in shapes.CONTAINER_FIELDS}},
    {"config": {name: empty for name, (empty, _s) in shapes.CONTAINER_FIELDS.items()}},
    {"config": {"Env": [f"V{i}=value-{i}" for i in range(10_000)]}},
    {"config": {"Cmd": [""]}},
    {"config": {"StopSignal": "SIGQUIT", "User": "65534"}},
    {"config": {"StopSignal": "9", "User": "65534:65534"}},
    {"config": {"StopSignal": "garbage", "User": "nobody"}},
    {"config": {"StopSignal": "\u00b2", "User": "nobody:nogroup"}},
    {"config": {"StopSignal": "1" * 5000, "User": "no-such-user-here"}},
    {"config": {"User": "\u00b2", "WorkingDir": "relative/dir"}},
    {
        "config": {
            "Healthcheck": {"Test": ["CMD", "true"], "Interval": 30_000_000_000, "Retries": 3},
            "Volumes": {"/data": {}, "/var/log": {}},
            "ExposedPorts": {"80/tcp": {}, "53/udp": {}},
        }
    },
    {"config": {"Labels": {key: "true" for key in shapes.POLICY_LABELS}}},
    {"created": "2024-01-01T00:00:00+\u00b2\u00b2:00"},  # `images` crashed on this
    {"rootfs": {"type": "other", "diff_ids": DIFF_IDS}},
]


def _shape(fields: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {**ALL_ABSENT, "rootfs": {"type": "layers", "diff_ids": DIFF_IDS}}
    return {**base, **fields}


@pytest.mark.parametrize("fields", SHAPES, ids=lambda f: json.dumps(f)[:60])
@pytest.mark.parametrize("flags", [RunFlags(), RunFlags(user="65534", args=["/bin/true"])])
def test_the_issues_shapes(fresh: Any, fields: dict[str, Any], flags: RunFlags) -> None:
    check_library(fresh(_shape(fields)), flags)


def test_any_valid_config(fresh: Any, request: pytest.FixtureRequest) -> None:
    @settings(max_examples=example_count(request, 100), database=None)
    @given(shapes.valid_config(DIFF_IDS), flags_strategy)
    def one(config: dict[str, Any], flags: RunFlags) -> None:
        check_library(fresh(config), flags)

    one()


def test_any_wrong_type_names_its_field(fresh: Any, request: pytest.FixtureRequest) -> None:
    @settings(max_examples=example_count(request, 40), database=None)
    @given(shapes.wrong_config(DIFF_IDS))
    @example(({**_shape({}), "config": {"StopSignal": 9}}, "config.StopSignal"))
    @example(({**_shape({}), "config": {"Env": "A=b"}}, "config.Env"))
    def one(wrong: tuple[dict[str, Any], str]) -> None:
        config, path = wrong
        case = fresh(config)
        with pytest.raises(HostjobError) as found:
            case.store.import_archive(f"oci:{case.layout}:t")
        message = one_line(found.value)
        assert path in message, (path, message)
        assert case.left() == []

    one()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"config": {"Env": ["A=\\u0000"]}}', "holds a NUL character"),
        (b'{"config": {"User": "\\ud800"}}', "unpaired UTF-16 surrogate"),
        (b"[]", "expected an object"),
        (b"{", "not valid JSON"),
        (b'{"config": {"Env": ["A=b"]}} trailing', "not valid JSON"),
    ],
)
def test_config_blobs_no_json_reader_takes(fresh: Any, raw: bytes, says: str) -> None:
    case = fresh(raw)
    with pytest.raises(HostjobError, match="config sha256:") as found:
        case.store.import_archive(f"oci:{case.layout}:t")
    assert says in one_line(found.value)
    assert case.left() == []
