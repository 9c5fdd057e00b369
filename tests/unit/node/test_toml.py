"""The drop-in's TOML writer: what it writes reads back equal, what it cannot write is
refused, never written wrong."""

from __future__ import annotations

import datetime
import tomllib

import pytest

from hostjob.node import toml


def test_a_containerd_shaped_document_reads_back_equal() -> None:
    document = {
        "version": 2,
        "plugins": {
            "io.containerd.grpc.v1.cri": {
                "sandbox_image": 'pause "3.9"\\x',
                "containerd": {
                    "runtimes": {
                        "hostjob-join": {
                            "pod_annotations": ["io.hostjob.*"],
                            "options": {"BinaryName": "/opt/hostjob/bin/hostjob", "Root": ""},
                        },
                        "runc": {"options": {"SystemdCgroup": True, "ShimCgroup": 1.5}},
                    }
                },
            }
        },
        "inline": [{"a": 1}],
    }
    text = toml.dumps(document, "first\nsecond")
    assert text.startswith("# first\n# second\n")
    assert tomllib.loads(text) == document
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.hostjob-join.options]' in text


def test_control_characters_are_escaped() -> None:
    assert toml.string("a\nb\x7f") == '"a\\u000ab\\u007f"'
    tab = "a\tb"
    assert tomllib.loads("k = " + toml.string(tab))["k"] == tab


@pytest.mark.parametrize(
    "item", [datetime.date(2024, 1, 1), float("nan"), float("inf"), b"bytes", None]
)
def test_a_value_it_cannot_write_is_refused(item: object) -> None:
    with pytest.raises(toml.Unwritable):
        toml.dumps({"t": {"k": item}})


def test_an_empty_table_is_written_as_a_header() -> None:
    assert tomllib.loads(toml.dumps({"a": {"b": {}}})) == {"a": {"b": {}}}
