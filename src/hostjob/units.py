"""Human units on the command line: sizes (``512m``, ``1.5G``) and Go durations
(``5s``, ``1m30s``, ``250ms``), as runc, docker and podman read them."""

from __future__ import annotations

from hostjob.errors import InvalidArgument

_SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_DURATION_UNITS = (
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
)


def parse_size(text: str, what: str = "size") -> int:
    """Bytes from ``1024``, ``512k``, ``64m``, ``1.5g``, ``2GB`` (binary multiples)."""
    value = text.strip().lower()
    if value.endswith("b"):  # 2gb, 512b
        value = value[:-1]
    suffix = value[-1:] if value[-1:].isalpha() else ""
    number = value[: len(value) - len(suffix)]
    try:
        amount = float(number)
    except ValueError:
        raise InvalidArgument(f"invalid {what} {text!r} (use e.g. 512m or 2g)") from None
    if suffix not in _SIZE_SUFFIXES or amount < 0:
        raise InvalidArgument(f"invalid {what} {text!r} (use e.g. 512m or 2g)")
    return int(amount * _SIZE_SUFFIXES[suffix])


def parse_duration(text: str) -> float:
    """Seconds from a Go duration (``5s``, ``1m30s``, ``250ms``; a bare number is seconds)."""
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    total = 0.0
    rest = value
    if not rest:
        raise InvalidArgument(f"invalid duration {text!r}")
    while rest:
        digits = 0
        while digits < len(rest) and (rest[digits].isdigit() or rest[digits] == "."):
            digits += 1
        if digits == 0:
            raise InvalidArgument(f"invalid duration {text!r} (use e.g. 5s, 1m30s, 250ms)")
        number = float(rest[:digits])
        rest = rest[digits:]
        for unit, scale in sorted(_DURATION_UNITS, key=lambda u: -len(u[0])):
            if rest.startswith(unit):
                total += number * scale
                rest = rest[len(unit) :]
                break
        else:
            raise InvalidArgument(f"invalid duration {text!r} (use e.g. 5s, 1m30s, 250ms)")
    return total
