"""The fuzz targets: each takes bytes and either succeeds or raises ``HostjobError``
with a one-line message. Anything else (another exception, a multi-line message, a
write outside the directory it was given) is a bug, reported by raising ``Finding``.

Raw targets feed the bytes to the parser as they are; ``*_mutated`` targets read them
through ``tests.fuzz.chooser`` to mutate a valid seed, reaching the conversion code.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from typing import Any

from hostjob.errors import HostjobError
from tests.fuzz.chooser import Chooser, all_keys, mutate


class Finding(AssertionError):
    """A bug a target found."""


def _check_error(err: HostjobError) -> None:
    message = str(err)
    if not message.strip() or "\n" in message:
        raise Finding(f"{type(err).__name__} without a one-line message: {message!r}")


def expect_clean(fn: Callable[[], Any], runtime_path: bool = False) -> Any:
    """Run ``fn``; a HostjobError with one line is fine, anything else is a Finding.

    ``runtime_path``: hide ``json.decoder`` from ``sys.modules`` meanwhile, as a runtime
    command never loads it (and the C JSON scanner behaves differently without it)."""
    import sys

    names = ("json.decoder",) if runtime_path else ()
    hidden = {k: sys.modules.pop(k) for k in names if k in sys.modules}
    try:
        return _expect_clean(fn)
    finally:
        sys.modules.update(hidden)


def _expect_clean(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except HostjobError as err:
        _check_error(err)
        return None
    except Finding:
        raise
    except RecursionError as err:
        raise Finding(f"RecursionError: {err}") from err
    except Exception as err:
        raise Finding(f"{type(err).__name__}: {err}") from err


# --- sandboxes ------------------------------------------------------------------------


# Where sandboxes are made when set (the test session's own temp dir, which pytest rotates:
# a killed session leaves nothing in /tmp), else the system's temp dir.
SANDBOX_DIR_VARIABLE = "HOSTJOB_FUZZ_SANDBOX_DIR"


class Sandbox:
    """A temp dir with a bundle (``bundle/rootfs``), a layer parent and a canary dir
    whose content must never change."""

    def __init__(self) -> None:
        parent = os.environ.get(SANDBOX_DIR_VARIABLE) or None
        self.base = tempfile.mkdtemp(prefix="hostjob-fuzz-", dir=parent)
        self.bundle = os.path.join(self.base, "bundle")
        os.makedirs(os.path.join(self.bundle, "rootfs", "bin"))
        self.layers = os.path.join(self.base, "layers")
        os.mkdir(self.layers)
        self.outside = os.path.join(self.base, "outside")
        os.makedirs(os.path.join(self.outside, "dir"))
        with open(os.path.join(self.outside, "secret"), "w") as f:
            f.write("secret")
        self.canary = self.snapshot()

    def snapshot(self) -> list[tuple[str, int, int]]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.outside):
            for name in sorted(dirnames + filenames):
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                out.append((path, st.st_mode, st.st_size if stat.S_ISREG(st.st_mode) else 0))
        return sorted(out)

    def check_canary(self) -> None:
        if self.snapshot() != self.canary:
            raise Finding(f"something was written outside the layer: {self.snapshot()}")
        if sorted(os.listdir(self.base)) != ["bundle", "layers", "outside"]:
            raise Finding(f"something was written beside the layer: {os.listdir(self.base)}")

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


_SANDBOX: Sandbox | None = None


def sandbox() -> Sandbox:
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = Sandbox()
        atexit.register(close_sandbox)
    return _SANDBOX


def close_sandbox() -> None:
    """Remove the process's sandbox, if it made one (at exit, or when a test session ends)."""
    global _SANDBOX
    if _SANDBOX is not None:
        _SANDBOX.close()
        _SANDBOX = None


# --- config.json ----------------------------------------------------------------------

CONFIG_SEED: dict[str, Any] = {
    "ociVersion": "1.2.0",
    "process": {
        "terminal": False,
        "consoleSize": {"height": 24, "width": 80},
        "user": {"uid": 0, "gid": 0, "umask": 18, "additionalGids": [1, 2]},
        "args": ["$CONTAINER_SANDBOX_MOUNT_POINT/bin/sh", "-c", "true"],
        "env": ["PATH=/usr/bin:/bin", "A=%CONTAINER_SANDBOX_MOUNT_POINT%"],
        "cwd": "/work",
        "capabilities": {
            "bounding": ["CAP_KILL", "CAP_NET_BIND_SERVICE"],
            "effective": ["CAP_KILL"],
            "permitted": ["CAP_KILL"],
            "ambient": [],
        },
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": True,
        "oomScoreAdj": 100,
        "apparmorProfile": "x",
    },
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "fuzz",
    "mounts": [
        {"destination": "/data", "type": "bind", "source": "/tmp", "options": ["rbind", "ro"]},
        {"destination": "/proc", "type": "proc", "source": "proc"},
    ],
    "hooks": {
        "prestart": [{"path": "/bin/true", "args": ["true"], "env": ["A=1"], "timeout": 5}],
        "createRuntime": [{"path": "/bin/true"}],
        "poststop": [{"path": "/bin/true"}],
    },
    "annotations": {
        "io.hostjob.mount-mode": "host",
        "io.hostjob.inherit-user": "false",
        "microsoft.com/hostprocess-container": "true",
    },
    "linux": {
        "cgroupsPath": "/hostjob/fuzz",
        "namespaces": [{"type": "pid"}, {"type": "mount"}],
        "resources": {
            "memory": {"limit": 1 << 30, "reservation": 1 << 29, "swap": 2 << 30},
            "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0-1"},
            "pids": {"limit": 100},
            "blockIO": {
                "weight": 500,
                "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1}],
            },
            "hugepageLimits": [{"pageSize": "2MB", "limit": 0}],
            "devices": [{"allow": False, "access": "rwm"}],
        },
        "maskedPaths": ["/proc/kcore"],
        "seccomp": {"defaultAction": "SCMP_ACT_ALLOW"},
    },
    "windows": {
        "jobContainer": {"rootfsMountPoint": "/tmp/hostjob-fuzz-mount-point"},
        "resources": {"cpu": {"count": 1}, "memory": {"limit": 1 << 30}},
    },
}
CONFIG_KEYS = [
    *all_keys(CONFIG_SEED),
    "sysctl", "vm", "hyperv", "username", "unified", "idle", "swappiness", "disableOOMKiller",
    "io.hostjob.rootfs-mount-point", "microsoft.com/hostprocess-rootfs-location",
    "microsoft.com/hostprocess-inherit-user", "createContainer", "startContainer", "poststart",
    "maximum", "shares", "storage", "iops", "bps", "uidMappings", "realtimeRuntime", "mems",
]  # fmt: skip


def _convert_config(raw: bytes) -> None:
    from hostjob.boot import jsonio
    from hostjob.cgroups import resolve_path
    from hostjob.runtime import bundle
    from hostjob.runtime.launch import plan as resolve

    box = sandbox()
    with open(os.path.join(box.bundle, "config.json"), "wb") as f:
        f.write(raw)

    def convert() -> None:
        job = bundle.load_bundle(box.bundle, "fuzz")
        resolve_path(job.cgroups_path, "fuzz")
        assert job.resources is None or job.resources.to_json() == job.resources_json
        resolve.plan(job, job.process)
        # What create would persist: the record must encode (state.json is UTF-8).
        jsonio.dumps(job.to_json()).encode()

    expect_clean(convert, runtime_path=True)


def config_json(data: bytes) -> None:
    _convert_config(data)


def config_mutated(data: bytes) -> None:
    doc = mutate(CONFIG_SEED, Chooser(data), CONFIG_KEYS)
    _convert_config(json.dumps(doc).encode("utf-8", "surrogatepass"))


# --- exec process JSON ----------------------------------------------------------------

PROCESS_SEED = CONFIG_SEED["process"]
PROCESS_KEYS = [*all_keys(PROCESS_SEED), "username", "selinuxLabel", "scheduler", "ioPriority"]


def _load_process(raw: bytes) -> None:
    from hostjob.boot import jsonio
    from hostjob.runtime import bundle

    path = os.path.join(sandbox().base, "bundle", "process.json")
    with open(path, "wb") as f:
        f.write(raw)

    def load() -> None:
        process = bundle.load_process(path)
        jsonio.dumps(process.to_json()).encode()

    expect_clean(load, runtime_path=True)


def process_json(data: bytes) -> None:
    _load_process(data)


def process_mutated(data: bytes) -> None:
    doc = mutate(PROCESS_SEED, Chooser(data), PROCESS_KEYS)
    _load_process(json.dumps(doc).encode("utf-8", "surrogatepass"))


# --- update --resources JSON ---------------------------------------------------------

RESOURCES_SEED: dict[str, Any] = {
    **CONFIG_SEED["linux"]["resources"],
    "unified": {"memory.high": "max", "cpu.weight": "100"},
    "memory": {"limit": 1 << 30, "swap": 2 << 30, "swappiness": 60, "disableOOMKiller": False},
    "cpu": {"shares": 1024, "quota": -1, "period": 100000, "cpus": "0", "mems": "0", "idle": 0},
}
RESOURCES_KEYS = [*all_keys(RESOURCES_SEED), "realtimeRuntime", "kernel", "kernelTCP", "rdma"]


def _load_resources(raw: bytes) -> None:
    from hostjob.cgroups import resources as res
    from hostjob.runtime import bundle
    from hostjob.specconv.jobconfig import merge_resources

    path = os.path.join(sandbox().base, "bundle", "resources.json")
    with open(path, "wb") as f:
        f.write(raw)

    def load() -> None:
        resources = bundle.load_resources(path)
        merged = merge_resources(None, resources)
        for version in (1, 2):
            res.validate(merged, version)
            res.requirements(merged, version)
            res.ignored(merged, version)

    expect_clean(load, runtime_path=True)


def resources_mutated(data: bytes) -> None:
    doc = mutate(RESOURCES_SEED, Chooser(data), RESOURCES_KEYS)
    _load_resources(json.dumps(doc).encode("utf-8", "surrogatepass"))


# --- image manifests, indexes, configs ------------------------------------------------

_D = "sha256:" + "a" * 64
MANIFEST_SEED: dict[str, Any] = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _D, "size": 7},
    "layers": [
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": _D, "size": 32},
        {
            "mediaType": "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
            "digest": _D,
            "size": 1,
            "urls": ["https://example.invalid/x"],
            "annotations": {"a": "b"},
        },
    ],
    "annotations": {"org.opencontainers.image.ref.name": "v1"},
}
INDEX_SEED: dict[str, Any] = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _D,
            "size": 100,
            "platform": {"os": "linux", "architecture": "arm", "variant": "v7"},
        },
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _D, "size": 1},
    ],
}
IMAGE_CONFIG_SEED: dict[str, Any] = {
    "created": "2024-01-01T00:00:00Z",
    "architecture": "amd64",
    "os": "linux",
    "config": {
        "User": "1000:1000",
        "Env": ["PATH=/bin", "A=b"],
        "Entrypoint": ["/bin/sh"],
        "Cmd": ["-c", "true"],
        "WorkingDir": "/w",
        "Labels": {"a": "b"},
        "ExposedPorts": {"80/tcp": {}},
        "Volumes": {"/v": {}},
        "StopSignal": "SIGTERM",
        "Healthcheck": {"Test": ["CMD", "true"], "Interval": 1000000000},
    },
    "rootfs": {"type": "layers", "diff_ids": [_D]},
    "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "x", "empty_layer": True}],
}
DOCKER_ARCHIVE_SEED: list[Any] = [
    {"Config": "cfg.json", "RepoTags": ["a/b:c"], "Layers": ["l/layer.tar"]},
]


def _decode_image(raw: bytes) -> None:
    from hostjob.images import imagespec

    def decode() -> None:
        for cls in (imagespec.Manifest, imagespec.Index, imagespec.ImageConfig):
            try:
                model = imagespec.decode_blob(cls, raw, "fuzz blob")
            except HostjobError as err:
                _check_error(err)
                continue
            json.dumps(model.to_json())
        imagespec.sniff_media_type(raw)
        try:
            data = imagespec.parse_json(raw, "manifest.json")
        except HostjobError as err:
            _check_error(err)
            return
        imagespec.decode_docker_archive_manifest(data)

    expect_clean(decode)


def image_json(data: bytes) -> None:
    _decode_image(data)


def image_mutated(data: bytes) -> None:
    chooser = Chooser(data)
    seed = chooser.pick([MANIFEST_SEED, INDEX_SEED, IMAGE_CONFIG_SEED, DOCKER_ARCHIVE_SEED])
    keys = [*all_keys(MANIFEST_SEED), *all_keys(INDEX_SEED), *all_keys(IMAGE_CONFIG_SEED)]
    doc = mutate(seed, chooser, keys)
    _decode_image(json.dumps(doc).encode("utf-8", "surrogatepass"))


# --- image config -> run spec (hostjob run IMAGE) --------------------------------------

# Annotations that steer the runtime, and other keys a hostile image may label itself
# with: none of them may ever reach the config's annotations from a label.
POLICY_KEYS = [
    "io.hostjob.inherit-user", "io.hostjob.rootfs-mount-point", "io.hostjob.mount-mode",
    "io.hostjob.job-container", "microsoft.com/hostprocess-container",
    "microsoft.com/hostprocess-inherit-user", "microsoft.com/hostprocess-rootfs-location",
    "io.kubernetes.cri.container-type", "io.kubernetes.cri.sandbox-id", "io.hostjob.",
    "microsoft.com/", "IO.HOSTJOB.INHERIT-USER",
]  # fmt: skip
_LABEL_VALUES = ["true", "1", "yes", "TRUE", "/", "/etc", "/root", "bind", "host", "0", "", ".."]
RUN_IMAGE_SEED: dict[str, Any] = {
    "User": "1000:1000",
    "Env": ["PATH=/bin", "A=$CONTAINER_SANDBOX_MOUNT_POINT"],
    "Entrypoint": ["/bin/sh"],
    "Cmd": ["-c", "true"],
    "WorkingDir": "/w",
    "Labels": {"io.hostjob.inherit-user": "true", "io.hostjob.rootfs-mount-point": "/etc"},
    "Volumes": {"/etc": {}},
    "StopSignal": "SIGKILL",
}
_FLAG_USERS = [None, None, "65534:65534", "0", "nobody", "1000"]
_FLAG_ANNOTATIONS = [
    [], [], ["io.hostjob.inherit-user=true"], ["microsoft.com/hostprocess-inherit-user=1"],
    ["io.hostjob.inherit-user=false"], ["a=b"],
]  # fmt: skip


def image_runspec(data: bytes) -> None:
    """An image config (labels named like every policy annotation, ``User``,
    ``WorkingDir``, ``Env``, ``Volumes``) and flags -> ``build_spec`` -> the job: no
    annotation, mount point, mode or user may come from the image's labels, and the
    image's working directory stays inside the image."""
    from hostjob.images.imagespec import ContainerConfig
    from hostjob.images.runspec import RunFlags, build_spec
    from hostjob.runtime.launch import plan as resolve
    from hostjob.spec import runtime as wire
    from hostjob.specconv import convert

    chooser = Chooser(data)
    doc = mutate(RUN_IMAGE_SEED, chooser, [*all_keys(RUN_IMAGE_SEED), *POLICY_KEYS])
    if isinstance(doc, dict) and isinstance(doc.get("Labels"), dict):
        for _ in range(chooser.below(5)):
            key = chooser.pick(POLICY_KEYS) if chooser.below(4) else chooser.text(12)
            doc["Labels"][key] = chooser.pick(_LABEL_VALUES)
    flags = RunFlags(
        args=[] if chooser.below(2) else ["id"],
        user=chooser.pick(_FLAG_USERS),
        annotations=list(chooser.pick(_FLAG_ANNOTATIONS)),
        mount_mode=chooser.pick([None, None, "bind"]),
        mount_point=chooser.pick([None, None, "/opt/tool"]),
    )
    box = sandbox()

    def build() -> None:
        image = ContainerConfig.decode(doc, "config")
        spec = build_spec(image, flags)
        _check_runspec(image, flags, spec)
        job = convert.to_job_config(wire.Spec.decode(spec), box.bundle, "fuzz")
        expected_mode = flags.mount_mode or "host"
        if job.mount_mode != expected_mode:
            raise Finding(f"mount mode {job.mount_mode!r}, the flags said {expected_mode!r}")
        default_point = job.rootfs if expected_mode == "host" else convert.DEFAULT_BIND_MOUNT_POINT
        if job.mount_point != (flags.mount_point or default_point):
            raise Finding(f"mount point {job.mount_point!r} does not come from the flags")
        if job.inherit_user != ("user" not in spec["process"]):
            raise Finding(f"inherit-user {job.inherit_user} with process {spec['process']}")
        plan = resolve.plan(job, job.process)
        root = job.mount_point.rstrip("/")
        if plan.cwd != job.mount_point and not plan.cwd.startswith(root + "/"):
            raise Finding(f"working directory {plan.cwd!r} is outside the image at {root}")

    expect_clean(build)


def _check_runspec(image: Any, flags: Any, spec: dict[str, Any]) -> None:
    """The annotations and the user are exactly what the flags (and the image's
    ``User``) make of them; the labels play no part."""
    from hostjob.images import runspec

    inherit_keys = ("io.hostjob.inherit-user", "microsoft.com/hostprocess-inherit-user")
    expected = dict(a.partition("=")[::2] for a in flags.annotations)
    if flags.mount_mode:
        expected["io.hostjob.mount-mode"] = flags.mount_mode
    if flags.mount_point:
        expected["io.hostjob.rootfs-mount-point"] = flags.mount_point
    if flags.user:
        for key in inherit_keys:
            expected.pop(key, None)
        user = flags.user
    elif any(expected.get(k, "").lower() in ("true", "1", "yes") for k in inherit_keys):
        user = None
    else:
        user = image.user or None
        if user is None:
            expected["io.hostjob.inherit-user"] = "true"
    if spec["annotations"] != expected:
        raise Finding(f"annotations {spec['annotations']} are not the flags' {expected}")
    got = spec["process"].get("user")
    what = "--user" if flags.user else "the image's User"
    if got != (runspec._user(user, what) if user else None):
        raise Finding(f"user {got} is not from --user {flags.user!r} or User {image.user!r}")
    cwd = spec["process"]["cwd"]
    inside = cwd.removeprefix("$CONTAINER_SANDBOX_MOUNT_POINT/")
    if inside == cwd or ".." in inside.split("/"):
        raise Finding(f"WorkingDir {image.working_dir!r} became {cwd!r}")


# --- registry auth challenges ---------------------------------------------------------

_CHALLENGE_TOKENS = [
    "Bearer", "Basic", "realm", "service", "scope", "error", "=", '"', "\\", ",", " ", "  ",
    "https://auth.example/token", "registry", "repository:a/b:pull", 'realm="', "\t", "=,",
]  # fmt: skip


def challenge(data: bytes) -> None:
    from hostjob.images.remotes.auth import parse_challenges

    header = data.decode("latin-1")

    def parse() -> None:
        for scheme, params in parse_challenges(header):
            if not isinstance(scheme, str) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in params.items()
            ):
                raise Finding("parse_challenges returned a non-string")

    expect_clean(parse)


def challenge_tokens(data: bytes) -> None:
    chooser = Chooser(data)
    n = 1 + chooser.below(24)
    challenge("".join(chooser.pick(_CHALLENGE_TOKENS) for _ in range(n)).encode("latin-1"))


# --- image references -----------------------------------------------------------------

_REF_TOKENS = [
    "docker://", "oci:", "oci-archive:", "docker-archive:", "localhost", ":5000", "/", "..",
    ".", "library", "busybox", ":", "latest", "@", "sha256:", "a" * 64, "_", "-", "A", "%2e",
    "\x00", "~", "//", "../../etc", "[::1]", "registry.example", "x" * 200,
]  # fmt: skip


def reference(data: bytes) -> None:
    from hostjob.images import reference as refs

    text = data.decode("utf-8", "surrogateescape")

    def parse() -> None:
        ref = refs.parse(text)
        if ref.is_registry:
            name = ref.name
            if any(part in ("..", ".") for part in ref.repo_name.split("/")):
                raise Finding(f"reference {text!r} has a traversal in its name {name!r}")
            if "\x00" in name:
                raise Finding(f"reference {text!r} keeps a NUL")
            refs.normalize(name)

    expect_clean(parse)


def reference_tokens(data: bytes) -> None:
    chooser = Chooser(data)
    n = 1 + chooser.below(10)
    reference("".join(chooser.pick(_REF_TOKENS) for _ in range(n)).encode())


# --- the tar extractor ----------------------------------------------------------------


def _unpack(blob: bytes) -> None:
    from hostjob.images import unpack

    box = sandbox()
    dest = os.path.join(box.layers, "L")
    try:
        expect_clean(lambda: unpack.unpack_to(io.BytesIO(blob), dest))
    finally:
        box.check_canary()
        if os.path.lexists(dest):
            shutil.rmtree(dest)
        if os.listdir(box.layers):
            raise Finding(f"a failed unpack left {os.listdir(box.layers)}")


def tar_raw(data: bytes) -> None:
    _unpack(data)


_KINDS = ("file", "dir", "symlink", "hardlink", "fifo", "char", "whiteout")


def tar_entries(data: bytes) -> None:
    """A tar built from entries the bytes choose: names and link targets aimed at the
    canary dir (``..``, absolute, through symlinks), whiteouts, odd modes; maybe
    compressed, maybe truncated."""
    import tarfile

    from tests.fixtures.tars import entry, gz, make_tar

    box = sandbox()
    chooser = Chooser(data)
    outside = box.outside
    names = [
        "a", "a/b", "a/b/c", "b", "..", "../outside/x", "a/../../outside/x", "/etc/x",
        outside + "/x", "a/.wh.b", "a/.wh..wh..opq", ".wh.a", ".wh..wh.plnk", "./a", "c d",
        "l", "l/x", "l/dir/y", "h", "d/", "x" * 300, "a\\b", "\u00e9",
    ]  # fmt: skip
    targets = [outside, outside + "/secret", outside + "/dir", "../" * 6 + outside.lstrip("/"),
               "a", "a/b", "l", "/", "..", "", "../outside", "l/dir"]  # fmt: skip
    entries = []
    for _ in range(1 + chooser.below(8)):
        kind = chooser.pick(_KINDS)
        name = chooser.pick(names)
        if kind in ("symlink", "hardlink"):
            entries.append(entry(name, kind, linkname=chooser.pick(targets)))
        elif kind == "char":
            entries.append(entry(name, kind, devmajor=chooser.below(300), devminor=1))
        elif kind == "file":
            body = bytes(chooser.byte() for _ in range(chooser.below(64)))
            entries.append(
                entry(name, kind, data=body, mode=chooser.pick([0o644, 0o4755, 0o7777, 0]))
            )
        elif kind == "whiteout":
            entries.append(entry(name.rsplit("/", 1)[0] + "/.wh." + chooser.text(4), "file"))
        else:
            entries.append(entry(name, kind))
    try:
        blob = make_tar(entries, fmt=chooser.pick([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]))
    except (ValueError, tarfile.TarError):
        return  # tarfile cannot write this entry: nothing to test
    how = chooser.below(4)
    if how == 1:
        blob = gz(blob)
    elif how == 2:
        blob = blob[: chooser.below(len(blob) + 1)]
    elif how == 3:
        i = chooser.below(len(blob))
        blob = blob[:i] + bytes([blob[i] ^ (1 + chooser.byte() % 255)]) + blob[i + 1 :]
    _unpack(blob)


# --- the command line -------------------------------------------------------------------

_ARG_TOKENS = [
    "--root", "/tmp/x", "--log", "--log-format", "json", "text", "--debug", "--rootless",
    "true", "-b", "--bundle", ".", "--pid-file", "--preserve-fds", "-1", "99999999999999999999",
    "--console-socket", "--format", "table", "-q", "--all", "-a", "KILL", "SIGRTMIN+3", "0",
    "--interval", "5s", "-5s", "1e9h", "--memory", "1g", "-m", "--cpus", "0.5", "nan", "inf",
    "--pids-limit", "--", "-", "-h", "--help", "--force", "--env", "A=1", "-e", "--user",
    "1000:1000", "root", "--cwd", "--detach", "-d", "--tty", "-t", "--name", "..", "--rm",
    "--volume", "/a:/b:ro", "--mount-mode", "bind", "--store", "--pull", "never", "id1",
    "--resources", "=", "--x=", "-xyz", "",
]  # fmt: skip


def cli_args(data: bytes) -> None:
    """The argument parser of every command: a bad word list is a one-line error."""
    import importlib

    from hostjob.cli import args as cli
    from hostjob.cli import main

    chooser = Chooser(data)
    names = sorted(main.COMMANDS)
    words = [chooser.pick(_ARG_TOKENS) for _ in range(chooser.below(10))]
    command = chooser.pick(names)
    words.insert(chooser.below(len(words) + 1), command)
    if chooser.below(4) == 0:
        words.append(chooser.text(12))

    def parse() -> None:
        try:
            glob = cli.parse(main.GLOBAL, main._normalise_rootless(words), stop_at_positional=True)
        except cli.HelpRequested:
            return
        if not glob.command or glob.command[0] not in main.COMMANDS:
            return
        module = importlib.import_module(
            f"hostjob.cli.commands.{main.COMMANDS[glob.command[0]][0]}"
        )
        try:
            cli.parse(module.COMMAND, glob.command[1:])
        except cli.HelpRequested:
            return

    expect_clean(parse)


# name -> (target, seed inputs for the raw ones)
TARGETS: dict[str, Callable[[bytes], None]] = {
    "config_json": config_json,
    "config_mutated": config_mutated,
    "process_json": process_json,
    "process_mutated": process_mutated,
    "image_json": image_json,
    "image_mutated": image_mutated,
    "challenge": challenge,
    "challenge_tokens": challenge_tokens,
    "reference": reference,
    "reference_tokens": reference_tokens,
    "tar_raw": tar_raw,
    "tar_entries": tar_entries,
    "cli_args": cli_args,
    "resources_mutated": resources_mutated,
    "image_runspec": image_runspec,
}


def seeds(name: str) -> list[bytes]:
    """Starting inputs for a target (atheris's corpus, hypothesis's examples)."""
    from tests.fixtures.tars import entry, gz, make_tar

    if name == "config_json":
        return [json.dumps(CONFIG_SEED).encode(), b"{}", b"[]", b'{"process": 1}']
    if name == "process_json":
        return [json.dumps(PROCESS_SEED).encode(), b'{"args": []}']
    if name == "image_json":
        return [json.dumps(s).encode() for s in (MANIFEST_SEED, INDEX_SEED, IMAGE_CONFIG_SEED)]
    if name == "challenge":
        return [
            b'Bearer realm="https://auth.example/token",service="registry",scope="repository:a:pull"',
            b'Basic realm="x", Bearer realm="y"',
        ]
    if name == "reference":
        return [b"busybox", b"docker://localhost:5000/a/b:c@sha256:" + b"a" * 64, b"oci:/x:tag"]
    if name == "tar_raw":
        tar = make_tar([entry("a/b", data=b"x"), entry("l", "symlink", linkname="a")])
        return [tar, gz(tar)]
    return [b"", bytes(range(256))]
