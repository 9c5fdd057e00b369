"""signedIdentity: each rule, on the names containers-policy.json(5) gives as examples
and on the edges (a name alone, a digest, a mirror's prefix)."""

from __future__ import annotations

import pytest

from hostjob.images.errors import PolicyError
from hostjob.images.trust.identity import DockerRef, parse_rule

DIGEST = "sha256:" + "a" * 64


def allows(rule: dict[str, str], pulled: str | None, signed: str) -> bool:
    return parse_rule(rule, "test").allows(DockerRef.parse(pulled) if pulled else None, signed)


def test_names_are_normalised_but_get_no_default_tag() -> None:
    assert str(DockerRef.parse("busybox")) == "docker.io/library/busybox"
    assert DockerRef.parse("busybox").name_only
    assert str(DockerRef.parse("busybox:1")) == "docker.io/library/busybox:1"
    assert str(DockerRef.parse(f"h:5000/a/b@{DIGEST}")) == f"h:5000/a/b@{DIGEST}"


@pytest.mark.parametrize(
    ("kind", "pulled", "signed", "expected"),
    [
        ("matchExact", "h/a:v1", "h/a:v1", True),
        ("matchExact", "h/a:v1", "h/a:v2", False),
        ("matchExact", "h/a:v1", "h/a", False),  # a name alone is no tag
        ("matchExact", f"h/a@{DIGEST}", f"h/a@{DIGEST}", True),
        ("matchExact", None, "h/a:v1", False),  # a layout has no registry name
        ("matchRepoDigestOrExact", "h/a:v1", "h/a:v1", True),
        ("matchRepoDigestOrExact", "h/a:v1", "h/a:v2", False),
        ("matchRepoDigestOrExact", f"h/a@{DIGEST}", "h/a:v9", True),  # pulled by digest
        ("matchRepoDigestOrExact", f"h/a@{DIGEST}", "h/b:v9", False),
        ("matchRepoDigestOrExact", f"h/a@{DIGEST}", "h/a", False),
        ("matchRepoDigestOrExact", "busybox:1", "docker.io/library/busybox:1", True),
        ("matchRepository", "h/a:v1", "h/a:v2", True),
        ("matchRepository", "h/a:v1", "h/a", True),  # cosign signs the repository
        ("matchRepository", "h/a:v1", "h/ab:v1", False),
        ("matchRepository", None, "h/a:v1", False),
    ],
)
def test_the_matching_rules(kind: str, pulled: str | None, signed: str, expected: bool) -> None:
    assert allows({"type": kind}, pulled, signed) is expected


def test_exact_rules_ignore_the_pulled_name() -> None:
    rule = {"type": "exactReference", "dockerReference": "h/a:v1"}
    assert allows(rule, None, "h/a:v1") and allows(rule, "x/y:z", "h/a:v1")
    assert not allows(rule, "h/a:v1", "h/a:v2")
    repo = {"type": "exactRepository", "dockerRepository": "h/a"}
    assert allows(repo, None, "h/a:anything") and not allows(repo, None, "h/b:v1")


def test_remap_identity_reads_a_mirror_as_the_original() -> None:
    rule = {"type": "remapIdentity", "prefix": "mirror.local/ns", "signedPrefix": "quay.io/ns"}
    assert allows(rule, "mirror.local/ns/app:v1", "quay.io/ns/app:v1")
    assert not allows(rule, "mirror.local/ns/app:v1", "mirror.local/ns/app:v1")
    assert not allows(rule, "mirror.local/nsx/app:v1", "quay.io/nsx/app:v1")  # not a namespace
    assert allows(rule, "other.io/app:v1", "other.io/app:v1")  # outside the prefix: as is


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"type": "matchSomething"}, "unknown signedIdentity type"),
        ({"type": "matchExact", "extra": 1}, "unknown field 'extra'"),
        ({"type": "exactReference", "dockerReference": "h/a"}, "neither a tag nor a digest"),
        ({"type": "exactReference"}, "missing field 'dockerReference'"),
        ({"type": "exactRepository", "dockerRepository": "h/UPPER"}, "not a repository name"),
        ({"type": "remapIdentity", "prefix": "h/a", "signedPrefix": "not a prefix"}, "prefix"),
        ({"type": 7}, "must be a string"),
    ],
)
def test_a_rule_that_is_not_right_is_refused(rule: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_rule(rule, "signedIdentity")
