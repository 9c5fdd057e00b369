"""The signature policy file (containers-policy.json(5)): where it is, what it says,
and which requirements apply to an image.

    {"default": [REQUIREMENT, ...],
     "transports": {TRANSPORT: {SCOPE: [REQUIREMENT, ...], ...}, ...}}

Found as containers/image finds it: the file given (``--signature-policy``), else the
user's ``$HOME/.config/containers/policy.json`` if it exists, else
``/etc/containers/policy.json``; when neither exists there is no policy (the caller
says so once). Read strictly (``jsonfields``): ``default`` is required, every list
non-empty, every scope valid for its transport; a transport hostjob does not pull
from (``containers-storage``, ``dir``) may have a section, which never applies.
"""

from __future__ import annotations

import os

from hostjob.images.errors import PolicyError
from hostjob.images.trust import jsonfields, scopes
from hostjob.images.trust.requirements import Requirement, parse_list

SYSTEM_POLICY = "/etc/containers/policy.json"
USER_POLICY = ".config/containers/policy.json"
FILE_LIMIT = 16 << 20


def find(given: str | None) -> str | None:
    """The policy file to read: ``given``, else the user's, else the system's; None
    when there is none."""
    if given is not None:
        return given
    user = os.path.join(os.path.expanduser("~"), USER_POLICY)
    if os.path.exists(user):
        return user
    if os.path.exists(SYSTEM_POLICY):
        return SYSTEM_POLICY
    return None


class Policy:
    """A policy file's requirements: ``default``, and per transport and scope."""

    __slots__ = ("default", "path", "transports")

    def __init__(
        self,
        path: str,
        default: list[Requirement],
        transports: dict[str, dict[str, list[Requirement]]],
    ) -> None:
        self.path = path
        self.default = default
        self.transports = transports

    @classmethod
    def load(cls, path: str) -> Policy:
        return cls.parse(path, jsonfields.read(path, FILE_LIMIT, "signature policy"))

    @classmethod
    def parse(cls, path: str, data: bytes) -> Policy:
        what = f"signature policy {path}"
        top = jsonfields.known_fields(jsonfields.loads(data, what), ("default", "transports"), what)
        if "default" not in top:
            raise PolicyError(f"{what}: the default requirements are missing")
        default = parse_list(top["default"], f"{what}: default")
        transports: dict[str, dict[str, list[Requirement]]] = {}
        for transport, section in jsonfields.obj(top.get("transports", {}), what).items():
            where = f"{what}: transports.{transport}"
            entries = {}
            for scope, requirements in jsonfields.obj(section, where).items():
                why = scopes.check_scope(transport, scope)
                if why is not None:
                    raise PolicyError(f"{where}: invalid scope {scope!r}: {why}")
                entries[scope] = parse_list(requirements, f"{where}[{scope!r}]")
            transports[transport] = entries
        return cls(path, default, transports)

    def requirements(self, image: scopes.ImageScope) -> tuple[str, list[Requirement]]:
        """``(the section's name, its requirements)`` for ``image``: its identity, then
        each namespace, then the transport's ``""``, then ``default``."""
        section = self.transports.get(image.transport)
        if section is not None:
            for scope in (image.identity, *image.namespaces, ""):
                if scope in section:
                    name = f'"{scope}"' if scope == "" else scope
                    return f"transports.{image.transport}[{name}]", section[scope]
        return "default", self.default
