"""Where a registry's credentials come from, and keeping them out of argv.

``--creds USER:PASSWORD`` or ``--creds -`` (that line read from stdin) first; else the
``auths`` of the first auth file that has an entry for the image, in podman's order
(containers-auth.json(5)): the one file ``--authfile`` names, else the one
``$REGISTRY_AUTH_FILE`` names, else ``$XDG_RUNTIME_DIR/containers/auth.json``
(``/run/containers/$UID/auth.json`` without it),
``$XDG_CONFIG_HOME/containers/auth.json`` (``~/.config``), the docker ``config.json``
(``$DOCKER_CONFIG``, ``~/.docker``) and the legacy ``~/.dockercfg``.

An entry holds a base64 ``auth`` or ``username``/``password``. Its key is a registry
(``quay.io``; a key with a scheme is cut to its host, as ``docker login`` wrote
``https://index.docker.io/v1/``) or a namespace of one (``quay.io/org``,
``quay.io/org/app``): the most specific key that contains the image wins, in each file.
Credential helpers (``credHelpers``, ``credsStore``) are not run.

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

DOCKER_HUB = "index.docker.io"  # the key docker login files Docker Hub under
_DOCKER_HUB_NAMES = ("docker.io", "registry-1.docker.io", DOCKER_HUB)


def _normalize_registry(key: str) -> str:
    return DOCKER_HUB if key in _DOCKER_HUB_NAMES else key


def normalize_key(key: str, legacy: bool = False) -> str:
    """An auth file's key as it is matched: ``https://host:port/v2/`` -> ``host:port``;
    a key without a scheme keeps its namespace (``quay.io/org``), but in the legacy
    ``.dockercfg``; Docker Hub's names are one."""
    key = key.strip()
    stripped = key.removeprefix("http://").removeprefix("https://")
    if legacy or stripped != key:
        stripped = stripped.split("/", 1)[0]
    return _normalize_registry(stripped)


def auth_files(authfile: str | None = None) -> list[tuple[str, bool]]:
    """Where credentials are looked for, in order: ``(path, legacy format)``."""
    given = authfile or os.environ.get("REGISTRY_AUTH_FILE")
    if given:
        return [(given, False)]
    home = os.path.expanduser("~")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    runtime_dir = (
        os.path.join(runtime, "containers") if runtime else f"/run/containers/{os.getuid()}"
    )
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    docker_dir = os.environ.get("DOCKER_CONFIG") or os.path.join(home, ".docker")
    return [
        (os.path.join(runtime_dir, "auth.json"), False),
        (os.path.join(config_home, "containers", "auth.json"), False),
        (os.path.join(docker_dir, "config.json"), False),
        (os.path.join(home, ".dockercfg"), True),
    ]


def load_auths(path: str, legacy: bool = False) -> dict[str, tuple[str, str]]:
    """The entries of an auth file (its ``auths``; the whole file for the legacy
    format): normalized key -> ``(user, password)``."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(16 << 20))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise RegistryError(f"cannot read credentials from {path}: {err}") from err
    auths = data if legacy else data.get("auths") if type(data) is dict else None
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
            out.setdefault(normalize_key(key, legacy), (user, password))
    return out


def lookup_keys(domain: str, repository: str | None = None) -> list[str]:
    """The keys an image's credentials may be filed under, most specific first:
    ``host/org/app``, ``host/org``, ``host``."""
    keys = []
    name = f"{domain}/{repository}" if repository else domain
    while True:
        keys.append(name)
        if "/" not in name:
            break
        name = name.rpartition("/")[0]
    keys.append(_normalize_registry(domain))
    return keys


def find_credentials(
    domain: str, authfile: str | None = None, repository: str | None = None
) -> tuple[str, str] | None:
    """Credentials for an image of a registry domain (``docker.io``, ``host:5000``)
    and ``repository`` (``library/busybox``): from ``authfile``, else from the first
    of the usual auth files that has an entry for it."""
    for path, legacy in auth_files(authfile):
        auths = load_auths(path, legacy)
        for key in [domain] if legacy else lookup_keys(domain, repository):
            found = auths.get(_normalize_registry(key) if legacy else key)
            if found is not None:
                return found
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
