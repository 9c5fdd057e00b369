"""The runtime path's JSON agrees with the json module."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostjob.boot import jsonio

# Strings a JSON document may carry to hostjob: no NUL, no unpaired surrogate (refused).
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(texts, children, max_size=5),
    max_leaves=30,
)


@given(values)
def test_round_trip_matches_json(value: object) -> None:
    assert jsonio.loads(jsonio.dumps(value)) == json.loads(json.dumps(value))
    assert json.loads(jsonio.dumps(value, 2)) == json.loads(json.dumps(value))


def test_indent_matches_go_marshal_indent() -> None:
    value = {"a": [1, {"b": []}], "c": {}}
    assert jsonio.dumps(value, 2) == json.dumps(value, indent=2, ensure_ascii=False)


@pytest.mark.parametrize("text", ["", "{", '{"a":1} x', "NaN", "[1,]", "\ufeff"])
def test_bad_input_is_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        jsonio.loads(text)


def test_bytes_and_bom() -> None:
    assert jsonio.loads(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}


def test_lone_surrogates_are_refused() -> None:
    """Found by fuzzing: an escaped unpaired surrogate ("\\udca4") parsed into a string
    that no UTF-8 state file, path or environment can hold; create then died with a
    UnicodeEncodeError traceback while writing state.json."""
    for text in ('"\\ud800"', '{"\\udca4": 1}', '["a", {"b": ["\\udfff"]}]'):
        with pytest.raises(ValueError, match="unpaired UTF-16 surrogate"):
            jsonio.loads(text)
    assert jsonio.loads('"\\ud83d\\ude00"') == "\U0001f600"  # a pair is a character
    assert jsonio.loads(b'["\\u00e9"]') == ["\u00e9"]


def test_nul_characters_are_refused() -> None:
    """Found by fuzzing: root.path "a\\u0000" reached os.stat, whose ValueError
    ("embedded null byte") came out of create as a traceback."""
    for text in ('"a\\u0000b"', '{"\\u0000": 1}', '{"root": {"path": ["\\u0000"]}}'):
        with pytest.raises(ValueError, match="holds a NUL character"):
            jsonio.loads(text)


def test_syntax_errors_without_json_decoder_loaded() -> None:
    """Regression: in a fresh interpreter (every runtime command) the C scanner
    found no json.decoder in sys.modules and failed with a SystemError on an unterminated
    string or a missing delimiter: create with a truncated config.json, and state/list/
    delete with a truncated state.json, printed a traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "from hostjob.boot import jsonio\n"
        "assert 'json.decoder' not in sys.modules\n"
        "for text in ['{\"a\": \"x', '{\"a\" 1}', '[1 2]', '{\"a\": tru}', '{\"a\":1,}']:\n"
        "    try:\n"
        "        jsonio.loads(text)\n"
        "    except ValueError as err:\n"
        "        print(type(err).__name__)\n"  # JSONDecodeError or ValueError
    )
    src = str(Path(__file__).resolve().parents[3] / "src")
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() and len(done.stdout.split()) == 5, done.stdout


def test_every_control_is_escaped_c1_and_del_too() -> None:
    """What hostjob prints as JSON may come from an image: a C1 control (U+009B is a
    terminal's CSI) or DEL must not reach the terminal raw; the value reads back whole."""
    from tests.fixtures.terminal import controls

    value = {"k\x9b": ["a\x1b[2J", "b\x9b31m", "c\x85\x9f\x80\x7f", "é ok"]}
    for indent in (None, 2):
        text = jsonio.dumps(value, indent)
        assert controls(text) == []
        assert "\\u009b" in text and "\\u007f" in text and "é ok" in text
        assert jsonio.loads(text) == value
    assert jsonio.dumps({"a": "plain"}) == '{"a":"plain"}'
