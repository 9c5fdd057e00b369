"""Where a registry's credentials come from, and keeping them out of argv.

``--creds USER:PASSWORD``, ``--creds -`` (that line read from stdin), else the
``auths`` of the first auth file found: the containers ``auth.json``
(``$REGISTRY_AUTH_FILE``, ``$XDG_RUNTIME_DIR/containers``), then the docker
``config.json`` (``$DOCKER_CONFIG``, ``~/.docker``), or the one file ``--authfile``
names. An entry holds a base64 ``auth`` or ``username``/``password``; its key may
carry a scheme and a path (``https://index.docker.io/v1/``).

A process's arguments are world-readable (``/proc/PID/cmdline``), so credentials
given as ``--creds USER:PASSWORD`` are overwritten in the process's own argument
memory as soon as the command line is parsed (``hide_from_cmdline``): the kernel
serves ``cmdline`` from that memory, and a process may write its own through
``/proc/self/mem`` without any capability (setproctitle does the same). Until then,
for the first milliseconds, they are visible: ``--creds -`` and ``--authfile`` never
are.
"""

from __future__ import annotations

import base64
import json
import os
from typing import TYPE_CHECKING

from hostjob import log
from hostjob.images.errors import RegistryError

if TYPE_CHECKING:
    from collections.abc import Callable

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


def find_credentials(domain: str, authfile: str | None = None) -> tuple[str, str] | None:
    """Credentials for a registry domain (``docker.io``, ``host:5000``) from ``authfile``,
    else from the first of the usual auth files that has them."""
    keys = [domain]
    if domain in DOCKER_HUB_KEYS:
        keys = [_registry_key(k) for k in DOCKER_HUB_KEYS]
    for path in [authfile] if authfile else config_paths():
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


CREDS_LINE_LIMIT = 4096
_CREDS_FLAGS = (b"--creds", b"-creds")
_HIDDEN = b"***"


def take_creds(value: str | None) -> tuple[str, str] | None:
    """``--creds``' value as the library takes it, ``(user, password)``: ``-`` is the
    line read from stdin; anything else is hidden from this process's command line
    first."""
    if value is None:
        return None
    if value == "-":
        return parse_creds(read_creds())
    if value and not hide_from_cmdline(value):
        log.warning(
            "--creds could not be hidden from /proc/PID/cmdline, where every local user"
            " reads it: use --creds - (stdin) or --authfile"
        )
    return parse_creds(value)


def read_creds(fd: int = 0) -> str:
    """One ``USER:PASSWORD`` line from ``fd`` (``--creds -``), read a byte at a time so
    that nothing after the line is taken (``run`` leaves the rest of stdin to the
    container); on a terminal, without echo."""
    echo = _echo_off(fd)
    data = bytearray()
    try:
        while True:
            try:
                byte = os.read(fd, 1)
            except OSError as err:
                raise RegistryError(f"--creds -: cannot read stdin: {err.strerror}") from err
            if not byte or byte == b"\n":
                break
            data += byte
            if len(data) > CREDS_LINE_LIMIT:
                raise RegistryError("--creds -: the line on stdin is longer than 4 KiB")
    finally:
        if echo is not None:
            echo()
    try:
        text = data.decode().removesuffix("\r")
    except UnicodeDecodeError as err:
        raise RegistryError("--creds -: the line on stdin is not UTF-8") from err
    if not text:
        raise RegistryError("--creds -: no USER:PASSWORD line on stdin")
    parse_creds(text)
    return text


def _echo_off(fd: int) -> Callable[[], None] | None:
    """Turn a terminal's echo off; returns how to turn it back on (None: not a tty)."""
    if not os.isatty(fd):
        return None
    import termios

    old = termios.tcgetattr(fd)
    new = list(old)
    new[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, new)
    return lambda: termios.tcsetattr(fd, termios.TCSANOW, old)


def hide_from_cmdline(secret: str) -> bool:
    """Overwrite ``--creds SECRET`` (``--creds=SECRET``) in this process's argument
    memory with ``***``, the words after it moved up and the space left zeroed;
    True when ``/proc/self/cmdline`` no longer holds the secret."""
    value = secret.encode()
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # Fields after the command name in parentheses: the 3rd field of stat is the
        # first here, so arg_start (48th) and arg_end (49th) are the 46th and 47th.
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[45]), int(fields[46])
        with open("/proc/self/cmdline", "rb") as f:
            before = f.read()
    except (OSError, ValueError, IndexError):
        return False
    if value not in before:
        return True
    words = before.split(b"\0")
    for i, word in enumerate(words):
        if i and words[i - 1] in _CREDS_FLAGS and word == value:
            words[i] = _HIDDEN
        for flag in _CREDS_FLAGS:
            if word == flag + b"=" + value:
                words[i] = flag + b"=" + _HIDDEN
    area = end - start
    rewritten = b"\0".join(words)[:area]
    if len(before) != area or value in rewritten:
        return False  # not the layout this expects (a process that set its title)
    try:
        fd = os.open("/proc/self/mem", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.pwrite(fd, rewritten.ljust(area, b"\0"), start)
        finally:
            os.close(fd)
        with open("/proc/self/cmdline", "rb") as f:
            return value not in f.read()
    except OSError:
        return False
