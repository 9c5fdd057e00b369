"""Where a registry's credentials come from.

``--creds USER:PASSWORD``, else the ``auths`` of the first auth file found: the
containers ``auth.json`` (``$REGISTRY_AUTH_FILE``, ``$XDG_RUNTIME_DIR/containers``),
then the docker ``config.json`` (``$DOCKER_CONFIG``, ``~/.docker``), or the one file
``--authfile`` names. An entry holds a base64 ``auth`` or ``username``/``password``;
its key may carry a scheme and a path (``https://index.docker.io/v1/``).
"""

from __future__ import annotations

import base64
import json
import os

from hostjob.errors import RegistryError

DOCKER_HUB_KEYS = (
    "https://index.docker.io/v1/",
    "index.docker.io",
    "docker.io",
    "registry-1.docker.io",
)


def _registry_key(key: str) -> str:
    """``https://host:port/v2/`` -> ``host:port``."""
    key = key.strip()
    for prefix in ("https://", "http://"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key.split("/", 1)[0]


def config_paths() -> list[str]:
    """Where credentials are looked for, in order."""
    paths = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        paths.append(os.environ["REGISTRY_AUTH_FILE"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        paths.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "containers", "auth.json"))
    docker_dir = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    paths.append(os.path.join(docker_dir, "config.json"))
    return paths


def load_auths(path: str) -> dict[str, tuple[str, str]]:
    """The ``auths`` of a docker ``config.json``/containers ``auth.json``: host -> creds."""
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise RegistryError(f"cannot read credentials from {path}: {err}") from err
    auths = data.get("auths") if type(data) is dict else None
    out: dict[str, tuple[str, str]] = {}
    if type(auths) is not dict:
        return out
    for key, entry in auths.items():
        if type(entry) is not dict:
            continue
        user, password = entry.get("username"), entry.get("password")
        encoded = entry.get("auth")
        if type(encoded) is str and encoded:
            try:
                decoded = base64.b64decode(encoded, validate=False).decode()
            except (ValueError, UnicodeDecodeError) as err:
                raise RegistryError(f"{path}: auths.{key}.auth is not base64 of user:pass") from err
            user, sep, password = decoded.partition(":")
            if not sep:
                raise RegistryError(f"{path}: auths.{key}.auth is not base64 of user:pass")
        if type(user) is str and type(password) is str and user:
            out[_registry_key(key)] = (user, password)
    return out


def find_credentials(domain: str, docker_config: str | None = None) -> tuple[str, str] | None:
    """Credentials for a registry domain (``docker.io``, ``host:5000``) from config files."""
    keys = [domain]
    if domain in DOCKER_HUB_KEYS:
        keys = [_registry_key(k) for k in DOCKER_HUB_KEYS]
    for path in [docker_config] if docker_config else config_paths():
        auths = load_auths(path)
        for key in keys:
            if key in auths:
                return auths[key]
    return None


def parse_creds(creds: str) -> tuple[str, str]:
    user, sep, password = creds.partition(":")
    if not sep or not user:
        raise RegistryError("credentials must be given as USER:PASSWORD")
    return user, password
