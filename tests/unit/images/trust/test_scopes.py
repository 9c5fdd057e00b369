"""An image's place in a policy, per transport, as containers/image names it."""

from __future__ import annotations

import os
from pathlib import Path

from hostjob.images.reference import parse
from hostjob.images.trust import scopes

DIGEST = "sha256:" + "b" * 64


def test_registry_scopes() -> None:
    scope = scopes.of(parse("reg.example.com:5000/org/app:v1"))
    assert (scope.transport, scope.identity) == ("docker", "reg.example.com:5000/org/app:v1")
    assert scope.namespaces == [
        "reg.example.com:5000/org/app",
        "reg.example.com:5000/org",
        "reg.example.com:5000",
        "*.example.com",
        "*.com",
    ]
    assert str(scopes.of(parse("busybox")).docker_ref) == "docker.io/library/busybox:latest"
    # A tag and a digest: the digest is the image (containers/image refuses both).
    both = scopes.of(parse(f"h.io/a:v1@{DIGEST}"))
    assert both.identity == f"h.io/a@{DIGEST}" and both.docker_ref is not None


def test_layout_scopes_are_resolved_paths(tmp_path: Path) -> None:
    real = tmp_path / "real" / "layout"
    real.mkdir(parents=True)
    os.symlink(real, tmp_path / "link")
    scope = scopes.of(parse(f"oci:{tmp_path / 'link'}:v1"))
    assert scope.identity == str(real) and scope.docker_ref is None
    assert scope.namespaces[:2] == [str(real.parent), str(tmp_path)]
    assert "/" not in scope.namespaces
    missing = scopes.of(parse(f"oci-archive:{tmp_path / 'link' / 'x.tar'}"))
    assert missing.identity == str(real / "x.tar")


def test_docker_archive_has_no_identity() -> None:
    scope = scopes.of(parse("docker-archive:/x.tar:busybox:1"))
    assert (scope.identity, scope.namespaces) == ("", [])
    assert str(scope.docker_ref) == "docker.io/library/busybox:1"
