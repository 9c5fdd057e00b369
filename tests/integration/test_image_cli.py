"""The image commands through the real CLI: pack, import, images, inspect, rmi, prune,
and pull from a real ``docker-registry`` (plain, htpasswd basic auth, a multi-arch index).

Each test has its own ``--store``; registries are stopped by their context managers; no
image command mounts anything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from hostjob.images.options import RegistryOptions
from hostjob.images.progress import KINDS
from hostjob.images.push import push
from hostjob.images.store import Store
from hostjob.units import human_size
from tests.fixtures.images import register_container, write_layout
from tests.fixtures.registry import DockerRegistry, skopeo_copy
from tests.fixtures.tars import entry, make_tar
from tests.helpers import BUSYBOX, hostjob_cmd, hostjob_env, require_peer

USERS = {"alice": "s3cret"}


@pytest.fixture(autouse=True)
def _needs_root():
    if os.geteuid() != 0:
        pytest.fail("the image CLI tests run as root", pytrace=False)


def hostjob(
    *args: str, env: dict[str, str] | None = None, user: str | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [*hostjob_cmd(), *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=300, env=hostjob_env(env), check=False
    )


def ok(*args: str, **kw: str | dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    done = hostjob(*args, **kw)  # type: ignore[arg-type]
    assert done.returncode == 0, f"hostjob {' '.join(args)}: {done.stderr.strip()}"
    return done


def fails(*args: str, match: str, env: dict[str, str] | None = None) -> str:
    """The command exits 1 with its error as one line (containing ``match``) on stderr, after
    the progress lines of the steps that went well (pull, import), and nothing on stdout."""
    done = hostjob(*args, env=env)
    assert done.returncode == 1, f"hostjob {' '.join(args)} exited {done.returncode}"
    assert done.stdout == ""
    *progress, error = done.stderr.splitlines() or [""]
    assert all(line.split()[0] in KINDS for line in progress), done.stderr
    assert match in error, error
    return error


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    os.symlink("busybox", root / "bin" / "sh")
    (root / "etc").mkdir()
    (root / "etc" / "tool.conf").write_text("level=3\n")
    (root / "opt" / "data").mkdir(parents=True)
    (root / "opt" / "data" / "blob").write_bytes(os.urandom(300_000))
    return root


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def pack_archive(tree: Path, dest: Path, *extra: str) -> str:
    done = ok("pack", str(tree), "--to", f"oci-archive:{dest}:v1", *extra)
    digest = done.stdout.strip()
    assert digest.startswith("sha256:") and len(digest) == 71 and done.stderr == ""
    return digest


def store_usage(store: str) -> tuple[list[str], list[str]]:
    blobs = sorted(p.name for p in Path(store, "blobs", "sha256").iterdir())
    layers = sorted(p.name for p in Path(store, "layers", "sha256").iterdir())
    return blobs, layers


# --- pack -> import -> images -> inspect -> rmi -> prune ---------------------------------


def test_local_image_lifecycle(tree: Path, tmp_path: Path, store: str) -> None:
    archive = tmp_path / "tool.tar"
    digest = pack_archive(
        tree,
        archive,
        "--entrypoint",
        '["/bin/busybox", "sh"]',
        "--cmd",
        "-c",
        "--cmd",
        "echo hi",
        "--env",
        "MODE=job",
        "--label",
        "org.example.tool=yes",
        "--workdir",
        "/opt",
        "--user",
        "0:0",
    )
    done = ok("import", "--store", store, "--name", "tools/tool:v1", f"oci-archive:{archive}:v1")
    name, image_id = done.stdout.splitlines()
    assert name == "docker.io/tools/tool:v1" and image_id.startswith("sha256:")
    assert "resolving" in done.stderr and f"done {name}" in done.stderr, "plain progress lines"
    # The name the archive records (localhost/<file>:<tag>) when --name is not given.
    again = ok("import", "--store", store, "-q", f"oci-archive:{archive}:v1")
    assert again.stdout == f"{image_id}\n" and again.stderr == ""

    table = ok("images", "--store", store).stdout.splitlines()
    assert table[0].split() == ["NAME", "ID", "SIZE", "CREATED", "PLATFORM", "VERIFIED"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert set(rows) == {"docker.io/tools/tool:v1", "localhost/tool:v1"}
    row = rows["docker.io/tools/tool:v1"]
    assert row[1] == image_id[7:19]
    assert row[3] in ("kB", "MB") and any(w.startswith("linux/") for w in row)  # "1.3 MB"
    assert "years ago" in " ".join(row), "pack's fixed creation time: the epoch"

    listed = json.loads(ok("images", "--store", store, "--format", "json").stdout)
    assert [r["name"] for r in listed] == ["docker.io/tools/tool:v1", "localhost/tool:v1"]
    assert {r["digest"] for r in listed} == {digest} and {r["id"] for r in listed} == {image_id}
    assert listed[0]["layers"] == 1 and listed[0]["size"] > 300_000
    assert f"{row[2]} {row[3]}" == human_size(listed[0]["size"])
    assert ok("images", "--store", store, "-q").stdout == f"{image_id[7:19]}\n"

    info = json.loads(ok("inspect", "--store", store, "tools/tool:v1").stdout)
    assert info["id"] == image_id and info["digest"] == digest
    config = info["config"]["config"]
    assert config["Entrypoint"] == ["/bin/busybox", "sh"] and config["Cmd"] == ["-c", "echo hi"]
    assert config["Env"] == ["MODE=job"] and config["WorkingDir"] == "/opt"
    assert config["Labels"] == {"org.example.tool": "yes"} and config["User"] == "0:0"
    layer_dir = Path(info["layers"][0]["path"])
    assert (layer_dir / "etc" / "tool.conf").read_text() == "level=3\n"
    # Found by ID prefix and by digest too.
    assert json.loads(ok("inspect", "--store", store, image_id[7:19]).stdout)["id"] == image_id
    assert json.loads(ok("inspect", "--store", store, f"localhost/tool@{digest}").stdout)

    # Untagging one of two names frees nothing; the last name frees the image.
    out = ok("rmi", "--store", store, "localhost/tool:v1").stdout.splitlines()
    assert out == ["untagged localhost/tool:v1", "freed 0 B (0 blobs, 0 layers)"]
    out = ok("rmi", "--store", store, "tools/tool:v1").stdout.splitlines()
    assert out[:2] == ["untagged docker.io/tools/tool:v1", f"deleted {digest}"]
    assert out[2].startswith("freed ") and out[2].endswith("(3 blobs, 1 layer)")
    assert not out[2].startswith("freed 0 B")
    assert store_usage(store) == ([], [])
    assert ok("images", "--store", store).stdout.splitlines() == [
        "NAME   ID   SIZE   CREATED   PLATFORM   VERIFIED"
    ]

    # What an interrupted pull leaves (blobs fetched and a layer unpacked, never named)
    # is what prune frees.
    lib = Store(store)
    tar = make_tar([entry("left/over", data=os.urandom(100_000))])
    import gzip
    import hashlib

    blob = gzip.compress(tar)
    lib.content.write(b"an orphan blob")
    layer_digest = lib.content.write(blob)
    lib.layers.ensure("sha256:" + hashlib.sha256(tar).hexdigest(), layer_digest)
    line = ok("prune", "--store", store).stdout.strip()
    assert line.startswith("freed ") and line.endswith("(2 blobs, 1 layer)")
    assert not line.startswith("freed 0 B")
    assert store_usage(store) == ([], [])
    assert ok("prune", "--store", store).stdout == "freed 0 B (0 blobs, 0 layers)\n"


def test_rmi_several_names_and_ids(tree: Path, tmp_path: Path, store: str) -> None:
    pack_archive(tree, tmp_path / "a.tar")
    (tree / "etc" / "other").write_text("b\n")
    pack_archive(tree, tmp_path / "b.tar")
    ok("import", "--store", store, "--name", "a:1", f"oci-archive:{tmp_path / 'a.tar'}:v1")
    ok("import", "--store", store, "--name", "a:2", f"oci-archive:{tmp_path / 'a.tar'}:v1")
    image_b = ok("import", "--store", store, "-q", f"oci-archive:{tmp_path / 'b.tar'}:v1")
    before = store_usage(store)
    # An unknown name among known ones: nothing is removed.
    fails("rmi", "--store", store, "a:1", "no/such:image", match="no such image: no/such:image")
    assert (
        store_usage(store) == before
        and len(json.loads(ok("images", "--store", store, "--format", "json").stdout)) == 3
    )
    # An ID removes every name it has; a name the ID already removed is skipped.
    short = ok("images", "--store", store, "-q").stdout.split()
    assert len(short) == 2 and image_b.stdout.strip()[7:19] in short
    a_id = next(s for s in short if s != image_b.stdout.strip()[7:19])
    out = ok("rmi", "--store", store, a_id, "a:2").stdout.splitlines()
    assert out[:2] == ["untagged docker.io/library/a:1", "untagged docker.io/library/a:2"]
    assert len(out) == 4 and out[2].startswith("deleted sha256:")
    assert [
        r["name"] for r in json.loads(ok("images", "--store", store, "--format", "json").stdout)
    ] == ["localhost/b:v1"]


def test_rmi_of_an_image_a_container_uses(tree: Path, tmp_path: Path, store: str) -> None:
    pack_archive(tree, tmp_path / "a.tar")
    ok("import", "--store", store, "--name", "used:1", f"oci-archive:{tmp_path / 'a.tar'}:v1")
    register_container(Store(store), "job1", "used:1")
    fails("rmi", "--store", store, "used:1", match="in use by container(s) job1")
    out = ok("rmi", "--store", store, "--force", "used:1").stdout.splitlines()
    # The container still holds the image's content: kept until it is gone.
    assert out[0] == "untagged docker.io/library/used:1" and out[1].startswith("deleted ")
    assert out[2] == "freed 0 B (0 blobs, 0 layers)"
    assert store_usage(store)[1], "the container's layer is kept"
    Store(store).gc.unregister("job1")
    assert ok("prune", "--store", store).stdout.endswith("(3 blobs, 1 layer)\n")
    assert store_usage(store) == ([], [])


def test_store_from_the_environment(tree: Path, tmp_path: Path, store: str) -> None:
    pack_archive(tree, tmp_path / "a.tar")
    env = {"HOSTJOB_STORE": store}
    ok("import", "-q", f"oci-archive:{tmp_path / 'a.tar'}:v1", env=env)
    assert Path(store, "images.json").exists()
    assert "localhost/a:v1" in ok("images", env=env).stdout
    # --store wins over the environment.
    other = str(tmp_path / "other")
    assert ok("images", "--store", other, env=env).stdout.splitlines()[1:] == []


def test_import_forms(tree: Path, tmp_path: Path, store: str) -> None:
    ok("pack", str(tree), "--to", f"oci:{tmp_path / 'layout'}:v2")
    done = ok("import", "--store", store, f"oci:{tmp_path / 'layout'}:v2")
    assert done.stdout.splitlines()[0] == "localhost/layout:v2"
    require_peer("image", "skopeo")
    skopeo_copy(
        f"oci:{tmp_path / 'layout'}:v2", f"docker-archive:{tmp_path / 'd.tar'}:example/tool:v3"
    )
    done = ok("import", "--store", store, f"docker-archive:{tmp_path / 'd.tar'}")
    assert done.stdout.splitlines()[0] == "docker.io/example/tool:v3"
    names = [r["name"] for r in json.loads(ok("images", "--store", store, "-f", "json").stdout)]
    assert names == ["docker.io/example/tool:v3", "localhost/layout:v2"]


# --- errors ---------------------------------------------------------------------------


def test_errors_are_one_line_exit_1(tree: Path, tmp_path: Path, store: str) -> None:
    pack_archive(tree, tmp_path / "a.tar")
    ok("import", "--store", store, "-q", f"oci-archive:{tmp_path / 'a.tar'}:v1")
    before = store_usage(store)
    fails("inspect", "--store", store, "no/such:image", match="no such image: no/such:image")
    fails("rmi", "--store", store, "nope", match="no such image: nope")
    fails("pull", "--store", store, "Bad Ref!", match="invalid")
    fails("pull", "--store", store, "docker://", match="empty image reference")
    fails("pull", "--store", store, "--platform", "linux/arm/v7/x", "x/y", match="invalid platform")
    fails("import", "--store", store, "busybox:latest", match="import takes oci:")
    fails("import", "--store", store, f"oci-archive:{tmp_path / 'missing.tar'}", match="missing")
    fails("import", "--store", store, f"oci:{tmp_path / 'nolayout'}", match="nolayout")
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar at all" * 100)
    fails("import", "--store", store, f"oci-archive:{bad}", match="bad.tar")
    fails("images", "--store", store, "--format", "yaml", match="invalid format option: yaml")
    fails("images", "--store", store, "--bogus", match="flag provided but not defined: -bogus")
    fails("rmi", "--store", store, match='"rmi" requires at least one <image>')
    fails("pull", "--store", store, match='"pull" requires <image>')
    fails("pack", str(tree), match='"pack" requires --to')
    fails("pack", str(tree), "--to", f"docker-archive:{tmp_path / 'x.tar'}", match="pack writes")
    fails("pack", str(tmp_path / "nodir"), "--to", f"oci:{tmp_path / 'o'}", match="nodir")
    fails(
        "pack",
        str(tree),
        "--to",
        f"oci:{tmp_path / 'o'}",
        "--entrypoint",
        "[1]",
        match="--entrypoint: not a JSON array of strings",
    )
    fails(
        "pack",
        str(tree),
        "--to",
        f"oci:{tmp_path / 'o'}",
        "--label",
        "novalue",
        match="--label 'novalue': expected KEY=VALUE",
    )
    assert store_usage(store) == before, "failed commands change nothing"


def test_image_commands_need_root_but_pack(tree: Path, tmp_path: Path) -> None:
    # An unprivileged user can pack a directory it can read.
    shared = Path(tempfile.mkdtemp(prefix="hostjob-pack-user-"))
    try:
        os.chmod(shared, 0o755)
        shutil.copytree(tree, shared / "tree", symlinks=True)
        (shared / "out").mkdir()
        for path in [shared, *shared.rglob("*")]:
            os.lchown(path, 65534, 65534)
        as_root = ok("pack", str(shared / "tree"), "--to", f"oci:{tmp_path / 'root'}:v1")
        as_nobody = ok(
            "pack", str(shared / "tree"), "--to", f"oci:{shared / 'out'}:v1", user="65534"
        )
        assert as_nobody.stdout == as_root.stdout, "same input, same digest, whoever packs"
        done = hostjob("images", "--store", str(shared / "store"), user="65534")
        assert done.returncode == 1 and "needs root" in done.stderr
    finally:
        shutil.rmtree(shared)


# --- pack reproducibility -------------------------------------------------------------


def test_pack_is_reproducible_through_the_cli(tree: Path, tmp_path: Path) -> None:
    flags = ("--entrypoint", "/bin/busybox", "--cmd", "sh", "--env", "A=1", "--label", "k=v")
    a = pack_archive(tree, tmp_path / "a.tar", *flags)
    copy = tmp_path / "elsewhere" / "copy"
    copy.parent.mkdir()
    subprocess.run(["cp", "-a", str(tree), str(copy)], check=True)
    os.utime(copy / "etc" / "tool.conf", (12345, 12345))  # the source's mtimes do not matter
    b = pack_archive(copy, tmp_path / "b.tar", *flags)
    assert a == b
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    layout = ok("pack", str(tree), "--to", f"oci:{tmp_path / 'layout'}:v1", *flags).stdout
    assert layout.strip() == a
    # The JSON-array form gives the same config as repeated words.
    c = pack_archive(
        tree,
        tmp_path / "c.tar",
        "--entrypoint",
        '["/bin/busybox"]',
        "--cmd",
        '["sh"]',
        "--env",
        "A=1",
        "--label",
        "k=v",
    )
    assert c == a
    # Any change to the input or the config changes the digest.
    assert pack_archive(tree, tmp_path / "d.tar", *flags, "--env", "B=2") != a
    os.chown(copy / "etc" / "tool.conf", 1234, 1234)
    assert pack_archive(copy, tmp_path / "f.tar", *flags) == a, "owners are 0:0 by default"
    kept = pack_archive(copy, tmp_path / "g.tar", *flags, "--keep-owner")
    assert kept != a and pack_archive(copy, tmp_path / "h.tar", *flags, "--keep-owner") == kept


def test_pack_on_a_base_image_in_the_store(tree: Path, tmp_path: Path, store: str) -> None:
    pack_archive(tree, tmp_path / "base.tar", "--env", "BASE=1", "--cmd", "sh")
    ok("import", "--store", store, "--name", "base:1", f"oci-archive:{tmp_path / 'base.tar'}:v1")
    extra = tmp_path / "extra"
    (extra / "opt").mkdir(parents=True)
    (extra / "opt" / "tool").write_text("#!/bin/sh\necho tool\n")
    ok(
        "pack",
        str(extra),
        "--to",
        f"oci-archive:{tmp_path / 'top.tar'}:v1",
        "--base",
        "base:1",
        "--store",
        store,
        "--env",
        "TOP=2",
    )
    ok("import", "--store", store, "--name", "top:1", f"oci-archive:{tmp_path / 'top.tar'}:v1")
    info = json.loads(ok("inspect", "--store", store, "top:1").stdout)
    assert len(info["layers"]) == 2
    assert info["config"]["config"]["Env"] == ["BASE=1", "TOP=2"]
    assert info["config"]["config"]["Cmd"] == ["sh"]


# --- pull from a real registry --------------------------------------------------------


def registry_peers() -> None:
    require_peer("registry", "docker-registry")


def test_pull_from_a_registry(tree: Path, tmp_path: Path, store: str) -> None:
    registry_peers()
    ok("pack", str(tree), "--to", f"oci:{tmp_path / 'layout'}:v1", "--cmd", "sh")
    with DockerRegistry(str(tmp_path / "reg")) as reg:
        ref = f"{reg.host}/tools/tool:v1"
        digest = push(
            f"oci:{tmp_path / 'layout'}:v1", ref, registry=RegistryOptions(plain_http=True)
        ).digest
        done = ok("pull", "--store", store, "--plain-http", ref)
        name, image_id = done.stdout.splitlines()
        assert name == ref and image_id.startswith("sha256:")
        steps = [line.split()[0] for line in done.stderr.splitlines()]
        assert steps[:2] == ["resolving", "resolved"] and steps[-1] == "done"
        assert {"downloading", "unpacking"} <= set(steps)
        info = json.loads(ok("inspect", "--store", store, ref).stdout)
        assert info["digest"] == digest and info["id"] == image_id
        # Cached, quiet: the ID alone; by digest too.
        quiet = ok("pull", "--store", store, "--plain-http", "--quiet", ref)
        assert quiet.stdout == f"{image_id}\n" and quiet.stderr == ""
        by_digest = ok(
            "pull", "--store", store, "--plain-http", "-q", f"{reg.host}/tools/tool@{digest}"
        )
        assert by_digest.stdout == f"{image_id}\n"
        # Over TLS-less http without --plain-http: a one-line transport error.
        fails("pull", "--store", store, f"{reg.host}/tools/tool:v1", match=reg.host)
        fails("pull", "--store", store, "--plain-http", f"{reg.host}/tools/tool:nope", match="nope")
        fails(
            "pull",
            "--store",
            store,
            "--plain-http",
            f"{reg.host}/tools/other:v1",
            match="tools/other",
        )
    rows = json.loads(ok("images", "--store", store, "--format", "json").stdout)
    assert sorted(r["name"] for r in rows) == sorted([f"{reg.host}/tools/tool@{digest}", ref])
    assert {r["id"] for r in rows} == {image_id}


def test_pull_with_basic_auth(tree: Path, tmp_path: Path, store: str) -> None:
    registry_peers()
    ok("pack", str(tree), "--to", f"oci:{tmp_path / 'layout'}:v1")
    env = {"DOCKER_CONFIG": str(tmp_path / "nodocker"), "REGISTRY_AUTH_FILE": ""}
    with DockerRegistry(str(tmp_path / "reg"), htpasswd=USERS) as reg:
        ref = f"{reg.host}/private/tool:v1"
        push(
            f"oci:{tmp_path / 'layout'}:v1",
            ref,
            registry=RegistryOptions(plain_http=True, credentials=("alice", "s3cret")),
        )
        fails(
            "pull", "--store", store, "--plain-http", ref, match="authentication required", env=env
        )
        fails(
            "pull",
            "--store",
            store,
            "--plain-http",
            "--creds",
            "alice:wrong",
            ref,
            match="401",
            env=env,
        )
        fails(
            "pull",
            "--store",
            store,
            "--plain-http",
            "--creds",
            "alice",
            ref,
            match="USER:PASSWORD",
            env=env,
        )
        assert not Path(store, "images.json").exists()
        done = ok(
            "pull", "--store", store, "--plain-http", "--creds", "alice:s3cret", "-q", ref, env=env
        )
        image_id = done.stdout.strip()
        assert done.stderr == "" and image_id.startswith("sha256:")
        # Credentials from an --authfile (a docker config.json).
        ok("rmi", "--store", store, ref)
        authfile = tmp_path / "auth.json"
        authfile.write_text(
            json.dumps({"auths": {reg.host: {"username": "alice", "password": "s3cret"}}})
        )
        again = ok(
            "pull",
            "--store",
            store,
            "--plain-http",
            "--authfile",
            str(authfile),
            "-q",
            ref,
            env=env,
        )
        assert again.stdout.strip() == image_id


def test_pull_a_platform_from_a_multi_arch_index(tmp_path: Path, store: str) -> None:
    registry_peers()
    require_peer("image", "skopeo")
    layout = str(tmp_path / "multi")
    tar = make_tar([entry("etc/arch", data=b"any")])
    write_layout(
        layout, [tar], tag="v1", platforms=["linux/arm64/v8", "linux/amd64", "linux/arm/v7"]
    )
    with DockerRegistry(str(tmp_path / "reg")) as reg:
        ref = f"{reg.host}/test/multi:v1"
        skopeo_copy(f"oci:{layout}:v1", f"docker://{ref}", "--dest-tls-verify=false", "--all")
        ok("pull", "--store", store, "--plain-http", "--platform", "linux/arm64", "-q", ref)
        arm = json.loads(ok("inspect", "--store", store, ref).stdout)
        assert arm["platform"] == "linux/arm64" and arm["index"] is not None
        ok("pull", "--store", store, "--plain-http", "--platform", "linux/arm/v7", "-q", ref)
        arm7 = json.loads(ok("inspect", "--store", store, ref).stdout)
        assert arm7["platform"] == "linux/arm" and arm7["digest"] != arm["digest"]
        if os.uname().machine == "x86_64":
            ok("pull", "--store", store, "--plain-http", "-q", ref)
            host = json.loads(ok("inspect", "--store", store, ref).stdout)
            assert host["platform"] == "linux/amd64"
        fails(
            "pull",
            "--store",
            store,
            "--plain-http",
            "--platform",
            "linux/s390x",
            ref,
            match="no image for platform linux/s390x",
        )
        table = ok("images", "--store", store).stdout.splitlines()
        assert len(table) == 2 and {"linux/amd64", "linux/arm"} & set(table[1].split())
