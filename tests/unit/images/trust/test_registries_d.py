"""registries.d: the lookaside and sigstore attachments of each registry namespace,
merged from every *.yaml file of the directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostjob.images.errors import PolicyError
from hostjob.images.reference import parse
from hostjob.images.trust import registries_d, scopes
from hostjob.images.trust.registries_d import RegistriesD


def config(tmp_path: Path, **files: str) -> RegistriesD:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return RegistriesD.load(str(tmp_path))


def at(ref: str) -> scopes.ImageScope:
    return scopes.of(parse(ref))


def test_the_most_specific_namespace_that_sets_it_wins(tmp_path: Path) -> None:
    d = config(
        tmp_path,
        **{
            "a.yaml": "default-docker:\n  lookaside: https://sigs.example/\n",
            "b.yaml": "docker:\n  reg.io/org:\n    sigstore: file:///org\n"
            "    use-sigstore-attachments: false\n"
            "  reg.io:\n    use-sigstore-attachments: true\n"
            "  reg.io/org/app:\n    lookaside-staging: file:///staging\n",
            "ignored.yml": "not: [yaml",
        },
    )
    assert d.lookaside(at("reg.io/org/app:v1")) == "file:///org"  # staging is a signer's
    assert d.lookaside(at("reg.io/other:v1")) == "https://sigs.example/"
    assert not d.use_sigstore_attachments(at("reg.io/org/app"))
    assert d.use_sigstore_attachments(at("reg.io/x"))
    assert not d.use_sigstore_attachments(at("other.io/x"))


def test_without_configuration_the_builtin_lookaside(tmp_path: Path) -> None:
    d = RegistriesD.load(str(tmp_path / "missing"))
    expected = registries_d.builtin_lookaside()
    assert d.lookaside(at("reg.io/a")) == expected
    assert expected.startswith("file://")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a.yaml": "default-docker: {}\n", "b.yaml": "default-docker: {}\n"}, "set in"),
        ({"a.yaml": "docker: {r.io: {}}\n", "b.yaml": "docker: {r.io: {}}\n"}, "set in"),
        ({"a.yaml": "default-docker:\n  lookasid: x\n"}, "unknown key 'lookasid'"),
        ({"a.yaml": "dockers: {}\n"}, "unknown key 'dockers'"),
        ({"a.yaml": "default-docker:\n  use-sigstore-attachments: yes-please\n"}, "true or false"),
        ({"a.yaml": "[1, 2]\n"}, "a mapping at the top"),
        ({"a.yaml": "default-docker: [\n"}, "not valid YAML"),
    ],
)
def test_a_file_that_is_not_right_is_refused(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    with pytest.raises(PolicyError, match=message):
        config(tmp_path, **files)


def test_where_it_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert registries_d.find(None) == registries_d.SYSTEM_DIR
    (tmp_path / ".config" / "containers" / "registries.d").mkdir(parents=True)
    assert registries_d.find(None) == str(tmp_path / ".config" / "containers" / "registries.d")
    assert registries_d.find("/given") == "/given"
