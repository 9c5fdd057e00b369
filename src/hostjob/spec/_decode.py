"""A small, explicit JSON-to-object decoder for the wire formats.

Each wire type is a ``Model`` subclass with a ``FIELDS`` table of
``(json key, attribute, decoder)``. Decoding checks every value's JSON type and
reports the first mismatch with its JSON path (``process.user.uid: expected an
unsigned integer, got string``). Unknown keys are tolerated, as runtime-spec
requires; ``null`` reads as absent, as Go's encoding/json does.

This module is on the runtime path: it imports nothing beyond ``errors``.
"""

from __future__ import annotations

from hostjob.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar

    Decoder = Callable[[object, str], Any]

_JSON_TYPE = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


def json_type(value: object) -> str:
    return _JSON_TYPE.get(type(value), type(value).__name__)


def _mismatch(expected: str, value: object, path: str) -> ConfigError:
    return ConfigError(f"expected {expected}, got {json_type(value)}", path)


def string(value: object, path: str) -> str:
    if type(value) is not str:
        raise _mismatch("a string", value, path)
    return value


def boolean(value: object, path: str) -> bool:
    if type(value) is not bool:
        raise _mismatch("a boolean", value, path)
    return value


def integer(value: object, path: str) -> int:
    # bool is an int subclass in Python; JSON true is not a number.
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    raise _mismatch("an integer", value, path)


def number(value: object, path: str) -> float:
    if type(value) in (int, float):
        return value  # type: ignore[return-value]
    raise _mismatch("a number", value, path)


def int_range(low: int, high: int) -> Decoder:
    def decode(value: object, path: str) -> int:
        result = integer(value, path)
        if not low <= result <= high:
            raise ConfigError(f"{result} is out of range [{low}, {high}]", path)
        return result

    return decode


uint16 = int_range(0, 2**16 - 1)
uint32 = int_range(0, 2**32 - 1)
uint64 = int_range(0, 2**64 - 1)
int64 = int_range(-(2**63), 2**63 - 1)


def any_json(value: object, path: str) -> object:
    return value


def json_object(value: object, path: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _mismatch("an object", value, path)
    return value


def list_of(item: Decoder) -> Decoder:
    def decode(value: object, path: str) -> list[Any]:
        if type(value) is not list:
            raise _mismatch("an array", value, path)
        return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

    return decode


def map_of(item: Decoder) -> Decoder:
    def decode(value: object, path: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise _mismatch("an object", value, path)
        return {k: item(v, f"{path}.{k}") for k, v in value.items()}

    return decode


string_list = list_of(string)
string_map = map_of(string)


class Model:
    """Base of every wire type: decoded from and encoded to JSON by its ``FIELDS``."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[tuple[str, str, Decoder], ...]] = ()

    def __init__(self, **values: Any) -> None:
        for _key, attr, _decode in self.FIELDS:
            setattr(self, attr, values.pop(attr, None))
        if values:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(values)}")

    @classmethod
    def decode(cls, data: object, path: str = "") -> Any:
        if type(data) is not dict:
            raise _mismatch("an object", data, path or "(top level)")
        obj = cls.__new__(cls)
        prefix = f"{path}." if path else ""
        for key, attr, decode in cls.FIELDS:
            value = data.get(key)
            setattr(obj, attr, None if value is None else decode(value, prefix + key))
        return obj

    def to_json(self) -> dict[str, Any]:
        """The JSON object, without absent (None) fields."""
        out: dict[str, Any] = {}
        for key, attr, decode in self.FIELDS:
            value = getattr(self, attr)
            if value is not None:
                # A raw JSON object is JSON already: a seccomp profile is ~1,300 values
                # that a walk would copy one by one, on each of create's record writes.
                out[key] = value if decode is json_object else _encode(value)
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, attr) == getattr(other, attr) for _k, attr, _d in self.FIELDS
        )

    def __repr__(self) -> str:
        parts = [
            f"{attr}={getattr(self, attr)!r}"
            for _k, attr, _d in self.FIELDS
            if getattr(self, attr) is not None
        ]
        return f"{type(self).__name__}({', '.join(parts)})"


def _encode(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_json()
    if type(value) is list:
        return [_encode(v) for v in value]
    if type(value) is dict:
        return {k: _encode(v) for k, v in value.items()}
    return value


def model(cls: type[Model]) -> Decoder:
    """A decoder for a nested model, for use in a ``FIELDS`` table."""
    return cls.decode
