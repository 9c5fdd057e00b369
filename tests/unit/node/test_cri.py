"""The installer's two CRI calls, gRPC over HTTP/2 written out: the request a client sends,
the answer's frames read back, the protobuf fields decoded, every read bounded. (A real
containerd answers them in tests/integration/test_node_install.py.)"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from hostjob.node import cri


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


def _serve(path: Path, frames: list[bytes]) -> threading.Thread:
    """A unix socket at ``path`` that reads the client's request, then sends ``frames``."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        with conn, server:
            conn.recv(65536)
            for chunk in frames:
                conn.sendall(chunk)
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(65536):  # the client's acknowledgements, until it closes
                pass

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


def _grpc(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def test_the_request_is_a_preface_settings_headers_and_one_message() -> None:
    sent = cri.request("Version", b"\x0a\x01x")
    assert sent.startswith(cri.PREFACE)
    rest = sent[len(cri.PREFACE) :]
    kinds = []
    while rest:
        length = int.from_bytes(rest[:3], "big")
        kinds.append((rest[3], rest[4]))
        payload, rest = rest[9 : 9 + length], rest[9 + length :]
    assert kinds == [
        (cri.SETTINGS, 0),
        (cri.HEADERS, cri.END_HEADERS),
        (cri.DATA, cri.END_STREAM),
    ]
    assert payload == _grpc(b"\x0a\x01x")
    assert b"/runtime.v1.RuntimeService/Version" in sent


def test_version_and_handlers_are_read_from_the_answers(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    answer = _field(2, b"containerd") + _field(3, b"1.6.20~ds1")
    frames = [
        cri.frame(cri.SETTINGS, 0, 0),
        cri.frame(cri.HEADERS, cri.END_HEADERS, 1, b"\x88"),
        cri.frame(cri.DATA, 0, 1, _grpc(answer)[:4]),  # a message over two frames
        cri.frame(cri.DATA, 0, 1, _grpc(answer)[4:]),
        cri.frame(cri.HEADERS, cri.END_HEADERS | cri.END_STREAM, 1, b"\x00"),
    ]
    thread = _serve(path, frames)
    assert cri.version(str(path)) == ("containerd", "1.6.20~ds1")
    thread.join()
    path.unlink()
    config = json.dumps({"containerd": {"runtimes": {"runc": {}, "hostjob": {}}}}).encode()
    entry = _field(1, b"config") + bytes([0x12, len(config) & 0x7F | 0x80, len(config) >> 7])
    entry += config
    status = _field(1, b"\x08\x01") + bytes([0x12, len(entry) & 0x7F | 0x80, len(entry) >> 7])
    status += entry
    thread = _serve(path, [cri.frame(cri.DATA, cri.END_STREAM, 1, _grpc(status))])
    assert cri.runtime_handlers(str(path)) == {"runc", "hostjob"}
    thread.join()


@pytest.mark.parametrize(
    ("frames", "says"),
    [
        ([cri.frame(cri.GOAWAY, 0, 0, bytes(8))], "refused Version"),
        ([cri.frame(cri.HEADERS, cri.END_HEADERS | cri.END_STREAM, 1, b"")], "with an error"),
        ([cri.frame(cri.DATA, 0, 1, b"\x00\x00\x00")], "closed the connection"),
        ([(cri.MAX_RESPONSE + 1).to_bytes(3, "big") + bytes(6)], "larger than"),
    ],
)
def test_a_bad_answer_is_a_cri_error(tmp_path: Path, frames: list[bytes], says: str) -> None:
    path = tmp_path / "sock"
    thread = _serve(path, frames)
    with pytest.raises(cri.CriError, match=says):
        cri.version(str(path))
    thread.join()


def test_no_socket_is_a_cri_error(tmp_path: Path) -> None:
    with pytest.raises(cri.CriError, match="did not answer Version"):
        cri.version(str(tmp_path / "absent"))


def test_protobuf_fields_are_decoded_and_bounded() -> None:
    message = b"\x08\x96\x01" + _field(2, b"ab") + b"\x1d" + bytes(4) + b"\x21" + bytes(8)
    assert cri.fields(message) == {1: [150], 2: [b"ab"]}
    with pytest.raises(cri.CriError, match="cut short"):
        cri.fields(b"\x08\x96")
    with pytest.raises(cri.CriError, match="wire type 3"):
        cri.fields(b"\x0b")
