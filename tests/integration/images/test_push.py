"""``hostjob push`` and ``hostjob pack --to docker://`` against a real ``docker-registry``
with authentication (htpasswd basic auth, and bearer tokens from a token server), then
pulled back into a fresh store and run: a packed tool reaching the registry Kubernetes
nodes pull from.

Each test has its own store and state root; registries are stopped by their context
managers; containers run with ``--rm``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hostjob.images import imagespec
from hostjob.images.errors import RegistryError
from hostjob.images.options import RegistryOptions
from hostjob.images.push import push
from hostjob.images.store import Store
from tests.fixtures.registry import DockerRegistry, TokenServer, skopeo_copy
from tests.helpers import BUSYBOX, containers_left, hostjob_cmd, hostjob_env, require_peer

USERS = {"alice": "s3cret"}
NO_AUTHFILES = {"DOCKER_CONFIG": "/nonexistent", "REGISTRY_AUTH_FILE": "", "XDG_RUNTIME_DIR": ""}


def hostjob(
    *args: str, user: str | None = None, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [*hostjob_cmd(), *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    env = dict(NO_AUTHFILES, **({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=300, env=hostjob_env(env), check=False
    )


def ok(
    *args: str, user: str | None = None, tmpdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    done = hostjob(*args, user=user, tmpdir=tmpdir)
    assert done.returncode == 0, f"hostjob {' '.join(args)}: {done.stderr.strip()}"
    return done


def fails(*args: str, match: str) -> str:
    done = hostjob(*args)
    assert done.returncode == 1 and done.stdout == "", (done.returncode, done.stdout)
    error = done.stderr.splitlines()[-1]
    assert match in error, done.stderr
    assert "Traceback" not in done.stderr
    return error


@pytest.fixture
def tool(tmp_path: Path) -> Path:
    """A host tool as a directory: busybox, and a script that reads the image's file
    (a job container's program runs in the image's directory, on the host)."""
    root = tmp_path / "tool"
    (root / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    os.symlink("busybox", root / "bin" / "sh")
    (root / "bin" / "hello").write_text('#!/bin/sh\necho "hello from $(cat etc/tool)"\n')
    (root / "bin" / "hello").chmod(0o755)
    (root / "etc").mkdir()
    (root / "etc" / "tool").write_text("the pushed tool\n")
    return root


IMAGE_FLAGS = ("--cmd", "/bin/hello", "--workdir", "/", "--env", "PATH=/usr/bin:/bin")


def run_it(store: Path, state: Path, ref: str, *pull_flags: str) -> str:
    """Pull ``ref`` into ``store`` and run it (--rm): the program's output."""
    ok("pull", "--store", str(store), *pull_flags, "-q", ref)
    done = ok("--root", str(state), "run", "--rm", "-q", "--store", str(store), ref)
    assert containers_left(state) == []
    return done.stdout


def test_push_a_store_image_with_basic_auth(tool: Path, tmp_path: Path) -> None:
    require_peer("registry", "docker-registry")
    store = tmp_path / "store"
    ok("pack", str(tool), "--to", f"oci:{tmp_path / 'layout'}:v1", *IMAGE_FLAGS)
    ok(
        "import",
        "--store",
        str(store),
        "-q",
        "--name",
        "tools/hello:v1",
        f"oci:{tmp_path / 'layout'}:v1",
    )
    with DockerRegistry(str(tmp_path / "reg"), htpasswd=USERS) as reg:
        ref = f"{reg.host}/team/hello:v1"
        store_flags = ("--store", str(store), "--plain-http")
        # Without credentials, with wrong ones: one line, nothing in the registry.
        fails("push", *store_flags, "tools/hello:v1", ref, match="authentication required")
        fails("push", *store_flags, "--creds", "alice:nope", "tools/hello:v1", ref, match="401")
        fails(
            "push", *store_flags, "--creds", "alice", "tools/hello:v1", ref, match="USER:PASSWORD"
        )
        fails("push", *store_flags, "no/such:image", ref, match="no such image: no/such:image")
        fails("push", *store_flags, "tools/hello:v1", "oci:/tmp/x", match="registry reference")
        assert list(Path(reg.workdir).rglob("_manifests")) == [], "nothing was pushed"
        done = ok("push", *store_flags, "--creds", "alice:s3cret", "tools/hello:v1", ref)
        digest = done.stdout.strip()
        assert (
            digest
            == json.loads(ok("inspect", "--store", str(store), "tools/hello:v1").stdout)["digest"]
        ), "the manifest is pushed byte for byte: the same digest"
        steps = [line.split()[0] for line in done.stderr.splitlines()]
        assert steps[0] == "resolving" and steps[-1] == "done"
        assert steps.count("uploading") == 2 and "exists" not in steps  # config + layer
        # Again: every blob is there already (HEAD), only the manifest goes.
        again = ok("push", *store_flags, "--creds", "alice:s3cret", "tools/hello:v1", ref)
        assert again.stdout.strip() == digest
        assert [line.split()[0] for line in again.stderr.splitlines()].count("exists") == 2
        # The same image under another tag, credentials from an --authfile, quietly.
        authfile = tmp_path / "auth.json"
        authfile.write_text(
            json.dumps({"auths": {reg.host: {"username": "alice", "password": "s3cret"}}})
        )
        quiet = ok(
            "push",
            *store_flags,
            "--authfile",
            str(authfile),
            "-q",
            "tools/hello:v1",
            f"docker://{reg.host}/team/hello:latest",
        )
        assert quiet.stdout.strip() == digest and quiet.stderr == ""
        # Pulled back into a fresh store and run.
        fresh = tmp_path / "fresh"
        out = run_it(fresh, tmp_path / "state", ref, "--plain-http", "--creds", "alice:s3cret")
        assert out == "hello from the pushed tool\n"
        pulled = json.loads(ok("inspect", "--store", str(fresh), ref).stdout)
        assert pulled["digest"] == digest


def test_pack_to_a_registry_with_token_auth_needs_no_root(tool: Path, tmp_path: Path) -> None:
    require_peer("registry", "docker-registry")
    # nobody packs a tree it can read and pushes it; the result runs from the registry.
    shared = tmp_path / "shared"  # nobody's: the tree, and its TMPDIR
    shared.mkdir()
    for directory in (tmp_path, *tmp_path.parents):
        if str(directory).startswith("/tmp/") and directory.is_dir():
            directory.chmod(directory.stat().st_mode | 0o755)
    shutil.copytree(tool, shared / "tool", symlinks=True)
    for path in [shared, *shared.rglob("*")]:
        os.lchown(path, 65534, 65534)
    with (
        TokenServer(str(tmp_path), USERS) as tokens,
        DockerRegistry(str(tmp_path / "reg"), token=tokens.registry_auth()) as reg,
    ):
        ref = f"{reg.host}/tools/packed:v1"
        creds = ("--plain-http", "--creds", "alice:s3cret")
        done = ok(
            "pack", str(shared / "tool"), "--to", f"docker://{ref}", *creds, *IMAGE_FLAGS,
            user="65534", tmpdir=shared,
        )  # fmt: skip
        digest = done.stdout.strip()
        assert digest.startswith("sha256:") and "uploading" in done.stderr
        pushed = [r for r in tokens.requests if r["user"] == "alice"]
        assert pushed and any("push" in s for r in pushed for s in r["query"].get("scope", []))
        # The same input packs to the same digest locally: what was pushed is that image.
        local = ok("pack", str(shared / "tool"), "--to", f"oci:{tmp_path / 'l'}:v1", *IMAGE_FLAGS)
        assert local.stdout.strip() == digest
        assert sorted(p.name for p in shared.iterdir()) == ["tool"], "the temporary layout went"
        # Wrong credentials: one line, and pack leaves nothing behind.
        fails("pack", str(tool), "--to", f"docker://{ref}", "--plain-http",
              "--creds", "alice:nope", match="refused the credentials")  # fmt: skip
        fails("pack", str(tool), "--to", f"docker://{reg.host}/Bad Name", match="invalid")
        out = run_it(tmp_path / "store", tmp_path / "state", ref, *creds)
        assert out == "hello from the pushed tool\n"


def test_push_from_archives_and_what_skopeo_sees(tool: Path, tmp_path: Path) -> None:
    """An oci-archive and a docker-archive push without a store; skopeo reads them back."""
    require_peer("registry", "docker-registry")
    require_peer("image", "skopeo")
    archive = tmp_path / "tool.tar"
    packed = ok("pack", str(tool), "--to", f"oci-archive:{archive}:v1").stdout.strip()
    skopeo_copy(f"oci-archive:{archive}:v1", f"docker-archive:{tmp_path / 'd.tar'}:x/tool:v2")
    with DockerRegistry(str(tmp_path / "reg")) as reg:
        result = push(
            f"oci-archive:{archive}:v1",
            f"{reg.host}/a/tool:v1",
            registry=RegistryOptions(plain_http=True),
        )
        assert (result.digest, result.uploaded, result.existing) == (packed, 2, 0)
        assert result.reference == f"{reg.host}/a/tool:v1"
        second = push(
            f"docker-archive:{tmp_path / 'd.tar'}",
            f"{reg.host}/a/tool:v2",
            registry=RegistryOptions(plain_http=True),
        )
        assert second.uploaded + second.existing == 2
        for tag, media_type in (
            ("v1", "application/vnd.oci.image.manifest.v1+json"),
            ("v2", "application/vnd.docker.distribution.manifest.v2+json"),
        ):
            raw = subprocess.run(
                ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{reg.host}/a/tool:{tag}"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            assert json.loads(raw)["mediaType"] == media_type
        # The layer blob went once: tag v2's push found it (same layer, another config).
        assert second.existing >= 1
        # An index (a layout's tag naming one) is refused: name one image.
        multi = tmp_path / "multi"
        skopeo_copy(f"oci-archive:{archive}:v1", f"oci:{multi}:v1")
        index = json.loads((multi / "index.json").read_text())
        nested = {
            "schemaVersion": 2,
            "mediaType": imagespec.OCI_INDEX,
            "manifests": index["manifests"],
        }
        raw = json.dumps(nested).encode()
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        (multi / "blobs" / "sha256" / digest[7:]).write_bytes(raw)
        name = {"org.opencontainers.image.ref.name": "idx"}
        entry = {
            "mediaType": imagespec.OCI_INDEX,
            "digest": digest,
            "size": len(raw),
            "annotations": name,
        }
        (multi / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))
        with pytest.raises(RegistryError, match="image index is not supported"):
            push(
                f"oci:{multi}:idx",
                f"{reg.host}/a/tool:idx",
                registry=RegistryOptions(plain_http=True),
            )


def test_a_push_does_not_hold_back_prune_for_ever(tool: Path, tmp_path: Path) -> None:
    """A store push holds the gc lease only while it runs: prune afterwards works."""
    require_peer("registry", "docker-registry")
    store = tmp_path / "store"
    ok("pack", str(tool), "--to", f"oci:{tmp_path / 'layout'}:v1")
    ok("import", "--store", str(store), "-q", f"oci:{tmp_path / 'layout'}:v1")
    with DockerRegistry(str(tmp_path / "reg")) as reg:
        push(
            "localhost/layout:v1",
            f"{reg.host}/p/q:v1",
            store_root=str(store),
            registry=RegistryOptions(plain_http=True),
        )
    Store(str(store)).remove("localhost/layout:v1")
    assert Store(str(store)).prune().blobs == 0 and list(Store(str(store)).content.digests()) == []
