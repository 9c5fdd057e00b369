"""TOML out, for the containerd drop-in the node installer writes: tables of strings,
booleans, integers, floats and arrays, the shapes containerd's configuration has.

The standard library reads TOML (``tomllib``) but does not write it. ``dumps`` writes a
document and reads it back: what does not come back equal (a date, a value of another
kind) is ``Unwritable``, which the installer reports as a configuration it cannot merge
safely, changing nothing.
"""

from __future__ import annotations

import math
import tomllib
from typing import Any

from hostjob.errors import HostjobError

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class Unwritable(HostjobError):
    """A value the writer does not write (a date or time, a NaN), or a document that
    would not read back as it was."""


def key(name: str) -> str:
    if name and set(name) <= _BARE:
        return name
    return string(name)


def string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def value(item: Any) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        if math.isnan(item) or math.isinf(item):
            raise Unwritable(f"the value {item!r}")
        return repr(item)
    if isinstance(item, str):
        return string(item)
    if isinstance(item, list):
        return "[" + ", ".join(value(v) for v in item) + "]"
    if isinstance(item, dict):
        return "{" + ", ".join(f"{key(k)} = {value(v)}" for k, v in item.items()) + "}"
    raise Unwritable(f"a value of type {type(item).__name__}")


def _table(out: list[str], path: list[str], table: dict[str, Any]) -> None:
    plain = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    nested = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    if path and (plain or not nested):
        out.append("")
        out.append("[" + ".".join(key(p) for p in path) + "]")
    for name, item in plain:
        out.append(f"{key(name)} = {value(item)}")
    for name, item in nested:
        _table(out, [*path, name], item)


def dumps(document: dict[str, Any], header: str = "") -> str:
    """``document`` as TOML (``header``: comment lines put first), checked to read back
    equal."""
    out = [f"# {line}" if line else "#" for line in header.splitlines()]
    _table(out, [], document)
    text = "\n".join(out).lstrip("\n") + "\n"
    if tomllib.loads(text) != document:
        raise Unwritable("the document does not read back as it was")
    return text
