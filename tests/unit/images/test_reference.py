"""Image reference grammar and Docker Hub defaults."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostjob.images import reference
from hostjob.images.errors import InvalidReference
from hostjob.images.reference import parse, parse_name

D = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "name", "host"),
    [
        ("busybox", "docker.io/library/busybox:latest", "registry-1.docker.io"),
        ("docker://busybox:1.36", "docker.io/library/busybox:1.36", "registry-1.docker.io"),
        ("user/app", "docker.io/user/app:latest", "registry-1.docker.io"),
        ("index.docker.io/library/alpine:3", "docker.io/library/alpine:3", "registry-1.docker.io"),
        ("quay.io/org/img:v1.2", "quay.io/org/img:v1.2", "quay.io"),
        ("localhost/app", "localhost/app:latest", "localhost"),
        ("localhost:5000/a/b/c:t", "localhost:5000/a/b/c:t", "localhost:5000"),
        ("127.0.0.1:5000/app@" + D, "127.0.0.1:5000/app@" + D, "127.0.0.1:5000"),
        ("app:tag@" + D, "docker.io/library/app:tag@" + D, "registry-1.docker.io"),
        ("ab-c__d/e--f.g", "docker.io/ab-c__d/e--f.g:latest", "registry-1.docker.io"),
        ("UPPER/case", "UPPER/case:latest", "UPPER"),
        ("[::1]:5000/app", "[::1]:5000/app:latest", "[::1]:5000"),
        ("Registry.Example:443/x", "Registry.Example:443/x:latest", "Registry.Example:443"),
    ],
)
def test_registry_references(text, name, host):
    ref = parse(text)
    assert ref.is_registry and ref.name == name and ref.registry_host == host


def test_reference_parts():
    ref = parse("localhost:5000/team/app:1.0")
    assert (ref.domain, ref.repository, ref.tag, ref.digest) == (
        "localhost:5000",
        "team/app",
        "1.0",
        None,
    )
    assert ref.reference == "1.0"
    assert parse("busybox@" + D).reference == D
    assert reference.normalize("busybox") == "docker.io/library/busybox:latest"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Busybox",
        "a.b-c__d/x",
        "UPPER",
        "docker.io/Library/x",
        "a//b",
        "a/../b",
        "../etc",
        "a/./b",
        "-a",
        "a-",
        "a__-b",
        "busybox:",
        "busybox:-tag",
        "busybox:" + "t" * 129,
        "busybox@sha256:abc",
        "busybox@sha256:" + "A" * 64,
        "busybox@md5:" + "a" * 32,
        "host:port/x",
        "a" * 256,
        "x/" + "a" * 260,
        "busybox:tag with space",
        "/abs",
    ],
)
def test_invalid_registry_references(text):
    with pytest.raises(InvalidReference) as info:
        parse(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "transport", "path", "tag", "digest", "index"),
    [
        ("oci:/tmp/layout", "oci", "/tmp/layout", None, None, None),
        ("oci:/tmp/layout:v1", "oci", "/tmp/layout", "v1", None, None),
        ("oci:rel/dir@" + D, "oci", "rel/dir", None, D, None),
        ("oci-archive:/x/img.tar:tag", "oci-archive", "/x/img.tar", "tag", None, None),
        ("oci-archive:img.tar", "oci-archive", "img.tar", None, None, None),
        ("docker-archive:/x/s.tar", "docker-archive", "/x/s.tar", None, None, None),
        (
            "docker-archive:/x/s.tar:busybox",
            "docker-archive",
            "/x/s.tar",
            "docker.io/library/busybox:latest",
            None,
            None,
        ),
        ("docker-archive:/x/s.tar:@1", "docker-archive", "/x/s.tar", None, None, 1),
    ],
)
def test_local_references(text, transport, path, tag, digest, index):
    ref = parse(text)
    assert (ref.transport, ref.path, ref.tag, ref.digest, ref.index) == (
        transport,
        path,
        tag,
        digest,
        index,
    )
    assert not ref.is_registry
    assert parse(str(ref)) == ref


@pytest.mark.parametrize(
    "text",
    [
        "oci:",
        "oci::tag",
        "oci:/x:",
        "oci:/x@sha256:zz",
        "docker-archive:/x:@-1",
        "docker-archive:/x:@a",
        "docker-archive:/x:Bad",
    ],
)
def test_invalid_local_references(text):
    with pytest.raises(InvalidReference):
        parse(text)


_component = st.from_regex(r"[a-z0-9]{1,5}(?:[._-][a-z0-9]{1,5}){0,2}", fullmatch=True)
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_domain = st.from_regex(r"[a-z0-9]{1,8}\.[a-z]{2,4}(?::[0-9]{1,5})?", fullmatch=True)


@given(domain=_domain, path=st.lists(_component, min_size=1, max_size=4), tag=_tag)
def test_valid_names_round_trip(domain, path, tag):
    text = f"{domain}/{'/'.join(path)}:{tag}"
    ref = parse_name(text)
    assert ref.name == text
    assert (ref.domain, ref.repository, ref.tag) == (domain, "/".join(path), tag)
    assert parse_name(ref.name) == ref


@given(path=st.lists(_component, min_size=1, max_size=3))
def test_hub_names_get_defaults(path):
    path[0] = path[0].replace(".", "_")
    ref = parse_name("/".join(path))
    assert ref.domain == "docker.io" and ref.tag == "latest"
    if len(path) == 1:
        assert ref.repository == f"library/{path[0]}"
    assert parse_name(ref.name) == ref


@given(st.text(max_size=80))
def test_parse_never_crashes(text):
    try:
        ref = parse(text)
    except InvalidReference:
        return
    assert parse(str(ref)) == ref or not ref.is_registry
    if ref.is_registry:
        assert ".." not in ref.repository.split("/")


# The distribution grammar as regular expressions (what reference.py checked with before
# it dropped `re` from the runtime path): its plain checks must agree with them exactly.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
GRAMMAR = {
    reference.is_domain: (
        rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
    ),
    reference.is_path_component: r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*",
    reference.is_tag: r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}",
    reference.is_digest: r"(?:sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})",
}
# Characters that matter to one rule or another, plus a few that matter to none.
_ALPHABET = "aAzZ09f._-:[]@/ é٣\n"


@pytest.mark.parametrize("check", list(GRAMMAR), ids=lambda f: f.__name__)
@given(text=st.text(alphabet=_ALPHABET, max_size=24))
def test_plain_grammar_checks_agree_with_the_regular_expressions(check, text: str) -> None:  # type: ignore[no-untyped-def]
    import re

    assert check(text) == bool(re.fullmatch(GRAMMAR[check], text)), text


@pytest.mark.parametrize(
    ("check", "text", "ok"),
    [
        (reference.is_domain, "a-b.example.com:5000", True),
        (reference.is_domain, "[fe80::1%eth0]", False),
        (reference.is_domain, "[::1]:", False),
        (reference.is_domain, "host:\uff15\uff10\uff10\uff10", False),  # digits, but not ASCII ones
        (reference.is_domain, "-a.b", False),
        (reference.is_path_component, "a__b", True),
        (reference.is_path_component, "a___b", False),
        (reference.is_path_component, "a---b", True),
        (reference.is_path_component, "a._b", False),
        (reference.is_tag, "_" + "a" * 127, True),
        (reference.is_tag, "a" * 129, False),
        (reference.is_tag, ".a", False),
        (reference.is_digest, "sha512:" + "0" * 128, True),
        (reference.is_digest, "sha256:" + "A" * 64, False),
        (reference.is_digest, "md5:" + "0" * 32, False),
    ],
)
def test_plain_grammar_edges(check, text: str, ok: bool) -> None:  # type: ignore[no-untyped-def]
    assert check(text) is ok
    import re

    assert bool(re.fullmatch(GRAMMAR[check], text)) is ok
