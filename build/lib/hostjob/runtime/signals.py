"""Signals on the runtime path: ``sig`` and the names ``kill`` accepts.

``sig`` is the C module underneath ``signal``: the same functions and numbers
without the IntEnum wrappers, whose ``enum`` import costs ~3 ms on every
command. ``parse_signal`` reads ``9``, ``KILL``, ``SIGKILL``, ``SIGRTMIN+3``.
"""

from __future__ import annotations

from hostjob.errors import InvalidArgument

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as sig
else:
    import _signal as sig

__all__ = ["parse_signal", "sig"]


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
    if not 0 < number <= sig.SIGRTMAX:
        raise InvalidArgument(f"invalid signal number {number}")
    return number


def _named(name: str) -> int | None:
    for base, sign in (("SIGRTMIN", 1), ("SIGRTMAX", -1)):
        if name == base:
            return int(getattr(sig, base))
        if name.startswith(base + ("+" if sign > 0 else "-")):
            offset = name[len(base) + 1 :]
            if offset.isdigit():
                return int(getattr(sig, base)) + sign * int(offset)
            return None
    if name.startswith("SIG_"):
        return None
    value = getattr(sig, name, None)
    return int(value) if isinstance(value, int) else None
