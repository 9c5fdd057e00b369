"""Whoever controls a registry controls the node, unless the operator's signature policy
says which images may come in (containers-policy.json): the same policy and the same
registry, decided by hostjob and by containers/image.

Real signers sign images in a local registry (Debian's ``docker-registry``): Debian 12's
skopeo 1.9 with a throw-away GnuPG key (simple signing, its signatures in a lookaside
served over HTTP on 127.0.0.1, as ``registries.d`` names it); Debian 13's skopeo 1.18
and cosign 2.5 (the signers peer) with key pairs cosign made (sigstore attachments in the
registry). The attacker's images: unsigned, signed by another key, signed for another
name, and a manifest changed after it was signed (its signature copied beside it).

Each case first shows the attack working where nothing stops it (an accept-anything
policy pulls the image), then hostjob's decision under the fleet policy -- refused with
one line, nothing left in the store -- and the same decision by containers/image:
podman 4.3 for simple signing; for sigstore skopeo 1.18 (Debian 12's podman and skopeo
are built with sigstore disabled, and refuse every sigstoreSigned image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.compat import harness
from tests.fixtures.images import write_layout
from tests.fixtures.registry import DockerRegistry
from tests.fixtures.signing import (
    CosignKeyPair,
    GpgKey,
    only,
    signed_by,
    sigstore_signed,
    trixie_tool,
    write_policy,
)
from tests.fixtures.tars import entry, make_tar
from tests.helpers import REPO, Hostjob, hostjob_env, require_peer

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class World:
    """The registry, the lookaside, registries.d, keys, policies and signed images."""

    dir: Path
    host: str
    registries_d: Path
    staging: Path
    lookaside: str
    org: GpgKey
    other: GpgKey
    cosign: CosignKeyPair
    cosign_other: CosignKeyPair
    policies: dict[str, Path] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)  # case -> reference

    def skopeo(self, *args: str, key: GpgKey | None = None) -> None:
        """Debian 12's skopeo 1.9 (simple signing with ``key``)."""
        env = {**os.environ, "GNUPGHOME": str(key.home)} if key else None
        subprocess.run(
            ["skopeo", "--registries.d", str(self.registries_d), "--insecure-policy", "copy",
             "--quiet", "--dest-tls-verify=false", "--src-tls-verify=false", *args],
            check=True, capture_output=True, timeout=120, env=env,
        )  # fmt: skip

    def skopeo18(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Debian 13's skopeo 1.18 (sigstore signing, and the reference decisions)."""
        return subprocess.run(
            [*trixie_tool("skopeo"), "--registries.d", str(self.registries_d), *args],
            check=check, capture_output=True, text=True, timeout=120,
            env={**os.environ, "HOME": str(self.dir)},
        )  # fmt: skip

    def layout(self, name: str) -> str:
        """An image of its own content (so its digest, and its signatures, are its own)."""
        path = self.dir / "layouts" / name
        write_layout(str(path), [make_tar([entry(f"{name}.txt", data=name.encode())])], tag="v1")
        return f"oci:{path}:v1"

    def manifest(self, repo: str, reference: str) -> bytes:
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repo}/manifests/{reference}", headers={"Accept": OCI_MANIFEST}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return bytes(answer.read())

    def put_manifest(self, repo: str, reference: str, data: bytes) -> str:
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repo}/manifests/{reference}",
            data=data,
            method="PUT",
            headers={"Content-Type": OCI_MANIFEST},
        )
        urllib.request.urlopen(request, timeout=30).close()
        return "sha256:" + hashlib.sha256(data).hexdigest()

    def tamper(self, repo: str, tag: str) -> None:
        """Change the manifest under ``tag`` after it was signed, and put its old
        signatures (lookaside files, the sigstore attachment) beside the new one."""
        old = self.manifest(repo, tag)
        doc = json.loads(old)
        doc["annotations"] = {"org.example.tampered": "yes"}
        new = json.dumps(doc).encode()
        old_digest = "sha256:" + hashlib.sha256(old).hexdigest()
        new_digest = self.put_manifest(repo, tag, new)
        old_dir = self.staging / f"{repo}@sha256={old_digest[7:]}"
        if old_dir.exists():
            shutil.copytree(old_dir, self.staging / f"{repo}@sha256={new_digest[7:]}")
        try:
            attached = self.manifest(repo, f"sha256-{old_digest[7:]}.sig")
        except urllib.error.HTTPError:
            return
        self.put_manifest(repo, f"sha256-{new_digest[7:]}.sig", attached)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_peer("image", "skopeo")
    require_peer("signers", "gpg", "gpgv")
    top = Path(tempfile.mkdtemp(prefix="hostjob-signatures-", dir="/tmp"))
    staging = top / "sigstore"
    staging.mkdir()
    web = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(staging)))
    threading.Thread(target=web.serve_forever, daemon=True).start()
    registries_d = top / "registries.d"
    registries_d.mkdir()
    lookaside = f"http://127.0.0.1:{web.server_address[1]}"
    (registries_d / "default.yaml").write_text(
        "default-docker:\n"
        f"  lookaside: {lookaside}\n"
        f"  lookaside-staging: file://{staging}\n"
        "  use-sigstore-attachments: true\n"
    )
    with DockerRegistry(str(top / "registry")) as registry:
        w = World(
            top, registry.host, registries_d, staging, lookaside,
            GpgKey(top, "org"), GpgKey(top, "other"),
            CosignKeyPair(top, "cosign"), CosignKeyPair(top, "cosign-other"),
        )  # fmt: skip
        try:
            _sign_everything(w)
            yield w
        finally:
            w.org.close()
            w.other.close()
            web.shutdown()
            web.server_close()
            shutil.rmtree(top, ignore_errors=True)


def _sign_everything(w: World) -> None:
    reg = f"docker://{w.host}"
    gpg, sig, cos = f"{w.host}/gpg", f"{w.host}/sig", f"{w.host}/cosign"
    w.policies = {
        "gpg": write_policy(w.dir / "gpg.json", only("docker", gpg, signed_by(w.org))),
        "sig": write_policy(w.dir / "sig.json", only("docker", sig, sigstore_signed(w.cosign))),
        "cosign": write_policy(
            w.dir / "cosign.json",
            only("docker", cos, sigstore_signed(w.cosign, signedIdentity={"type": "matchRepository"})),
        ),
        "open": write_policy(w.dir / "open.json", {"default": [{"type": "insecureAcceptAnything"}]}),
    }  # fmt: skip
    # Simple signing (GnuPG), Debian 12's skopeo.
    by_org, by_other = ["--sign-by", w.org.fingerprint], ["--sign-by", w.other.fingerprint]
    w.skopeo(*by_org, w.layout("gpg-signed"), f"{reg}/gpg/app:signed", key=w.org)
    w.skopeo(w.layout("gpg-unsigned"), f"{reg}/gpg/app:unsigned")
    w.skopeo(*by_other, w.layout("gpg-other-key"), f"{reg}/gpg/app:other-key", key=w.other)
    w.skopeo(*by_org, w.layout("gpg-elsewhere"), f"{reg}/gpg/elsewhere:v1", key=w.org)
    w.skopeo(f"{reg}/gpg/elsewhere:v1", f"{reg}/gpg/app:other-name")  # its signature with it
    w.skopeo(*by_org, w.layout("gpg-tampered"), f"{reg}/gpg/app:tampered", key=w.org)
    w.tamper("gpg/app", "tampered")

    # Sigstore, Debian 13's skopeo with cosign's keys, and cosign itself.
    def sign(pair: CosignKeyPair, src: str, dest: str) -> None:
        w.skopeo18("--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false",
                   "--sign-by-sigstore-private-key", str(pair.private_path),
                   "--sign-passphrase-file", str(pair.password_file), src, dest)  # fmt: skip

    sign(w.cosign, w.layout("sig-signed"), f"{reg}/sig/app:signed")
    w.skopeo(w.layout("sig-unsigned"), f"{reg}/sig/app:unsigned")
    sign(w.cosign_other, w.layout("sig-other-key"), f"{reg}/sig/app:other-key")
    sign(w.cosign, w.layout("sig-elsewhere"), f"{reg}/sig/elsewhere:v1")
    w.skopeo18("--insecure-policy", "copy", "--quiet", "--src-tls-verify=false",
               "--dest-tls-verify=false", f"{reg}/sig/elsewhere:v1", f"{reg}/sig/app:other-name")  # fmt: skip
    sign(w.cosign, w.layout("sig-tampered"), f"{reg}/sig/app:tampered")
    w.tamper("sig/app", "tampered")
    w.skopeo(w.layout("cosign-signed"), f"{reg}/cosign/app:signed")
    subprocess.run(
        [*trixie_tool("cosign"), "sign", "--key", str(w.cosign.private_path), "--yes",
         "--tlog-upload=false", "--allow-http-registry", "--allow-insecure-registry",
         f"{cos}/app:signed"],
        env={**os.environ, "COSIGN_PASSWORD": w.cosign.password, "HOME": str(w.dir)},
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    w.skopeo(w.layout("cosign-unsigned"), f"{reg}/cosign/app:unsigned")


# (case, policy, accepted, what hostjob's one line says)
CASES = [
    ("gpg/app:signed", "gpg", True, ""),
    ("gpg/app:unsigned", "gpg", False, "a signature was required, but no signature exists"),
    ("gpg/app:other-key", "gpg", False, "invalid GPG signature"),
    ("gpg/app:other-name", "gpg", False, "for identity '{host}/gpg/elsewhere:v1'"),
    ("gpg/app:tampered", "gpg", False, "the signature is for digest"),
    ("sig/app:signed", "sig", True, ""),
    ("sig/app:unsigned", "sig", False, "a signature was required, but no signature exists"),
    ("sig/app:other-key", "sig", False, "cryptographic signature verification failed"),
    ("sig/app:other-name", "sig", False, "for identity '{host}/sig/elsewhere:v1'"),
    ("sig/app:tampered", "sig", False, "the signature is for digest"),
    ("cosign/app:signed", "cosign", True, ""),
    ("cosign/app:unsigned", "cosign", False, "a signature was required, but no signature exists"),
]


@pytest.fixture(scope="module")
def podman(world: World) -> Iterator[harness.Podman]:
    """Debian's podman 4.3 in a directory of its own; its registries.d is the world's
    (``~/.config/containers/registries.d``, as containers/image looks for it)."""
    pm = harness.Podman(world.dir / "podman")
    traces = harness.HostTraces()
    pm.setup()
    shutil.copytree(world.registries_d, pm.home / ".config" / "containers" / "registries.d")
    try:
        yield pm
    finally:
        problems = pm.teardown()
        traces.cleanup()
        assert not problems, problems


def pull(world: World, store: Path, ref: str, policy: str) -> Any:
    runner = Hostjob(store.parent / "state")
    return runner(
        "pull", "-q", "--store", str(store), "--plain-http",
        "--signature-policy", str(world.policies[policy]),
        "--registries.d", str(world.registries_d), f"{world.host}/{ref}",
        timeout=120,
    )  # fmt: skip


def containers_image_decides(world: World, podman: harness.Podman, ref: str, policy: str) -> bool:
    """What containers/image decides: podman 4.3 for simple signing, skopeo 1.18 for
    sigstore (which Debian 12's build refuses outright)."""
    if policy == "gpg":
        done = podman.podman(
            "pull", "--tls-verify=false", "--signature-policy", str(world.policies[policy]),
            f"docker://{world.host}/{ref}", timeout=120,
        )  # fmt: skip
        assert done.returncode == 0 or "Source image rejected" in done.stderr, done.stderr
        return done.returncode == 0
    out = world.dir / "skopeo-out" / ref.replace("/", "_").replace(":", "_")
    out.parent.mkdir(exist_ok=True)
    done = world.skopeo18(
        "--policy", str(world.policies[policy]), "copy", "--src-tls-verify=false",
        f"docker://{world.host}/{ref}", f"dir:{out}", check=False,
    )  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    assert done.returncode == 0 or "Source image rejected" in done.stderr, done.stderr
    return done.returncode == 0


def store_is_empty(store: Path) -> bool:
    blobs = [p for p in (store / "blobs").rglob("*") if p.is_file()] if store.exists() else []
    names = (
        json.loads((store / "images.json").read_text())["images"]
        if (store / "images.json").exists()
        else {}
    )
    return not blobs and not names


@pytest.mark.parametrize(("ref", "policy", "accepted", "reason"), CASES)
def test_the_fleet_policy_decides_as_containers_image_does(
    world: World, podman: harness.Podman, ref: str, policy: str, accepted: bool, reason: str
) -> None:
    store = world.dir / "stores" / ref.replace("/", "_").replace(":", "_") / "store"
    store.parent.mkdir(parents=True)
    if not accepted:  # the attack, where nothing stops it: the registry serves the image
        open_store = store.parent / "open-store"
        opened = pull(world, open_store, ref, "open")
        assert opened.returncode == 0, opened.stderr
    done = pull(world, store, ref, policy)
    assert containers_image_decides(world, podman, ref, policy) is accepted
    if accepted:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode != 0 and done.stdout == ""
    line = done.stderr.strip()
    assert "\n" not in line, line
    section = f"transports.docker[{world.host}/{policy}]"
    assert (
        f"{world.host}/{ref}: rejected by the signature policy {world.policies[policy]} ({section})"
        in line
    )
    assert reason.format(host=world.host) in line, line
    assert store_is_empty(store)


def test_images_shows_what_verified_each_image(world: World) -> None:
    store = world.dir / "listed" / "store"
    for ref, policy in (
        ("gpg/app:signed", "gpg"),
        ("sig/app:signed", "sig"),
        ("gpg/app:unsigned", "open"),
    ):
        assert pull(world, store, ref, policy).returncode == 0
    runner = Hostjob(store.parent / "state")
    rows = {r.split()[0]: r for r in runner.ok("images", "--store", str(store)).splitlines()[1:]}
    assert rows[f"{world.host}/gpg/app:signed"].endswith(f"signedBy {world.org.fingerprint[-16:]}")
    assert "sigstoreSigned SHA256:" in rows[f"{world.host}/sig/app:signed"]
    assert rows[f"{world.host}/gpg/app:unsigned"].endswith(" no")
    listed = json.loads(runner.ok("images", "--store", str(store), "--format", "json"))
    signed = next(r for r in listed if r["name"] == f"{world.host}/gpg/app:signed")
    assert signed["verified"] == {
        "policy": str(world.policies["gpg"]),
        "section": f"transports.docker[{world.host}/gpg]",
        "by": [{"requirement": "signedBy", "key": world.org.fingerprint}],
    }


@pytest.fixture(scope="module")
def tools(world: World) -> dict[str, str]:
    """A runnable image (busybox), signed by the organisation, and one not signed."""
    from hostjob.images.pack import pack
    from tests.helpers import make_rootfs

    made = {}
    for name, sign in (("signed", True), ("unsigned", False)):
        tree = make_rootfs(world.dir / "trees" / name)
        (tree / "etc" / "variant").write_text(name)
        layout = world.dir / "tool-layouts" / name
        pack(str(tree), f"oci:{layout}:v1", cmd=["/bin/sh", "-c", f"echo running {name}"],
             env=["PATH=/bin"])  # fmt: skip
        dest = f"docker://{world.host}/gpg/tool:{name}"
        if sign:
            world.skopeo(
                "--sign-by", world.org.fingerprint, f"oci:{layout}:v1", dest, key=world.org
            )
        else:
            world.skopeo(f"oci:{layout}:v1", dest)
        made[name] = f"{world.host}/gpg/tool:{name}"
    return made


def test_run_pulls_only_what_the_policy_accepts(world: World, tools: dict[str, str]) -> None:
    root = world.dir / "run"
    runner = Hostjob(root / "state")
    flags = ["--store", str(root / "store"), "--plain-http", "--signature-policy",
             str(world.policies["gpg"]), "--registries.d", str(world.registries_d)]  # fmt: skip
    refused = runner("run", "--rm", *flags, tools["unsigned"], timeout=120)
    assert refused.returncode != 0 and "running" not in refused.stdout
    assert f"{tools['unsigned']}: rejected by the signature policy" in refused.stderr
    assert store_is_empty(root / "store")
    state = root / "state"  # no container was made
    assert not state.exists() or not [n for n in os.listdir(state) if not n.startswith(".")]
    done = runner("run", "--rm", *flags, tools["signed"], timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "running signed\n"


def test_without_a_policy_file_it_is_said_once(world: World, tools: dict[str, str]) -> None:
    """No policy.json anywhere (a mount namespace of this command's own hides
    /etc/containers): the image comes in as before, and the command says so once."""
    root = world.dir / "no-policy"
    home = root / "home"
    home.mkdir(parents=True)
    runner = Hostjob(root / "state")
    argv = runner.argv("run", "--rm", "-q", "--store", str(root / "store"), "--plain-http",
                       "--registries.d", str(world.registries_d), tools["unsigned"])  # fmt: skip
    script = 'mount -t tmpfs hidden /etc/containers && exec "$@"'
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv],
        capture_output=True, text=True, timeout=120, env={**hostjob_env(), "HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "running unsigned\n"
    assert done.stderr.count("no signature policy") == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_import_reads_the_signatures_a_layout_carries(world: World) -> None:
    """``cosign save`` writes the image and its signatures in one layout: hostjob reads
    them (containers/image reads no signatures from a layout: skopeo refuses it)."""
    layout = world.dir / "saved"
    subprocess.run(
        [*trixie_tool("cosign"), "save", "--allow-http-registry", "--allow-insecure-registry",
         "--dir", str(layout), f"{world.host}/cosign/app:signed"],
        env={**os.environ, "HOME": str(world.dir)}, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    rule = {"type": "exactRepository", "dockerRepository": f"{world.host}/cosign/app"}
    policy = write_policy(
        world.dir / "layouts.json",
        only("oci", str(world.dir), sigstore_signed(world.cosign, signedIdentity=rule)),
    )
    root = world.dir / "import"
    runner = Hostjob(root / "state")
    store = ["--store", str(root / "store"), "--signature-policy", str(policy)]
    done = runner("import", "-q", *store, f"oci:{layout}")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(runner.ok("images", "--store", str(root / "store"), "-f", "json"))
    assert row["verified"]["by"][0]["requirement"] == "sigstoreSigned"
    assert row["verified"]["section"] == f"transports.oci[{world.dir}]"
    refused = runner("import", "-q", "--name", "x/unsigned:v1", *store,
                     world.layout("import-unsigned"))  # fmt: skip
    assert refused.returncode != 0 and "no signature exists" in refused.stderr
    assert len(json.loads(runner.ok("images", "--store", str(root / "store"), "-f", "json"))) == 1
    skopeo = world.skopeo18("--policy", str(policy), "copy", f"oci:{layout}:@0",
                            f"dir:{world.dir / 'skopeo-saved'}", check=False)  # fmt: skip
    assert skopeo.returncode != 0 and "Source image rejected" in skopeo.stderr


def test_push_asks_the_policy_about_an_archive(world: World) -> None:
    policy = write_policy(world.dir / "push.json", {"default": [{"type": "reject"}]})
    runner = Hostjob(world.dir / "push" / "state")
    dest = f"{world.host}/pushed/app:v1"
    refused = runner("push", "-q", "--plain-http", "--signature-policy", str(policy),
                     world.layout("push-unsigned"), dest)  # fmt: skip
    assert refused.returncode != 0 and "rejected by the signature policy" in refused.stderr
    with pytest.raises(urllib.error.HTTPError):
        world.manifest("pushed/app", "v1")  # nothing was sent
    store = str(world.dir / "push" / "store")
    accepted = write_policy(
        world.dir / "open-push.json", {"default": [{"type": "insecureAcceptAnything"}]}
    )
    runner.ok("import", "-q", "--store", store, "--signature-policy", str(accepted),
              "--name", "local/app:v1", world.layout("push-stored"))  # fmt: skip
    # An image of the store is let through, as podman push lets its storage's through.
    runner.ok("push", "-q", "--store", store, "--plain-http", "--signature-policy", str(policy),
              "local/app:v1", dest)  # fmt: skip
    assert world.manifest("pushed/app", "v1")


def snippet(name: str) -> str:
    """The fenced block after ``<!-- snippet: name -->`` in docs/signatures.md."""
    import re

    text = (REPO / "docs" / "signatures.md").read_text()
    match = re.search(rf"<!-- snippet: {re.escape(name)} -->\n```[a-z]*\n(.*?)```", text, re.S)
    assert match, f"snippet {name!r} missing from docs/signatures.md"
    return match.group(1)


def test_the_documented_fleet_policy(world: World) -> None:
    """docs/signatures.md's policies and registries.d, its names made this registry's."""
    docs = world.dir / "docs"
    (docs / "registries.d").mkdir(parents=True)
    (docs / "registries.d" / "fleet.yaml").write_text(
        snippet("fleet-registries-d")
        .replace("registry.example.com", world.host)
        .replace("https://sigs.example.com/", world.lookaside)
    )
    gpg = docs / "policy.json"
    gpg.write_text(
        snippet("fleet-policy")
        .replace("registry.example.com/apps", f"{world.host}/gpg")
        .replace("/etc/pki/containers/example-org.gpg", str(world.org.public_path))
    )
    sig = docs / "policy-sigstore.json"
    sig.write_text(
        snippet("fleet-policy-sigstore")
        .replace("registry.example.com/apps", f"{world.host}/cosign")
        .replace("/etc/pki/containers/example-org-cosign.pub", str(world.cosign.public_path))
    )
    runner = Hostjob(docs / "state")

    def pull(policy: Path, ref: str) -> subprocess.CompletedProcess[str]:
        return runner(
            "pull", "-q", "--store", str(docs / "store"), "--plain-http",
            "--signature-policy", str(policy), "--registries.d", str(docs / "registries.d"),
            f"{world.host}/{ref}", timeout=120,
        )  # fmt: skip

    assert pull(gpg, "gpg/app:signed").returncode == 0
    unsigned = pull(gpg, "gpg/app:unsigned")
    assert f"(transports.docker[{world.host}/gpg]): a signature was required" in unsigned.stderr
    elsewhere = pull(gpg, "sig/app:signed")
    assert "(default): the policy rejects every image here (reject)" in elsewhere.stderr
    assert pull(sig, "cosign/app:signed").returncode == 0
    assert "no signature exists" in pull(sig, "cosign/app:unsigned").stderr
    rows = runner.ok("images", "--store", str(docs / "store")).splitlines()
    assert rows[0].split() == ["NAME", "ID", "SIZE", "CREATED", "PLATFORM", "VERIFIED"]
    assert len(rows) == 3
