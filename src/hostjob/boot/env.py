"""The environment for the runtime path, without ``os`` (why: ``hostjob.boot.paths``).

``posix.environ`` is the very dict (of bytes) that ``os.environ`` wraps, so a change made
through ``os.environ`` (a library user's, a test's ``monkeypatch.setenv``) shows here too.
"""

from __future__ import annotations

import posix
import sys

_ENCODING = sys.getfilesystemencoding()


def getenv(name: str, default: str | None = None) -> str | None:
    """``os.getenv(name, default)``."""
    value = posix.environ.get(name.encode(_ENCODING, "surrogateescape"))
    return default if value is None else value.decode(_ENCODING, "surrogateescape")


def environ_copy() -> dict[str, str]:
    """A copy of ``os.environ`` as a plain dict."""
    return {
        key.decode(_ENCODING, "surrogateescape"): value.decode(_ENCODING, "surrogateescape")
        for key, value in posix.environ.items()
    }


def popenv(name: str) -> str | None:
    """``os.environ.pop(name, None)``: gone from this process's environment and from what
    its children inherit."""
    key = name.encode(_ENCODING, "surrogateescape")
    value = posix.environ.pop(key, None)
    if value is None:
        return None
    posix.unsetenv(key)
    return value.decode(_ENCODING, "surrogateescape")
