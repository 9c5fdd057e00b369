"""Where an image stands in a policy: its transport, its identity and the namespaces
that contain it, as containers/image names them for each transport.

A policy's ``transports`` section picks requirements by the most specific scope first:
the image's identity, then each namespace, then the transport's ``""``, then
``default``:

    docker          identity ``host[:port]/repo:tag`` (or ``@digest``); namespaces the
                    repository and each of its parents up to the host
                    (``host:5000/org/app``, ``host:5000/org``, ``host:5000``), then the
                    host's wildcard domains without the port (``*.example.com``,
                    ``*.com``)
    oci             the layout directory, made absolute with its symlinks resolved
    oci-archive     the archive file, likewise; namespaces: each parent directory
                    (not ``/``, which is ``""``)
    docker-archive  no identity: only its ``""`` scope and ``default`` apply
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from hostjob.images.trust.identity import DockerRef

if TYPE_CHECKING:
    from hostjob.images.reference import Reference

TRANSPORTS = ("docker", "oci", "oci-archive", "docker-archive")


class ImageScope:
    """An image as a policy sees it. ``docker_ref``: the registry name signatures are
    matched against (None for a layout, which has none)."""

    __slots__ = ("docker_ref", "identity", "namespaces", "transport")

    def __init__(
        self,
        transport: str,
        identity: str,
        namespaces: list[str],
        docker_ref: DockerRef | None = None,
    ) -> None:
        self.transport = transport
        self.identity = identity
        self.namespaces = namespaces
        self.docker_ref = docker_ref

    def __str__(self) -> str:
        return f"{self.transport}:{self.identity}"

    def __repr__(self) -> str:
        return f"ImageScope({str(self)!r})"


def of(ref: Reference) -> ImageScope:
    """The scope of a reference ``hostjob.images.reference.parse`` made."""
    if ref.is_registry:
        docker_ref = DockerRef.of(ref)
        return ImageScope("docker", str(docker_ref), docker_namespaces(docker_ref.name), docker_ref)
    assert ref.path is not None
    if ref.transport == "docker-archive":
        named = DockerRef.parse(ref.tag) if ref.tag else None
        return ImageScope("docker-archive", "", [], named)
    path = explicit_path(ref.path)
    return ImageScope(ref.transport, path, path_namespaces(path))


def docker_namespaces(name: str) -> list[str]:
    """``host:5000/org/app`` -> the repository, its parents, then ``*.`` domains."""
    out = []
    while True:
        out.append(name)
        slash = name.rfind("/")
        if slash < 0:
            break
        name = name[:slash]
    host = name.partition(":")[0]
    while "." in host:
        host = host.partition(".")[2]
        out.append(f"*.{host}")
    return out


def path_namespaces(path: str) -> list[str]:
    out: list[str] = []
    while True:
        slash = path.rfind("/")
        if slash <= 0:
            return out
        path = path[:slash]
        out.append(path)


def explicit_path(path: str) -> str:
    """Absolute, without symlinks: the file itself if it exists, else its parent's
    resolved path and its own name (as containers/image's explicitfilepath)."""
    absolute = os.path.abspath(path)
    if os.path.lexists(absolute):
        return os.path.realpath(absolute)
    parent, name = os.path.split(absolute)
    return os.path.join(os.path.realpath(parent), name)


def check_scope(transport: str, scope: str) -> str | None:
    """Why ``scope`` cannot be a key of ``transport``'s section (None: it can)."""
    if scope == "":
        return None
    if transport in ("oci", "oci-archive"):
        if not scope.startswith("/"):
            return "must be an absolute path"
        if scope == "/":
            return 'use the default scope "" for /'
        if os.path.normpath(scope) != scope or scope.startswith("//"):
            return f"not a canonical path (perhaps {os.path.normpath(scope)})"
        return None
    if transport == "docker-archive":
        return 'docker-archive: takes only the scope ""'
    return None
