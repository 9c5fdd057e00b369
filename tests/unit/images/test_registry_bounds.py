"""The registry client's bounds, without a network: bounded body reads and the stall
deadline of a connection (``remotes/transport.py``, ``remotes/stall.py``)."""

from __future__ import annotations

import time

import httpcore
import httpx
import pytest

from hostjob.images.errors import RegistryStalled
from hostjob.images.remotes import stall
from hostjob.images.remotes.transport import read_at_most, registry_error


class Trickle(httpcore.NetworkStream):
    """A stream that gives one byte per read, ``pause`` seconds apart."""

    def __init__(self, pause: float) -> None:
        self.pause = pause
        self.written = 0
        self.timeouts: list[float | None] = []

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.timeouts.append(timeout)
        time.sleep(self.pause)
        return b"x"

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.timeouts.append(timeout)
        self.written += len(buffer)

    def close(self) -> None:
        pass


def chunks(*parts: bytes) -> httpx.Response:
    return httpx.Response(404, content=iter(parts))


def test_read_at_most_stops_at_the_limit() -> None:
    assert read_at_most(chunks(b"ab", b"cd"), 4) == b"abcd"
    taken = []

    def endless() -> object:
        while True:
            taken.append(1)
            yield b"x" * 1000

    assert read_at_most(httpx.Response(200, content=endless()), 10_000) is None
    assert len(taken) == 11  # the read stopped once past the limit


def test_an_error_body_over_its_limit_gives_the_status_alone() -> None:
    body = b'{"errors":[{"code":"NAME_UNKNOWN","message":"no such repo"}]}'
    assert str(registry_error(chunks(body), "r/x")) == "r/x: HTTP 404 (NAME_UNKNOWN: no such repo)"
    huge = chunks(body[:-1], b" " * (64 << 10), b"}")
    assert str(registry_error(huge, "r/x")) == "r/x: HTTP 404"


def test_a_transient_answers_body_is_not_read() -> None:
    seen = []

    def body() -> object:
        seen.append(1)
        yield b'{"errors":[{"code":"X","message":"y"}]}'

    assert str(registry_error(httpx.Response(503, content=body()), "r")) == "r: HTTP 503"
    assert seen == []


def test_a_trickle_stalls_within_the_limit() -> None:
    inner = Trickle(0.01)
    stream = stall.WatchedStream(inner, stall.Watch("registry.example:443", 0.3))
    started = time.monotonic()
    with pytest.raises(RegistryStalled, match=r"^registry.example:443: no progress for 0.3s"):
        while True:
            stream.read(65536, 60.0)
    assert time.monotonic() - started < 1.0
    assert all(t is not None and t <= 0.3 for t in inner.timeouts)  # never the 60 s asked


def test_progress_and_a_new_request_move_the_deadline_on(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(stall.time, "monotonic", lambda: now[0])
    watch = stall.Watch("h:1", 10.0)
    stream = stall.WatchedStream(Trickle(0), watch)
    now[0] = 109.0
    watch.count(stall.PROGRESS - 1)  # not quite enough
    assert watch.mark == 100.0
    watch.count(1)
    assert watch.mark == 109.0
    now[0] = 118.0
    stream.read(1)  # a response's byte
    now[0] = 118.5
    stream.write(b"GET / HTTP/1.1\r\n\r\n")  # the next request: our turn, a fresh deadline
    assert watch.mark == 118.5
    now[0] = 128.6
    with pytest.raises(RegistryStalled):
        stream.read(1)
