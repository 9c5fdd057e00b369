"""How hostjob reads and writes quantities: user and group IDs, sizes (``512m``,
``1.5G`` on the command line; ``5.6 MB`` in tables), Go durations (``5s``, ``1m30s``,
``250ms``), as runc, docker and podman read and print them, and RFC 3339 times (state,
logs, image records).

Light (``time`` only): the runtime path uses it.
"""

from __future__ import annotations

import time

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


# uid_t's largest value, (uid_t)-1, means "unchanged" to setuid: it is no one's ID.
MAX_ID = 2**32 - 2


def parse_id(text: str) -> int | None:
    """A uid or gid written as a number (``"1000"``), else None: a name, or text that
    is no ID at all (``"²"`` is a digit to ``str.isdigit``, not to ``int``; ``"-1"``,
    ``"99999999999"``)."""
    if not text.isascii() or not text.isdigit() or len(text) > 10 or int(text) > MAX_ID:
        return None
    return int(text)


def parse_size(text: str, what: str = "size") -> int:
    """Bytes from ``1024``, ``512k``, ``64m``, ``1.5g``, ``2GB`` (binary multiples)."""
    value = text.strip().lower()
    if value.endswith("b"):  # 2gb, 512b
        value = value[:-1]
    suffix = value[-1:] if value[-1:].isalpha() else ""
    number = value[: len(value) - len(suffix)]
    try:
        amount = float(number)
    except ValueError as err:
        raise InvalidArgument(f"invalid {what} {text!r} (use e.g. 512m or 2g)") from err
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
        try:
            number = float(rest[:digits])
        except ValueError as err:  # 1.2.3s
            raise InvalidArgument(f"invalid duration {text!r} (use e.g. 5s, 1m30s, 250ms)") from err
        rest = rest[digits:]
        for unit, scale in sorted(_DURATION_UNITS, key=lambda u: -len(u[0])):
            if rest.startswith(unit):
                total += number * scale
                rest = rest[len(unit) :]
                break
        else:
            raise InvalidArgument(f"invalid duration {text!r} (use e.g. 5s, 1m30s, 250ms)")
    return total


def human_size(size: int | None, *, binary: bool = False) -> str:
    """Bytes the way docker and podman print them: ``5.6 MB`` (SI units: image sizes),
    or with ``binary`` ``5.6MiB`` (powers of 1024: memory, as ``docker stats``);
    ``-`` for None."""
    if size is None:
        return "-"
    value = float(size)
    if binary:
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if value < 1024 or unit == "TiB":
                return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
            value /= 1024
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            if unit == "B" or value >= 100:
                return f"{value:.0f} {unit}"
            return f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def rfc3339(epoch: float | None = None, *, local: bool = False) -> str:
    """Go's ``time.RFC3339`` (``2006-01-02T15:04:05Z07:00``) of ``epoch`` (default:
    now), in UTC (``...Z``) or, with ``local``, in local time with its offset (what
    logrus writes in runc's logs)."""
    if not local:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    t = time.localtime(epoch)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", t)
    offset = t.tm_gmtoff or 0
    if offset == 0:
        return stamp + "Z"
    sign = "+" if offset > 0 else "-"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{stamp}{sign}{hours:02d}:{minutes:02d}"


def rfc3339_nano(ns: int | None = None) -> str:
    """UTC with nine fraction digits (``...05.123456789Z``) of ``ns`` nanoseconds since
    the epoch (default: now): a container's ``created`` in ``state``."""
    if ns is None:
        ns = time.time_ns()
    seconds, fraction = divmod(ns, 1_000_000_000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{fraction:09d}Z"


def parse_rfc3339(text: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``Z`` or an offset; any fraction
    of a second is dropped); None for anything else."""
    ns = parse_rfc3339_ns(text)
    return None if ns is None else float(ns // 1_000_000_000)


def parse_rfc3339_ns(text: str | None) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 time (``Z`` or an offset, with any
    fraction of a second up to nanoseconds); None for anything else."""
    if not text or len(text) < 19 or text[10] not in "Tt ":
        return None
    spans = ((0, 4), (5, 7), (8, 10), (11, 13), (14, 16), (17, 19))
    if (text[4], text[7], text[13], text[16]) != ("-", "-", ":", ":") or not all(
        text[a:b].isascii() and text[a:b].isdigit() for a, b in spans
    ):
        return None
    year, month, day, hour, minute, second = (int(text[a:b]) for a, b in spans)
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    month_days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    if not (1 <= month <= 12 and 1 <= day <= month_days[month - 1]):
        return None
    if hour > 23 or minute > 59 or second > 60:
        return None
    seconds = _days_since_epoch(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    fraction = 0
    rest = text[19:]
    if rest.startswith("."):  # fractional seconds: nanoseconds kept, finer digits dropped
        digits = rest[1:]
        end = len(digits) - len(digits.lstrip("0123456789"))
        if end == 0 or not digits[:end].isascii():
            return None
        fraction = int(digits[: min(end, 9)].ljust(9, "0"))
        rest = digits[end:]
    if rest not in ("Z", "z", ""):
        hh, mm = rest[1:3], rest[4:6]
        # ASCII digits: isdigit() takes "²", which int() refuses.
        digits_ok = (hh + mm).isdigit() and (hh + mm).isascii()
        if not (len(rest) == 6 and rest[0] in "+-" and rest[3] == ":" and digits_ok):
            return None
        offset = int(hh) * 3600 + int(mm) * 60
        seconds = seconds - offset if rest[0] == "+" else seconds + offset
    return seconds * 1_000_000_000 + fraction


def parse_since(text: str, now_ns: int | None = None) -> int:
    """``--since``: nanoseconds since the epoch of a Go duration ago (``10m``,
    ``1h30m``, ``90s``), an RFC 3339 time (``2026-12-01T10:00:00Z``,
    ``...05.5+01:00``) or Unix seconds (``1764583200``, ``1764583200.25``: a bare
    number is a time, as podman reads it, never a duration)."""
    value = text.strip()
    if now_ns is None:
        now_ns = time.time_ns()
    stamp = parse_rfc3339_ns(value)
    if stamp is not None:
        return stamp
    whole, dot, part = value.partition(".")
    if whole.isascii() and whole.isdigit() and (not dot or (part.isascii() and part.isdigit())):
        return int(whole) * 1_000_000_000 + int(part[:9].ljust(9, "0") if part else 0)
    try:
        ago = parse_duration(value)
    except InvalidArgument as err:
        raise InvalidArgument(
            f"invalid time {text!r} (use a duration such as 10m, an RFC 3339 time or Unix seconds)"
        ) from err
    if ago < 0:
        raise InvalidArgument(f"invalid time {text!r}: a negative duration")
    return now_ns - int(ago * 1_000_000_000)


def _days_since_epoch(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's
    ``days_from_civil``: plain arithmetic, no ``calendar``/``datetime`` import)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468
