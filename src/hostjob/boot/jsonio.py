"""JSON for the runtime path, on CPython's C accelerator (``_json``) alone.

Why not ``json``: importing it pulls in ``re`` and ``enum`` (~7 ms here), and
every runtime command is a fresh interpreter. The C scanner and encoder that
``json`` itself uses are all a runtime command needs; this module wires them up
(decoding strictly, as ``json.loads`` does) and adds the two-space indented
output runc prints for ``state``. Malformed input raises ``ValueError`` with
line and column; only that error path imports ``json.decoder``.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"


class _Context:
    """The attributes ``_json.make_scanner`` reads, with json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not valid JSON")


def _unserialisable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# typeshed types the scanner's argument as the scanner itself; any object with
# the context attributes is what the C code reads.
_scan = _json.make_scanner(_Context())  # type: ignore[arg-type]
_encode_string = _json.encode_basestring
_encode_compact = _json.make_encoder(
    None, _unserialisable, _encode_string, None, ":", ",", False, False, False
)


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    return f"line {line} column {column} (char {pos})"


def loads(data: bytes | str) -> Any:
    if isinstance(data, bytes | bytearray):
        text = data.decode()
        if text.startswith("\ufeff"):
            text = text[1:]  # a UTF-8 BOM, as "utf-8-sig" drops it (without importing that codec)
    else:
        text = data
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as stop:
        raise ValueError(f"Expecting value: {_where(text, stop.value)}") from stop
    except RecursionError as err:
        raise ValueError("JSON nested too deeply") from err
    except SystemError:
        # The C scanner reports most syntax errors as json.decoder.JSONDecodeError, which
        # it looks up in sys.modules only: without json.decoder loaded (the runtime path
        # never loads it) it fails with a SystemError instead. Load it, on this error
        # path alone, and scan again: that raises the JSONDecodeError (a ValueError).
        import json.decoder  # noqa: F401

        try:
            value, end = _scan(text, start)
        except StopIteration as stop:
            raise ValueError(f"Expecting value: {_where(text, stop.value)}") from stop
    tail = text[end:].lstrip(_WHITESPACE)
    if tail:
        raise ValueError(f"Extra data: {_where(text, len(text) - len(tail))}")
    check_strings(text, value)
    return value


def check_strings(text: str | bytes, value: Any) -> None:
    """ValueError if a string of ``value`` (parsed from ``text``) holds a NUL or an
    unpaired UTF-16 surrogate (``"\\u0000"``, ``"\\ud800"``): JSON lets both through,
    but no path, argument, environment entry or UTF-8 file can hold them, so they
    would fail far from the input (a ValueError traceback from os.stat or encode).

    Only escapes make them, so documents without ``\\u`` cost one substring search.
    """
    found = "\\u" in text if isinstance(text, str) else b"\\u" in text
    if found:
        _walk_strings(value)


def _walk_strings(value: Any) -> None:
    if type(value) is str:
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as err:
                raise ValueError(
                    f"string {_shown(value)} holds an unpaired UTF-16 surrogate"
                ) from err
        if "\x00" in value:
            raise ValueError(f"string {_shown(value)} holds a NUL character")
    elif type(value) is dict:
        for key, item in value.items():
            _walk_strings(key)
            _walk_strings(item)
    elif type(value) is list:
        for item in value:
            _walk_strings(item)


def _shown(value: str) -> str:
    return repr(value.encode("utf-8", "backslashreplace").decode()[:60])


# What the C encoder leaves raw but a terminal takes as a control: DEL and the C1
# controls (U+0080-U+009F; U+009B is CSI). Outside strings JSON is ASCII without them,
# so escaping every one in the whole text only ever touches strings.
_CONTROLS = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0))}


def dumps(value: Any, indent: int | None = None) -> str:
    """Compact JSON, or Go's MarshalIndent layout with ``indent`` spaces. Every
    control character is escaped (``\\u009b``), C1 ones too: what it writes may be
    printed on a terminal."""
    if indent is None:
        text = "".join(_encode_compact(value, 0))
    else:
        out: list[str] = []
        _pretty(value, out, " " * indent, "\n")
        text = "".join(out)
    if text.isascii() and "\x7f" not in text:
        return text
    return text.translate(_CONTROLS)


def _pretty(value: Any, out: list[str], step: str, newline: str) -> None:
    if isinstance(value, dict) and value:
        inner = newline + step
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append(("," if i else "") + inner + _encode_string(str(key)) + ": ")
            _pretty(item, out, step, inner)
        out.append(newline + "}")
    elif isinstance(value, list | tuple) and value:
        inner = newline + step
        out.append("[")
        for i, item in enumerate(value):
            out.append(("," if i else "") + inner)
            _pretty(item, out, step, inner)
        out.append(newline + "]")
    else:
        out.append("".join(_encode_compact(value, 0)))
