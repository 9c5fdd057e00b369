"""Which identity a signature may claim: a requirement's ``signedIdentity``.

A signature names the image it was made for (``critical.identity.docker-reference``);
a requirement says how that name must relate to the image being pulled, with the
rules of containers-policy.json(5):

    matchExact              the same name and tag (or digest): ``a/b:v1`` signs only ``a/b:v1``
    matchRepoDigestOrExact  as matchExact for a tag; for a digest, the same repository
                            (the default)
    matchRepository         the same repository, whatever the tag
    exactReference          the name the rule gives (a tag or digest), whatever is pulled
    exactRepository         the repository the rule gives, whatever is pulled
    remapIdentity           matchRepoDigestOrExact after ``prefix`` in the pulled name is
                            replaced by ``signedPrefix`` (a mirror signed as the original)

Names are normalised as docker does (``busybox`` is ``docker.io/library/busybox``), but
a signature's name gets no default tag: a name alone never matches a tag. The first
three rules need the pulled image to have a registry name: an ``oci:`` layout has none,
so only ``exactReference`` and ``exactRepository`` can accept it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostjob.images import reference as refs
from hostjob.images.errors import InvalidReference, PolicyError
from hostjob.images.trust.jsonfields import exact_fields, string

if TYPE_CHECKING:
    from collections.abc import Callable


class DockerRef:
    """A registry name, its tag and digest as written (no default tag added)."""

    __slots__ = ("digest", "name", "tag")

    def __init__(self, name: str, tag: str | None = None, digest: str | None = None) -> None:
        self.name = name  # docker.io/library/busybox
        self.tag = tag
        self.digest = digest

    @classmethod
    def parse(cls, text: str) -> DockerRef:
        """``InvalidReference`` unless ``text`` is a registry name (normalised)."""
        ref = refs.parse_name(text, default_tag=False)
        return cls(ref.repo_name, ref.tag, ref.digest)

    @classmethod
    def of(cls, ref: refs.Reference) -> DockerRef:
        """The identity of a pulled registry reference: one that names both a tag and a
        digest is the digest (as containers/image takes it)."""
        if ref.digest:
            return cls(ref.repo_name, None, ref.digest)
        return cls(ref.repo_name, ref.tag or refs.DEFAULT_TAG)

    @property
    def name_only(self) -> bool:
        return self.tag is None and self.digest is None

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out

    def __repr__(self) -> str:
        return f"DockerRef({str(self)!r})"


class IdentityRule:
    """One ``signedIdentity``: ``allows(pulled, signed)`` is True when a signature
    for ``signed`` may stand for the pulled image (None: it has no registry name)."""

    __slots__ = ("kind", "prefix", "reference", "signed_prefix")

    def __init__(
        self,
        kind: str,
        *,
        reference: str | None = None,
        prefix: str | None = None,
        signed_prefix: str | None = None,
    ) -> None:
        self.kind = kind
        self.reference = reference  # exactReference's dockerReference, exactRepository's
        self.prefix = prefix
        self.signed_prefix = signed_prefix

    def allows(self, pulled: DockerRef | None, signed: str) -> bool:
        try:
            signature = DockerRef.parse(signed)
        except InvalidReference:
            return False
        check = _RULES[self.kind]
        return check(self, pulled, signature)

    def __repr__(self) -> str:
        return f"IdentityRule({self.kind!r})"


DEFAULT = IdentityRule("matchRepoDigestOrExact")


def _exact(intended: DockerRef, signature: DockerRef) -> bool:
    if intended.name_only or signature.name_only:
        return False
    return str(signature) == str(intended)


def _repo_digest_or_exact(intended: DockerRef, signature: DockerRef) -> bool:
    if signature.name_only:
        return False
    if intended.tag:  # a tag (with or without a digest): the very name
        return str(signature) == str(intended)
    if intended.digest:  # the manifest's digest is checked against the signature's
        return signature.name == intended.name
    return False


def _match_exact(rule: IdentityRule, pulled: DockerRef | None, signature: DockerRef) -> bool:
    return pulled is not None and _exact(pulled, signature)


def _match_repo_digest_or_exact(
    rule: IdentityRule, pulled: DockerRef | None, signature: DockerRef
) -> bool:
    return pulled is not None and _repo_digest_or_exact(pulled, signature)


def _match_repository(rule: IdentityRule, pulled: DockerRef | None, signature: DockerRef) -> bool:
    return pulled is not None and signature.name == pulled.name


def _exact_reference(rule: IdentityRule, pulled: DockerRef | None, signature: DockerRef) -> bool:
    assert rule.reference is not None
    return _exact(DockerRef.parse(rule.reference), signature)


def _exact_repository(rule: IdentityRule, pulled: DockerRef | None, signature: DockerRef) -> bool:
    assert rule.reference is not None
    return signature.name == DockerRef.parse(rule.reference).name


def _remap_identity(rule: IdentityRule, pulled: DockerRef | None, signature: DockerRef) -> bool:
    if pulled is None:
        return False
    assert rule.prefix is not None and rule.signed_prefix is not None
    text = str(pulled)
    if _has_prefix(text, rule.prefix):
        try:
            pulled = DockerRef.parse(rule.signed_prefix + text[len(rule.prefix) :])
        except InvalidReference:
            return False
    return _repo_digest_or_exact(pulled, signature)


def _has_prefix(name: str, prefix: str) -> bool:
    """``prefix`` is ``name``, or a namespace of it: what follows is ``/``, ``:`` or ``@``."""
    if len(name) == len(prefix):
        return name == prefix
    return name.startswith(prefix) and name[len(prefix)] in "/:@"


_RULES: dict[str, Callable[[IdentityRule, DockerRef | None, DockerRef], bool]] = {
    "matchExact": _match_exact,
    "matchRepoDigestOrExact": _match_repo_digest_or_exact,
    "matchRepository": _match_repository,
    "exactReference": _exact_reference,
    "exactRepository": _exact_repository,
    "remapIdentity": _remap_identity,
}
KINDS = tuple(_RULES)


def parse_rule(data: object, what: str) -> IdentityRule:
    """A ``signedIdentity`` object, as strictly as containers/image reads it: exactly
    the fields of its type, each of the right kind."""
    kind = string(data, "type", what)
    if kind not in _RULES:
        raise PolicyError(f"{what}: unknown signedIdentity type {kind!r}")
    if kind in ("matchExact", "matchRepoDigestOrExact", "matchRepository"):
        exact_fields(data, ("type",), what)
        return IdentityRule(kind)
    if kind == "exactReference":
        exact_fields(data, ("type", "dockerReference"), what)
        text = string(data, "dockerReference", what)
        if _parse_or_none(text) is None or DockerRef.parse(text).name_only:
            raise PolicyError(f"{what}: dockerReference {text!r} has neither a tag nor a digest")
        return IdentityRule(kind, reference=text)
    if kind == "exactRepository":
        exact_fields(data, ("type", "dockerRepository"), what)
        text = string(data, "dockerRepository", what)
        if _parse_or_none(text) is None:
            raise PolicyError(f"{what}: dockerRepository {text!r} is not a repository name")
        return IdentityRule(kind, reference=text)
    exact_fields(data, ("type", "prefix", "signedPrefix"), what)
    prefix, signed = string(data, "prefix", what), string(data, "signedPrefix", what)
    for value in (prefix, signed):
        if not _valid_prefix(value):
            raise PolicyError(f"{what}: prefix {value!r} is not a host[:port][/path]")
    return IdentityRule(kind, prefix=prefix, signed_prefix=signed)


def _parse_or_none(text: str) -> DockerRef | None:
    try:
        return DockerRef.parse(text)
    except InvalidReference:
        return None


def _valid_prefix(text: str) -> bool:
    """A registry host (``host[:port]``), or a host and repository path."""
    host, sep, path = text.partition("/")
    if not refs.is_domain(host):
        return False
    return not sep or all(refs.is_path_component(part) for part in path.split("/"))
