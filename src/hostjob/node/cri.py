"""The two CRI calls the node installer makes (``Version``, and ``Status`` with its
verbose information: the configuration containerd's CRI plugin runs with), written out:
gRPC over HTTP/2 on containerd's unix socket.

The installer image carries no gRPC library (grpcio alone is larger than hostjob), and
these two unary calls need little of the protocol: the connection preface, one stream
whose headers are literals (no Huffman code, no table), a request message, then the
response's DATA frames. A call succeeded when a whole response message came before the
stream ended; its headers and trailers are not decoded. Everything read is bounded.
"""

from __future__ import annotations

import socket
import time

from hostjob.errors import HostjobError

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
MAX_RESPONSE = 4 << 20  # a Status with its verbose configuration is tens of kB
SERVICE = "/runtime.v1.RuntimeService/"


class CriError(HostjobError):
    """The CRI did not answer, or answered with an error."""


def _integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer with an N-bit prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: str, value: str) -> bytes:
    """A header field as a literal without indexing, with a literal name."""
    raw_name, raw_value = name.encode(), value.encode()
    return b"\x00" + _integer(len(raw_name), 7) + raw_name + _integer(len(raw_value), 7) + raw_value


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def request(method: str, message: bytes) -> bytes:
    """What a client sends for one unary call on stream 1, after the preface."""
    headers = b"".join(
        _literal(name, value)
        for name, value in (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", SERVICE + method),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        )
    )
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    return (
        PREFACE
        + frame(SETTINGS, 0, 0)
        + frame(HEADERS, END_HEADERS, 1, headers)
        + frame(DATA, END_STREAM, 1, body)
    )


def call(path: str, method: str, message: bytes = b"", timeout: float = 5.0) -> bytes:
    """One unary call of the runtime service at the unix socket ``path``: the response
    message (protobuf bytes), or CriError."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall(request(method, message))
        return _response(sock, method)
    except OSError as err:
        raise CriError(f"the CRI at {path} did not answer {method}: {err.strerror or err}") from err
    finally:
        sock.close()


def _response(sock: socket.socket, method: str) -> bytes:
    buffer = b""
    data = bytearray()

    def read(count: int) -> bytes:
        nonlocal buffer
        while len(buffer) < count:
            chunk = sock.recv(65536)
            if not chunk:
                raise CriError(f"the CRI closed the connection before it answered {method}")
            buffer += chunk
        out, buffer = buffer[:count], buffer[count:]
        return out

    while True:
        head = read(9)
        length = int.from_bytes(head[:3], "big")
        kind, flags, stream = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        if length > MAX_RESPONSE or len(data) > MAX_RESPONSE:
            raise CriError(f"the CRI's answer to {method} is larger than the installer reads")
        payload = read(length)
        if kind == SETTINGS and not flags & ACK:
            sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY or (kind == RST_STREAM and stream == 1):
            raise CriError(f"the CRI refused {method} (HTTP/2 frame {kind})")
        elif kind == DATA and stream == 1:
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            data += payload
        if stream == 1 and kind in (DATA, HEADERS) and flags & END_STREAM:
            break
    if len(data) < 5 or int.from_bytes(data[1:5], "big") != len(data) - 5:
        raise CriError(f"the CRI answered {method} with an error")
    return bytes(data[5:])


def fields(message: bytes) -> dict[int, list[bytes | int]]:
    """A protobuf message's fields, by number: varints as ints, the length-delimited as
    bytes (the only wire types the answers read here use, with fixed ones skipped)."""
    out: dict[int, list[bytes | int]] = {}
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = message[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    try:
        while at < len(message):
            key = varint()
            number, wire = key >> 3, key & 7
            if wire == 0:
                out.setdefault(number, []).append(varint())
            elif wire == 2:
                size = varint()
                out.setdefault(number, []).append(message[at : at + size])
                at += size
            elif wire in (1, 5):
                at += 8 if wire == 1 else 4
            else:
                raise CriError(f"a CRI answer has protobuf wire type {wire}")
    except IndexError as err:
        raise CriError("a CRI answer is cut short") from err
    return out


def _text(values: list[bytes | int] | None) -> str:
    if not values or not isinstance(values[0], bytes):
        return ""
    return values[0].decode(errors="replace")


def version(path: str, timeout: float = 5.0) -> tuple[str, str]:
    """(runtime name, runtime version): ``containerd``, ``1.6.20~ds1`` or ``v2.0.4``."""
    answer = fields(call(path, "Version", b"", timeout))
    return _text(answer.get(2)), _text(answer.get(3))


def status_info(path: str, timeout: float = 5.0) -> dict[str, str]:
    """``Status`` with ``verbose``: its information map (containerd puts the CRI
    plugin's configuration, as JSON, under ``config``)."""
    answer = fields(call(path, "Status", b"\x08\x01", timeout))
    info = {}
    for entry in answer.get(2, []):
        if isinstance(entry, bytes):
            pair = fields(entry)
            info[_text(pair.get(1))] = _text(pair.get(2))
    return info


def runtime_handlers(path: str, timeout: float = 5.0) -> set[str]:
    """The runtime handlers the CRI serves now (from its verbose configuration)."""
    import json

    text = status_info(path, timeout).get("config", "")
    try:
        config = json.loads(text)
    except ValueError as err:
        raise CriError("the CRI's Status has no configuration to read the handlers from") from err
    containerd = config.get("containerd") if isinstance(config, dict) else None
    runtimes = containerd.get("runtimes") if isinstance(containerd, dict) else None
    return set(runtimes) if isinstance(runtimes, dict) else set()


def wait(path: str, ready: object, deadline: float) -> None:
    """Wait until ``ready(path)`` is true (a callable taking the socket path; CriError
    meanwhile is retried), or raise the last error at ``deadline`` (monotonic)."""
    assert callable(ready)
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if ready(path):
                return
            last = None
        except CriError as err:
            last = err
        time.sleep(0.5)
    if last is not None:
        raise CriError(f"{last} (waited until the deadline)") from last
    raise CriError(f"the CRI at {path} did not come to serve what was asked in time")
