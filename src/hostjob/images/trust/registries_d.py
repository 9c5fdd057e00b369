"""Where a registry's signatures are kept (containers-registries.d(5)).

Every ``*.yaml`` file of the directory (``--registries.d``, else
``$HOME/.config/containers/registries.d`` if it exists, else
``/etc/containers/registries.d``)::

    default-docker:                   # any registry
      lookaside: https://sigs.example.com/  # simple: BASE/REPO@sha256=HEX/signature-N
      use-sigstore-attachments: true        # sigstore: the registry's sha256-HEX.sig tag
    docker:
      registry.example.com/org:       # a namespace: the most specific one that sets it wins
        lookaside: file:///var/lib/sigs

``sigstore`` is the old name of ``lookaside``; ``lookaside-staging`` and
``sigstore-staging`` are where a signer writes, which a pull never reads. A registry
with no lookaside configured uses containers/image's built-in one:
``file:///var/lib/containers/sigstore`` for root, else
``file://$HOME/.local/share/containers/sigstore``. A key set twice across the files,
or one this format does not have, is an error naming the file.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from hostjob.images.errors import PolicyError

if TYPE_CHECKING:
    from hostjob.images.trust.scopes import ImageScope

SYSTEM_DIR = "/etc/containers/registries.d"
USER_DIR = ".config/containers/registries.d"
FILE_LIMIT = 1 << 20
NAMESPACE_KEYS = (
    "lookaside",
    "lookaside-staging",
    "sigstore",
    "sigstore-staging",
    "use-sigstore-attachments",
)


def find(given: str | None) -> str:
    if given is not None:
        return given
    user = os.path.join(os.path.expanduser("~"), USER_DIR)
    return user if os.path.isdir(user) else SYSTEM_DIR


def builtin_lookaside() -> str:
    if os.geteuid() == 0:
        return "file:///var/lib/containers/sigstore"
    home = os.path.expanduser("~")
    return f"file://{home}/.local/share/containers/sigstore"


class Namespace:
    """One ``default-docker`` or ``docker`` entry."""

    __slots__ = ("lookaside", "use_attachments")

    def __init__(self, lookaside: str | None, use_attachments: bool | None) -> None:
        self.lookaside = lookaside
        self.use_attachments = use_attachments

    @classmethod
    def parse(cls, value: object, what: str) -> Namespace:
        if value is None:
            return cls(None, None)
        if type(value) is not dict:
            raise PolicyError(f"{what}: expected a mapping")
        for key, item in value.items():
            if key not in NAMESPACE_KEYS:
                raise PolicyError(f"{what}: unknown key {key!r}")
            if key == "use-sigstore-attachments":
                if type(item) is not bool:
                    raise PolicyError(f"{what}: {key} must be true or false")
            elif type(item) is not str:
                raise PolicyError(f"{what}: {key} must be a URL")
        use = value.get("use-sigstore-attachments")
        return cls(value.get("lookaside") or value.get("sigstore") or None, use)


class RegistriesD:
    """The merged configuration of one directory."""

    __slots__ = ("default", "docker", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.default: Namespace | None = None
        self.docker: dict[str, Namespace] = {}

    @classmethod
    def load(cls, path: str) -> RegistriesD:
        config = cls(path)
        try:
            names = sorted(os.listdir(path))
        except FileNotFoundError:
            return config
        except OSError as err:
            raise PolicyError(f"registries.d {path}: {err.strerror}") from err
        seen: dict[str, str] = {}
        for name in names:
            if name.endswith(".yaml"):
                config.merge(os.path.join(path, name), seen)
        return config

    def merge(self, file: str, seen: dict[str, str]) -> None:
        data = _read_yaml(file)
        for key in data:
            if key not in ("default-docker", "docker"):
                raise PolicyError(f"{file}: unknown key {key!r}")
        if "default-docker" in data:
            if "default-docker" in seen:
                raise PolicyError(f"{file}: default-docker is set in {seen['default-docker']} too")
            seen["default-docker"] = file
            self.default = Namespace.parse(data["default-docker"], f"{file}: default-docker")
        namespaces = data.get("docker") or {}
        if type(namespaces) is not dict:
            raise PolicyError(f"{file}: docker: expected a mapping of namespaces")
        for scope, value in namespaces.items():
            if type(scope) is not str or scope in self.docker:
                where = seen.get(f"docker:{scope}", file)
                raise PolicyError(f"{file}: docker namespace {scope!r} is set in {where} too")
            seen[f"docker:{scope}"] = file
            self.docker[scope] = Namespace.parse(value, f"{file}: docker.{scope}")

    def _entries(self, image: ImageScope) -> list[Namespace]:
        """The entries that apply to ``image``, most specific first."""
        found = [self.docker[s] for s in (image.identity, *image.namespaces) if s in self.docker]
        return found + ([self.default] if self.default is not None else [])

    def lookaside(self, image: ImageScope) -> str:
        """The base URL of the image's simple signatures."""
        for entry in self._entries(image):
            if entry.lookaside:
                return entry.lookaside
        return builtin_lookaside()

    def use_sigstore_attachments(self, image: ImageScope) -> bool:
        for entry in self._entries(image):
            if entry.use_attachments is not None:
                return entry.use_attachments
        return False


def _read_yaml(file: str) -> dict[str, Any]:
    import yaml

    from hostjob.images.trust.jsonfields import read

    data = read(file, FILE_LIMIT, "registries.d")
    try:
        parsed = yaml.safe_load(data)
    except yaml.YAMLError as err:
        raise PolicyError(f"{file}: not valid YAML: {' '.join(str(err).split())}") from err
    if parsed is None:
        return {}
    if type(parsed) is not dict:
        raise PolicyError(f"{file}: expected a mapping at the top")
    return parsed
