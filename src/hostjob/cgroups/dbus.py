"""The few D-Bus calls hostjob makes (to systemd, for ``--systemd-cgroup``), written out.

A maintained client (jeepney) costs ~27 ms of imports (``typing``, ``enum``, ``re``,
``socket``) on every ``create`` of the systemd cgroup driver; this is the protocol's small
part that those calls need, on ``_socket``, the C module under ``socket``: a connection
(``EXTERNAL`` authentication), method calls and their replies, and the signals that
arrive meanwhile. Values are marshalled from their signature (``s``, ``b``, ``u``, ``t``,
``o``, ``g``, ``ay``, ``a(sv)``, structs and variants as ``(signature, value)`` pairs),
little-endian. Every answer read is bounded (``MAX_MESSAGE``).

``system_bus()`` connects to systemd's own socket (``/run/systemd/private``: root only,
no bus daemon needed, what ``systemctl`` uses as root) when it is there, else to the
system bus (``DBUS_SYSTEM_BUS_ADDRESS``, ``/run/dbus/system_bus_socket``).
"""

from __future__ import annotations

import posix
import struct

from hostjob.boot.env import getenv
from hostjob.errors import HostjobError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PRIVATE_SOCKET = "/run/systemd/private"
SYSTEM_BUS_SOCKET = "/run/dbus/system_bus_socket"
MAX_MESSAGE = 1 << 20  # no answer of what we ask is anywhere near this
TIMEOUT = 25.0  # seconds: D-Bus's own default for a method call

METHOD_CALL, METHOD_RETURN, ERROR, SIGNAL = 1, 2, 3, 4
_FIELD_PATH, _FIELD_INTERFACE, _FIELD_MEMBER, _FIELD_ERROR_NAME = 1, 2, 3, 4
_FIELD_REPLY_SERIAL, _FIELD_DESTINATION, _FIELD_SENDER, _FIELD_SIGNATURE = 5, 6, 7, 8
_NO_REPLY_EXPECTED = 0x1

_ALIGN = {"y": 1, "b": 4, "n": 2, "q": 2, "i": 4, "u": 4, "x": 8, "t": 8, "d": 8, "h": 4}
_ALIGN.update({"s": 4, "o": 4, "g": 1, "a": 4, "(": 8, "{": 8, "v": 1})
_FIXED = {"y": "B", "n": "h", "q": "H", "i": "i", "u": "I", "x": "q", "t": "Q", "d": "d", "h": "I"}


class DBusError(HostjobError):
    """An error answer (``name``: ``org.freedesktop.systemd1.NoSuchUnit``...), or a
    connection that failed or broke."""

    def __init__(self, message: str, name: str = "") -> None:
        super().__init__(message)
        self.name = name


# --- signatures ----------------------------------------------------------------------------


def split_signature(signature: str) -> list[str]:
    """``a(sv)sb`` -> ``["a(sv)", "s", "b"]``: the complete types of a signature."""
    out = []
    i = 0
    while i < len(signature):
        end = _type_end(signature, i)
        out.append(signature[i:end])
        i = end
    return out


def _type_end(signature: str, i: int) -> int:
    c = signature[i]
    if c == "a":
        return _type_end(signature, i + 1)
    if c in "({":
        close = ")" if c == "(" else "}"
        depth = 0
        for j in range(i, len(signature)):
            if signature[j] == c:
                depth += 1
            elif signature[j] == close:
                depth -= 1
                if depth == 0:
                    return j + 1
        raise DBusError(f"unbalanced signature {signature!r}")
    if c not in _ALIGN:
        raise DBusError(f"unknown D-Bus type {c!r} in {signature!r}")
    return i + 1


# --- marshalling ----------------------------------------------------------------------------


class _Writer:
    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = bytearray()

    def pad(self, alignment: int) -> None:
        self.data += b"\0" * (-len(self.data) % alignment)

    def put(self, signature: str, value: Any) -> None:
        c = signature[0]
        self.pad(_ALIGN[c])
        if c in _FIXED:
            self.data += struct.pack("<" + _FIXED[c], value)
        elif c == "b":
            self.data += struct.pack("<I", 1 if value else 0)
        elif c in "so":
            raw = value.encode()
            self.data += struct.pack("<I", len(raw)) + raw + b"\0"
        elif c == "g":
            raw = value.encode()
            self.data += struct.pack("<B", len(raw)) + raw + b"\0"
        elif c == "v":
            inner, inner_value = value
            self.put("g", inner)
            self.put(inner, inner_value)
        elif c == "a":
            element = signature[1:]
            at = len(self.data)
            self.data += b"\0\0\0\0"
            self.pad(_ALIGN[element[0]])
            start = len(self.data)
            if element == "y":
                self.data += bytes(value)
            else:
                items = value.items() if element[0] == "{" else value
                for item in items:
                    self.put(element, item)
            struct.pack_into("<I", self.data, at, len(self.data) - start)
        elif c in "({":
            for part, item in zip(split_signature(signature[1:-1]), value, strict=True):
                self.put(part, item)
        else:
            raise DBusError(f"cannot marshal D-Bus type {c!r}")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def align(self, alignment: int) -> None:
        self.pos += -self.pos % alignment

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise DBusError("a D-Bus message ends in the middle of a value")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def get(self, signature: str) -> Any:
        c = signature[0]
        self.align(_ALIGN[c])
        if c in _FIXED:
            fmt = "<" + _FIXED[c]
            return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        if c == "b":
            return struct.unpack("<I", self.take(4))[0] != 0
        if c in "so":
            (size,) = struct.unpack("<I", self.take(4))
            text = self.take(size).decode(errors="replace")
            self.take(1)
            return text
        if c == "g":
            size = self.take(1)[0]
            text = self.take(size).decode(errors="replace")
            self.take(1)
            return text
        if c == "v":
            inner = self.get("g")
            if len(split_signature(inner)) != 1:
                raise DBusError(f"a variant holds {inner!r}, not one type")
            return inner, self.get(inner)
        if c == "a":
            (size,) = struct.unpack("<I", self.take(4))
            element = signature[1:]
            self.align(_ALIGN[element[0]])
            end = self.pos + size
            if end > len(self.data):
                raise DBusError("a D-Bus array runs past its message")
            if element == "y":
                return self.take(size)
            items = []
            while self.pos < end:
                items.append(self.get(element))
            return dict(items) if element[0] == "{" else items
        if c in "({":
            return tuple(self.get(part) for part in split_signature(signature[1:-1]))
        raise DBusError(f"cannot read D-Bus type {c!r}")


def marshal_body(signature: str, args: tuple[Any, ...] | list[Any], start: int = 0) -> bytes:
    """``args`` marshalled by ``signature``, as a body that begins at offset ``start``
    (a body is aligned from the message's start: headers end on an 8-byte boundary)."""
    writer = _Writer()
    writer.data += b"\0" * start
    types = split_signature(signature)
    if len(types) != len(args):
        raise DBusError(f"{len(args)} arguments for the D-Bus signature {signature!r}")
    for kind, value in zip(types, args, strict=True):
        writer.put(kind, value)
    return bytes(writer.data[start:])


def unmarshal_body(signature: str, body: bytes) -> list[Any]:
    reader = _Reader(body)
    return [reader.get(kind) for kind in split_signature(signature)]


class Message:
    """A D-Bus message as sent or received."""

    __slots__ = ("body", "fields", "flags", "kind", "serial")

    def __init__(
        self, kind: int, serial: int, fields: dict[int, Any], body: list[Any], flags: int = 0
    ) -> None:
        self.kind = kind
        self.serial = serial
        self.fields = fields
        self.body = body
        self.flags = flags

    @property
    def member(self) -> str:
        return str(self.fields.get(_FIELD_MEMBER, ""))

    @property
    def interface(self) -> str:
        return str(self.fields.get(_FIELD_INTERFACE, ""))

    @property
    def reply_serial(self) -> int:
        return int(self.fields.get(_FIELD_REPLY_SERIAL, 0))

    @property
    def error_name(self) -> str:
        return str(self.fields.get(_FIELD_ERROR_NAME, ""))


_FIELD_TYPES = {
    _FIELD_PATH: "o",
    _FIELD_INTERFACE: "s",
    _FIELD_MEMBER: "s",
    _FIELD_ERROR_NAME: "s",
    _FIELD_REPLY_SERIAL: "u",
    _FIELD_DESTINATION: "s",
    _FIELD_SENDER: "s",
    _FIELD_SIGNATURE: "g",
}


def encode_call(
    serial: int,
    destination: str | None,
    path: str,
    interface: str,
    member: str,
    signature: str = "",
    args: tuple[Any, ...] | list[Any] = (),
    flags: int = 0,
) -> bytes:
    """A METHOD_CALL message."""
    fields: list[tuple[int, tuple[str, Any]]] = [
        (_FIELD_PATH, ("o", path)),
        (_FIELD_INTERFACE, ("s", interface)),
        (_FIELD_MEMBER, ("s", member)),
    ]
    if destination:
        fields.append((_FIELD_DESTINATION, ("s", destination)))
    if signature:
        fields.append((_FIELD_SIGNATURE, ("g", signature)))
    header = _Writer()
    header.data += struct.pack("<cBBBII", b"l", METHOD_CALL, flags, 1, 0, serial)
    header.put("a(yv)", fields)
    header.pad(8)
    body = marshal_body(signature, args, len(header.data))
    struct.pack_into("<I", header.data, 4, len(body))
    return bytes(header.data) + body


def decode(data: bytes) -> Message:
    """One whole message (``message_size`` says how long it is)."""
    if data[:1] != b"l":
        raise DBusError("a big-endian D-Bus message: not from this host's bus")
    kind, flags, _version, _size, serial = struct.unpack_from("<BBBII", data, 1)
    reader = _Reader(data, 12)
    fields = {code: value for code, (_sig, value) in reader.get("a(yv)")}
    reader.align(8)
    signature = str(fields.get(_FIELD_SIGNATURE, ""))
    body = unmarshal_body(signature, data[reader.pos :]) if signature else []
    return Message(kind, serial, fields, body, flags)


def message_size(head: bytes) -> int:
    """The whole length of a message from its first 16 bytes."""
    if head[:1] != b"l":
        raise DBusError("a big-endian D-Bus message: not from this host's bus")
    body_size, _serial, fields_size = struct.unpack_from("<III", head, 4)
    size: int = 16 + fields_size + (-(16 + fields_size) % 8) + body_size
    return size


# --- a connection ---------------------------------------------------------------------------


class Connection:
    """A connection to a bus (or to systemd's own socket, peer to peer)."""

    __slots__ = ("_buffer", "_serial", "peer_to_peer", "pending", "sock")

    def __init__(self, path: str, *, peer_to_peer: bool) -> None:
        import _socket

        self.peer_to_peer = peer_to_peer
        self._serial = 0
        self._buffer = b""
        self.pending: list[Message] = []  # signals read while waiting for a reply
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        try:
            self.sock.settimeout(TIMEOUT)
            self.sock.connect(path)
            self._authenticate()
            if not peer_to_peer:
                self.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                          "org.freedesktop.DBus", "Hello")  # fmt: skip
        except OSError as err:
            self.close()
            raise DBusError(f"cannot talk to D-Bus at {path}: {err.strerror or err}") from err
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _authenticate(self) -> None:
        # AUTH and BEGIN in one write, as sd-bus's own clients send them: systemd 252's
        # private socket left 2 to 8 of 12 connections unanswered (measured in the VM
        # lane) that waited for OK before they sent BEGIN.
        uid = str(posix.geteuid()).encode().hex()
        self.sock.sendall(b"\0AUTH EXTERNAL " + uid.encode() + b"\r\nBEGIN\r\n")
        line = self._line()
        if not line.startswith(b"OK "):
            raise DBusError(f"D-Bus refused the EXTERNAL authentication: {line[:200]!r}")

    def _line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            chunk = self.sock.recv(4096)
            if not chunk or len(self._buffer) > 4096:
                raise DBusError("D-Bus closed the connection during authentication")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line

    def _read(self) -> Message:
        while len(self._buffer) < 16:
            self._fill()
        size = message_size(self._buffer[:16])
        if size > MAX_MESSAGE:
            raise DBusError(f"a D-Bus message of {size} bytes: more than hostjob reads")
        while len(self._buffer) < size:
            self._fill()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return decode(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise DBusError("D-Bus closed the connection")
        self._buffer += chunk

    def call(
        self,
        destination: str,
        path: str,
        interface: str,
        member: str,
        signature: str = "",
        args: tuple[Any, ...] | list[Any] = (),
    ) -> list[Any]:
        """Call a method and wait for its answer: the reply's values, or DBusError."""
        self._serial += 1
        serial = self._serial
        dest = None if self.peer_to_peer else destination
        message = encode_call(serial, dest, path, interface, member, signature, args)
        try:
            self.sock.sendall(message)
            while True:
                answer = self._read()
                if answer.kind == SIGNAL:
                    self.pending.append(answer)
                    continue
                if answer.reply_serial != serial:
                    continue
                if answer.kind == ERROR:
                    text = answer.body[0] if answer.body and isinstance(answer.body[0], str) else ""
                    raise DBusError(f"{member}: {text or answer.error_name}", answer.error_name)
                return answer.body
        except OSError as err:
            raise DBusError(f"D-Bus call {member} failed: {err.strerror or err}") from err

    def wait_signal(self, interface: str, member: str, timeout: float = TIMEOUT) -> Message:
        """The next signal ``interface.member`` (one read during a call first)."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            for i, message in enumerate(self.pending):
                if message.interface == interface and message.member == member:
                    return self.pending.pop(i)
            self.pending.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise DBusError(f"no {member} from D-Bus within {timeout:g} s")
            self.sock.settimeout(left)
            try:
                message = self._read()
            except TimeoutError as err:
                raise DBusError(f"no {member} from D-Bus within {timeout:g} s") from err
            except OSError as err:
                raise DBusError(f"waiting for {member}: {err.strerror or err}") from err
            finally:
                self.sock.settimeout(TIMEOUT)
            if message.kind == SIGNAL:
                self.pending.append(message)


def system_bus() -> Connection:
    """A connection to systemd: its private socket as root, else the system bus."""
    if posix.geteuid() == 0:
        try:
            posix.stat(PRIVATE_SOCKET)
        except OSError:
            pass
        else:
            return Connection(PRIVATE_SOCKET, peer_to_peer=True)
    address = getenv("DBUS_SYSTEM_BUS_ADDRESS") or ""
    path = SYSTEM_BUS_SOCKET
    for part in address.split(";"):
        if part.startswith("unix:path="):
            path = part[len("unix:path=") :].split(",")[0]
            break
    return Connection(path, peer_to_peer=False)
