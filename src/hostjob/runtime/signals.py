"""Signal names and numbers as ``kill`` accepts them: ``9``, ``KILL``, ``SIGKILL``,
``SIGRTMIN+3``."""

from __future__ import annotations

import signal

from hostjob.errors import InvalidArgument


def parse_signal(text: str | int) -> int:
    if isinstance(text, int):
        number = text
    elif text.isdigit():
        number = int(text)
    else:
        name = text.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        named = _named(name)
        if named is None:
            raise InvalidArgument(f"unknown signal {text!r}")
        number = named
    if not 0 < number <= signal.SIGRTMAX:
        raise InvalidArgument(f"invalid signal number {number}")
    return number


def _named(name: str) -> int | None:
    for base, sign in (("SIGRTMIN", 1), ("SIGRTMAX", -1)):
        if name == base:
            return int(getattr(signal, base))
        if name.startswith(base + ("+" if sign > 0 else "-")):
            offset = name[len(base) + 1 :]
            if offset.isdigit():
                return int(getattr(signal, base)) + sign * int(offset)
            return None
    if name.startswith("SIG_"):
        return None
    value = getattr(signal, name, None)
    return int(value) if isinstance(value, int) else None
