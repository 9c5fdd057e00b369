"""Where signatures are found: lookaside files and web servers, and the signature
manifests an OCI layout carries; every store bounded."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hostjob.images import imagespec
from hostjob.images.errors import DigestMismatch, ImageError, InvalidSignature, RegistryError
from hostjob.images.trust import stores
from hostjob.images.trust.formats import SigstoreSignature, SimpleSignature

DIGEST = "sha256:" + "e" * 64
OPENPGP = b"\xa3\x01signed"  # the first byte of a compressed OpenPGP message


def write_signatures(base: Path, count: int, data: bytes = OPENPGP) -> None:
    directory = base / "org" / f"app@sha256={'e' * 64}"
    directory.mkdir(parents=True)
    for i in range(1, count + 1):
        (directory / f"signature-{i}").write_bytes(data)


def test_a_file_lookaside_is_read_until_a_signature_is_missing(tmp_path: Path) -> None:
    write_signatures(tmp_path, 3)
    found = stores.lookaside(f"file://{tmp_path}", "org/app", DIGEST, 5.0)
    assert [type(s) for s in found] == [SimpleSignature] * 3
    assert stores.lookaside(f"file://{tmp_path}", "org/other", DIGEST, 5.0) == []


def test_a_lookaside_is_bounded(tmp_path: Path) -> None:
    write_signatures(tmp_path / "many", stores.MAX_SIGNATURES + 1)
    with pytest.raises(ImageError, match="more than 128 signatures"):
        stores.lookaside(f"file://{tmp_path / 'many'}", "org/app", DIGEST, 5.0)
    write_signatures(tmp_path / "big", 1, b"\xa3" * (stores.SIGNATURE_LIMIT + 1))
    with pytest.raises(ImageError, match="larger than 4 MiB"):
        stores.lookaside(f"file://{tmp_path / 'big'}", "org/app", DIGEST, 5.0)
    write_signatures(tmp_path / "odd", 1, b"MZ not a signature")
    with pytest.raises(InvalidSignature, match="unrecognized signature format"):
        stores.lookaside(f"file://{tmp_path / 'odd'}", "org/app", DIGEST, 5.0)
    with pytest.raises(ImageError, match="unsupported scheme 'ftp'"):
        stores.lookaside("ftp://x", "org/app", DIGEST, 5.0)


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            path = tmp_path / self.path.lstrip("/")
            status, body = (200, path.read_bytes()) if path.is_file() else (404, b"")
            if "broken" in self.path:
                status = 500
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_a_web_lookaside(tmp_path: Path, web: tuple[str, list[str]]) -> None:
    url, seen = web
    write_signatures(tmp_path / "sigs", 2, b"\0simple-signing\n" + OPENPGP)
    found = stores.lookaside(f"{url}/sigs", "org/app", DIGEST, 5.0)
    assert [s.blob for s in found if isinstance(s, SimpleSignature)] == [OPENPGP, OPENPGP]
    assert seen[-1] == f"/sigs/org/app@sha256={'e' * 64}/signature-3"
    write_signatures(tmp_path / "broken", 1)
    with pytest.raises(RegistryError, match="HTTP 500"):
        stores.lookaside(f"{url}/broken", "org/app", DIGEST, 5.0)


def desc(digest: str, **annotations: str) -> imagespec.Descriptor:
    return imagespec.Descriptor(
        media_type=imagespec.OCI_MANIFEST, digest=digest, size=1, annotations=annotations or None
    )


def test_which_layout_entries_are_signatures() -> None:
    image, sigs = desc(DIGEST), desc("sha256:" + "1" * 64, kind=stores.SIGS_KIND)
    tagged = desc("sha256:" + "2" * 64, **{imagespec.ANNOTATION_REF_NAME: f"sha256-{'e' * 64}.sig"})
    other = desc("sha256:" + "3" * 64, **{imagespec.ANNOTATION_REF_NAME: "v1"})
    assert stores.layout_entries([image, sigs], DIGEST) == [sigs.digest]  # cosign save
    assert stores.layout_entries([image, sigs, other], DIGEST) == []  # whose are they?
    assert stores.layout_entries([image, tagged, other], DIGEST) == [tagged.digest]
    assert [stores.is_signature_entry(d) for d in (image, sigs, tagged, other)] == [
        False, True, True, False,
    ]  # fmt: skip


def test_layout_signatures_are_verified_blobs(tmp_path: Path) -> None:
    import hashlib
    import json

    payload = b'{"critical":{}}'
    layer = {"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
             "digest": "sha256:" + hashlib.sha256(payload).hexdigest(), "size": len(payload),
             "annotations": {"dev.cosignproject.cosign/signature": "c2ln"}}  # fmt: skip
    manifest = json.dumps({"schemaVersion": 2, "layers": [layer]}).encode()
    blobs = {"sha256:" + hashlib.sha256(manifest).hexdigest(): manifest, layer["digest"]: payload}
    entry = desc(next(iter(blobs)), kind=stores.SIGS_KIND)
    found = stores.from_layout(blobs.__getitem__, [desc(DIGEST), entry], DIGEST)
    assert len(found) == 1 and isinstance(found[0], SigstoreSignature)
    assert (
        found[0].payload == payload and found[0].annotations["dev.cosignproject.cosign/signature"]
    )
    blobs[str(layer["digest"])] = b"tampered"
    with pytest.raises(DigestMismatch):
        stores.from_layout(blobs.__getitem__, [desc(DIGEST), entry], DIGEST)
