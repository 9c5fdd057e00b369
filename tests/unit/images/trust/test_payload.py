"""What a signature signs, read strictly: exactly the critical fields, of their kinds."""

from __future__ import annotations

import json

import pytest

from hostjob.images.errors import InvalidSignature
from hostjob.images.trust import payload
from tests.fixtures.signing import SIGSTORE, SIMPLE
from tests.fixtures.signing import payload as make

DIGEST = "sha256:" + "c" * 64


def test_both_kinds() -> None:
    found = payload.parse(make(DIGEST, "h/a:v1"), payload.SIMPLE_SIGNING)
    assert (found.digest, found.docker_reference) == (DIGEST, "h/a:v1")
    cosign = make(DIGEST, "h/a", SIGSTORE, optional={})
    assert payload.parse(cosign.replace(b'"optional":{}', b'"optional":null'), payload.SIGSTORE)
    with pytest.raises(InvalidSignature, match="expected a JSON object"):  # null: cosign's only
        payload.parse(make(DIGEST, "h/a", SIMPLE, optional={}).replace(b"{}", b"null"), SIMPLE)
    with pytest.raises(InvalidSignature, match="unrecognized signature type"):
        payload.parse(make(DIGEST, "h/a:v1", SIMPLE), payload.SIGSTORE)


def mutated(change: object) -> bytes:
    doc = json.loads(make(DIGEST, "h/a:v1"))
    change(doc)  # type: ignore[operator]
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["critical"].update(extra=1), "unknown field 'extra'"),
        (lambda d: d["critical"].pop("identity"), "missing field 'identity'"),
        (lambda d: d.update(more={}), "unknown field 'more'"),
        (lambda d: d["critical"]["image"].update({"docker-manifest-digest": "sha256:x"}),
         "invalid docker-manifest-digest"),
        (lambda d: d["critical"]["identity"].update({"docker-reference": 5}), "must be a string"),
        (lambda d: d["optional"].update(timestamp=1.5), "timestamp is not an integer"),
        (lambda d: d["optional"].update(creator=[]), "creator is not a string"),
    ],
)  # fmt: skip
def test_a_payload_that_is_not_right_is_invalid(change: object, message: str) -> None:
    with pytest.raises(InvalidSignature, match=message):
        payload.parse(mutated(change), payload.SIMPLE_SIGNING)


def test_duplicate_keys_are_invalid() -> None:
    data = make(DIGEST, "h/a:v1").replace(b'"optional"', b'"critical":{},"optional"', 1)
    with pytest.raises(InvalidSignature, match="duplicate key"):
        payload.parse(data, payload.SIMPLE_SIGNING)
