"""Image references: where an image comes from, and its canonical name.

Accepted forms (the ``containers/image`` transports ``skopeo`` and ``podman`` use)::

    oci:DIR[:TAG|@DIGEST]          an OCI image layout directory
    oci-archive:FILE[:TAG]         a tar of an OCI image layout
    docker-archive:FILE[:REF|@N]   a ``docker save`` tar (REF: a name in it, N: its index)
    [docker://]NAME[:TAG|@DIGEST]  a registry, over the OCI distribution API

``NAME`` follows the distribution grammar (``distribution/reference``): an optional
domain (``host[:port]``, recognised by a ``.`` or ``:`` or being ``localhost``), then
lowercase path components separated by ``/``. Docker Hub defaults apply:
``busybox`` is ``docker.io/library/busybox:latest``, pulled from
``registry-1.docker.io``.
"""

from __future__ import annotations

from hostjob.images.errors import InvalidReference

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DOCKER_HUB = "docker.io"
DOCKER_HUB_HOST = "registry-1.docker.io"
DEFAULT_TAG = "latest"
NAME_MAX = 255

# The grammar is checked by plain functions rather than regular expressions: `re` (with
# `enum` and `collections`, ~5 ms) would be the dearest import of a cached `run IMAGE`.
_DIGITS = frozenset("0123456789")
_LOWER_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ALNUM = _LOWER_ALNUM | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HEX_LOWER = frozenset("0123456789abcdef")
_DOMAIN_CHARS = _ALNUM | {"-"}
_IPV6_CHARS = frozenset("0123456789abcdefABCDEF:.")
_TAG_CHARS = _ALNUM | {"_", ".", "-"}
_DIGEST_LENGTHS = {"sha256": 64, "sha512": 128}


def is_digest(text: str) -> bool:
    """``sha256:<64 lowercase hex>`` or ``sha512:<128 lowercase hex>``."""
    algorithm, sep, encoded = text.partition(":")
    return (
        bool(sep)
        and len(encoded) == _DIGEST_LENGTHS.get(algorithm, -1)
        and _HEX_LOWER.issuperset(encoded)
    )


def is_tag(text: str) -> bool:
    """``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``."""
    return (
        0 < len(text) <= 128
        and (text[0] in _ALNUM or text[0] == "_")
        and (_TAG_CHARS.issuperset(text))
    )


def is_domain(text: str) -> bool:
    """``host[:port]``: dot-separated components of letters, digits and inner ``-``, or an
    IPv6 address in brackets; the port all digits."""
    if text.startswith("["):
        address, sep, port = text[1:].partition("]")
        if not sep or not address or not _IPV6_CHARS.issuperset(address):
            return False
        return not port or (port[0] == ":" and _is_number(port[1:]))
    host, sep, port = text.partition(":")
    if sep and not _is_number(port):
        return False
    for component in host.split("."):
        if not component or not _DOMAIN_CHARS.issuperset(component):
            return False
        if component[0] == "-" or component[-1] == "-":
            return False
    return True


def is_path_component(text: str) -> bool:
    """Runs of lowercase letters and digits joined by ``.``, ``_``, ``__`` or dashes."""
    if not text or text[0] not in _LOWER_ALNUM or text[-1] not in _LOWER_ALNUM:
        return False
    separator = ""
    for char in text:
        if char in _LOWER_ALNUM:
            if separator and separator not in (".", "_", "__") and separator.strip("-"):
                return False
            separator = ""
        elif char in "._-":
            separator += char
        else:
            return False
    return True


def _is_number(text: str) -> bool:
    return bool(text) and _DIGITS.issuperset(text)


class Reference:
    """A parsed image reference.

    ``transport`` is ``docker``, ``oci``, ``oci-archive`` or ``docker-archive``.
    Registry references have ``domain``, ``repository`` and a ``tag`` and/or
    ``digest``; local ones have ``path`` and optionally a ``tag`` (an OCI ref name, or
    a docker-archive name), a ``digest`` (``oci:`` only) or an ``index``
    (``docker-archive:FILE:@N``).
    """

    __slots__ = ("digest", "domain", "index", "path", "repository", "tag", "transport")

    def __init__(
        self,
        transport: str,
        *,
        path: str | None = None,
        domain: str | None = None,
        repository: str | None = None,
        tag: str | None = None,
        digest: str | None = None,
        index: int | None = None,
    ) -> None:
        self.transport = transport
        self.path = path
        self.domain = domain
        self.repository = repository
        self.tag = tag
        self.digest = digest
        self.index = index

    @property
    def is_registry(self) -> bool:
        return self.transport == "docker"

    @property
    def repo_name(self) -> str:
        """``docker.io/library/busybox`` (registry references only)."""
        return f"{self.domain}/{self.repository}"

    @property
    def name(self) -> str:
        """The canonical name: ``docker.io/library/busybox:latest``, ``…@sha256:…``.

        A reference with both a tag and a digest keeps both (``name:tag@digest``).
        Local references give their transport form (``oci:/dir:tag``).
        """
        if self.transport != "docker":
            return str(self)
        out = self.repo_name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out

    @property
    def registry_host(self) -> str:
        """The host to talk to: Docker Hub's pulls go to ``registry-1.docker.io``."""
        if self.domain == DOCKER_HUB:
            return DOCKER_HUB_HOST
        return self.domain or ""

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest if pinned, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    def __str__(self) -> str:
        if self.transport == "docker":
            return self.name
        out = f"{self.transport}:{self.path}"
        if self.digest:
            return f"{out}@{self.digest}"
        if self.index is not None:
            return f"{out}:@{self.index}"
        if self.tag:
            return f"{out}:{self.tag}"
        return out

    def __repr__(self) -> str:
        return f"Reference({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Reference and all(
            getattr(self, s) == getattr(other, s) for s in self.__slots__
        )

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, s) for s in self.__slots__))

    def to_json(self) -> dict[str, Any]:
        return {s: getattr(self, s) for s in self.__slots__ if getattr(self, s) is not None}


def parse(text: str) -> Reference:
    """Parse any accepted form; a bare name is a registry reference."""
    if not text:
        raise InvalidReference("empty image reference")
    transport, sep, rest = text.partition(":")
    if sep and transport in ("oci", "oci-archive", "docker-archive"):
        return _parse_local(transport, rest, text)
    if text.startswith("docker://"):
        return parse_name(text[len("docker://") :])
    return parse_name(text)


def parse_name(text: str, default_tag: bool = True) -> Reference:
    """Parse a registry reference ``[host[:port]/]path[:tag][@digest]``, with defaults;
    a name with neither tag nor digest gets ``latest`` unless not ``default_tag``
    (a signature's identity, which means what it says)."""
    original = text
    if not text:
        raise InvalidReference("empty image reference")
    if len(text) > NAME_MAX + 1 + 128 + 1 + 135:
        raise InvalidReference(f"image reference is too long: {text[:80]!r}...")
    digest = None
    if "@" in text:
        text, _, digest = text.rpartition("@")
        if not is_digest(digest):
            raise InvalidReference(
                f"invalid digest {digest!r} in {original!r}: expected sha256:<64 lowercase hex>"
            )
    tag = None
    slash = text.rfind("/")
    colon = text.rfind(":")
    if colon > slash:
        text, tag = text[:colon], text[colon + 1 :]
        if not is_tag(tag):
            raise InvalidReference(f"invalid tag {tag!r} in {original!r}")
    domain, repository = _split_domain(text, original)
    if len(domain) + 1 + len(repository) > NAME_MAX:
        raise InvalidReference(f"repository name must not exceed {NAME_MAX} characters")
    if tag is None and digest is None and default_tag:
        tag = DEFAULT_TAG
    return Reference("docker", domain=domain, repository=repository, tag=tag, digest=digest)


def normalize(text: str) -> str:
    """The canonical name of a registry-style reference (``busybox`` -> ``docker.io/…``)."""
    return parse_name(text).name


def _split_domain(name: str, original: str) -> tuple[str, str]:
    if not name:
        raise InvalidReference(f"missing repository name in {original!r}")
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
        if not is_domain(first):
            raise InvalidReference(f"invalid registry host {first!r} in {original!r}")
        domain, path = first, rest
    else:
        domain, path = DOCKER_HUB, name
    if domain == "index.docker.io":
        domain = DOCKER_HUB
    components = path.split("/")
    for component in components:
        if component in ("", ".", ".."):
            raise InvalidReference(f"invalid repository path {path!r} in {original!r}")
        if not is_path_component(component):
            hint = " (must be lowercase)" if component.lower() != component else ""
            raise InvalidReference(
                f"invalid repository name component {component!r} in {original!r}{hint}"
            )
    if domain == DOCKER_HUB and len(components) == 1:
        path = f"library/{path}"
    return domain, path


def _parse_local(transport: str, rest: str, original: str) -> Reference:
    if transport == "oci" and "@" in rest:
        path, _, digest = rest.rpartition("@")
        if not is_digest(digest):
            raise InvalidReference(f"invalid digest {digest!r} in {original!r}")
        _check_path(path, original)
        return Reference(transport, path=path, digest=digest)
    path, sep, suffix = rest.partition(":")
    _check_path(path, original)
    if not sep:
        return Reference(transport, path=path)
    if not suffix:
        raise InvalidReference(f"empty tag after ':' in {original!r}")
    if transport == "docker-archive":
        if suffix.startswith("@"):
            try:
                index = int(suffix[1:], 10)
            except ValueError:
                index = -1
            if index < 0:
                raise InvalidReference(f"invalid image index {suffix!r} in {original!r}")
            return Reference(transport, path=path, index=index)
        if "@" in suffix:
            raise InvalidReference(f"a docker-archive reference cannot have a digest: {original!r}")
        return Reference(transport, path=path, tag=parse_name(suffix).name)
    # An OCI ref name (org.opencontainers.image.ref.name): a tag, or a full name.
    if any(c in suffix for c in "\0\n") or len(suffix) > NAME_MAX:
        raise InvalidReference(f"invalid OCI reference name {suffix!r} in {original!r}")
    return Reference(transport, path=path, tag=suffix)


def _check_path(path: str, original: str) -> None:
    if not path:
        raise InvalidReference(f"missing path in {original!r}")
    if "\0" in path:
        raise InvalidReference(f"invalid path in {original!r}")
