"""Error messages are one line that quotes hostile input harmlessly (issue 7)."""

from __future__ import annotations

from hostjob.errors import ConfigError, HostjobError, UnpackError, one_line
from hostjob.spec._decode import string_map


def test_control_characters_are_escaped() -> None:
    err = HostjobError("entry 'a\nb\x1b[31m' is bad\r")
    assert str(err) == "entry 'a\\nb\\x1b[31m' is bad\\r"
    assert str(UnpackError("x\x00y")) == "x\\x00y"
    assert one_line("caf\u00e9 \u4e2d") == "caf\u00e9 \u4e2d"  # printable text is kept


def test_json_path_with_a_newline_key() -> None:
    """Found by the config fuzzer: annotations {"A\\n;": {}} gave a two-line error."""
    try:
        string_map({"A\n;": {}}, "annotations")
    except ConfigError as err:
        assert str(err) == "annotations.A\\n;: expected a string, got object"
    else:
        raise AssertionError("no error")
