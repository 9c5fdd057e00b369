"""Strict reading of security files: a policy, its keys, registries.d, and what a
signature signs. ``read`` takes an operator's file, bounded; the rest is strict JSON.

containers/image reads both "paranoidly", because a typo silently ignored in a
security policy (``keypath`` for ``keyPath``) would accept what the operator meant to
refuse: a key seen twice, a field it does not know, a missing field or one of the wrong
kind is an error, never skipped. The same here, with the error class of the caller
(``PolicyError`` for the operator's files, ``InvalidSignature`` for a signature).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from hostjob.images.errors import PolicyError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from hostjob.images.errors import ImageError


def read(path: str, limit: int, what: str) -> bytes:
    """The file ``path``, at most ``limit`` bytes; ``PolicyError`` naming ``what``
    (and the file) when it cannot be read or is larger."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise PolicyError(f"{what}: cannot read {path}: {err.strerror}") from err
    if len(data) > limit:
        raise PolicyError(f"{what}: {path} is larger than {limit >> 20} MiB")
    return data


def loads(data: bytes, what: str, error: type[ImageError] = PolicyError) -> Any:
    """The JSON document ``data``; a key twice in one object is an error."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise error(f"{what}: duplicate key {key!r}")
            out[key] = value
        return out

    def constant(name: str) -> Any:
        raise error(f"{what}: {name} is not JSON")

    try:
        return json.loads(data, object_pairs_hook=pairs, parse_constant=constant)
    except (ValueError, RecursionError) as err:
        if isinstance(err, error):
            raise
        raise error(f"{what}: not valid JSON: {err}") from err


def obj(value: object, what: str, error: type[ImageError] = PolicyError) -> dict[str, Any]:
    if type(value) is not dict:
        raise error(f"{what}: expected a JSON object")
    return value


def known_fields(
    value: object, names: Iterable[str], what: str, error: type[ImageError] = PolicyError
) -> dict[str, Any]:
    """``value`` as an object whose keys are all among ``names``."""
    found = obj(value, what, error)
    allowed = set(names)
    for key in found:
        if key not in allowed:
            raise error(f"{what}: unknown field {key!r}")
    return found


def exact_fields(
    value: object, names: Iterable[str], what: str, error: type[ImageError] = PolicyError
) -> dict[str, Any]:
    """``value`` as an object with exactly the keys ``names``."""
    wanted = tuple(names)
    found = known_fields(value, wanted, what, error)
    for key in wanted:
        if key not in found:
            raise error(f"{what}: missing field {key!r}")
    return found


def string(value: object, key: str, what: str, error: type[ImageError] = PolicyError) -> str:
    """The string field ``key`` of an object (missing or another kind: an error)."""
    item = obj(value, what, error).get(key)
    if type(item) is not str:
        raise error(f"{what}: field {key!r} must be a string")
    return item
