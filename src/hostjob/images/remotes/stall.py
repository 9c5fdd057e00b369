"""The stall deadline: a connection that makes no progress for ``limit`` seconds fails.

httpx's timeouts bound each socket operation, so a registry that sends one byte a
second (or accepts one) never trips them and holds a pull for ever. Here every
connection keeps a deadline instead: it moves on when ``PROGRESS`` bytes have gone
either way since the last mark, or when a new request starts (our turn to talk);
each read, write, TLS handshake and connect is given at most the time left, and
when that runs out the operation fails with ``RegistryStalled``, naming the host of
the connection (the registry, its token realm or the blob storage it redirected
to). It is a network backend under httpcore's pool, so it sees every byte, the
headers' too; ``WatchedTransport`` is httpx's transport over such a pool.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from hostjob.images.errors import RegistryError, RegistryStalled

if TYPE_CHECKING:
    import ssl
    from collections.abc import Iterable

PROGRESS = 64 << 10  # bytes that count as progress
PIECE = 16 << 10  # a write is sent in pieces this big, each given the time left


class Watch:
    """One connection's deadline."""

    __slots__ = ("host", "limit", "mark", "moved", "reading")

    def __init__(self, host: str, limit: float) -> None:
        self.host = host
        self.limit = limit
        self.mark = time.monotonic()
        self.moved = 0
        self.reading = False

    def time_left(self, wanted: float | None) -> tuple[float, bool]:
        """``(timeout for the next operation, whether running out means a stall)``."""
        left = self.mark + self.limit - time.monotonic()
        if left <= 0:
            raise self.stalled()
        if wanted is not None and wanted < left:
            return wanted, False
        return left, True

    def count(self, size: int) -> None:
        self.moved += size
        if self.moved >= PROGRESS:
            self.restart()

    def restart(self) -> None:
        self.mark = time.monotonic()
        self.moved = 0

    def stalled(self) -> RegistryStalled:
        return RegistryStalled(
            f"{self.host}: no progress for {self.limit:g}s (less than {PROGRESS >> 10} KiB"
            " moved): the registry stalls; --stall-timeout sets how long to wait"
        )


class WatchedStream(httpcore.NetworkStream):
    """A network stream whose every operation keeps to its connection's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, watch: Watch) -> None:
        self.inner = inner
        self.watch = watch

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        watch = self.watch
        left, stalls = watch.time_left(timeout)
        try:
            data = self.inner.read(max_bytes, left)
        except httpcore.ReadTimeout as err:
            if stalls:
                raise watch.stalled() from err
            raise
        watch.reading = True
        watch.count(len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        watch = self.watch
        if watch.reading:  # a new request on a kept-alive connection: our turn
            watch.reading = False
            watch.restart()
        for start in range(0, len(buffer), PIECE):
            piece = buffer[start : start + PIECE]
            left, stalls = watch.time_left(timeout)
            try:
                self.inner.write(piece, left)
            except httpcore.WriteTimeout as err:
                if stalls:
                    raise watch.stalled() from err
                raise
            watch.count(len(piece))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # Python bounds a whole TLS handshake by the socket's timeout, not each read.
        left, stalls = self.watch.time_left(timeout)
        try:
            inner = self.inner.start_tls(ssl_context, server_hostname, left)
        except httpcore.ConnectTimeout as err:
            if stalls:
                raise self.watch.stalled() from err
            raise
        return WatchedStream(inner, self.watch)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class WatchedBackend(httpcore.NetworkBackend):
    """httpcore's network backend, each connection with a ``Watch`` of ``limit`` s."""

    def __init__(self, inner: httpcore.NetworkBackend, limit: float) -> None:
        self.inner = inner
        self.limit = limit

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        watch = Watch(f"{host}:{port}", self.limit)
        left, stalls = watch.time_left(timeout)
        try:
            stream = self.inner.connect_tcp(host, port, left, local_address, socket_options)
        except httpcore.ConnectTimeout as err:
            if stalls:
                raise watch.stalled() from err
            raise
        return WatchedStream(stream, watch)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        watch = Watch(path, self.limit)
        stream = self.inner.connect_unix_socket(path, watch.time_left(timeout)[0], socket_options)
        return WatchedStream(stream, watch)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class WatchedTransport(httpx.HTTPTransport):
    """httpx's transport, over an httpcore pool (direct, or through an HTTP proxy)
    whose connections keep the stall deadline. httpx takes no network backend, so
    the pool it would make is made here instead, as it makes it."""

    def __init__(self, verify: bool, stall: float, proxy: str | None = None) -> None:
        super().__init__(verify=verify)
        ssl_context = httpx.create_ssl_context(verify=verify)
        backend = WatchedBackend(httpcore.SyncBackend(), stall)
        if proxy is None:
            self._pool = httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=backend)
            return
        settings = httpx.Proxy(proxy)
        if settings.url.scheme not in ("http", "https"):
            raise RegistryError(f"proxy {proxy}: only an http:// or https:// proxy is supported")
        self._pool = httpcore.HTTPProxy(
            proxy_url=httpcore.URL(
                scheme=settings.url.raw_scheme,
                host=settings.url.raw_host,
                port=settings.url.port,
                target=settings.url.raw_path,
            ),
            proxy_auth=settings.raw_auth,
            proxy_headers=settings.headers.raw,
            ssl_context=ssl_context,
            proxy_ssl_context=settings.ssl_context,
            network_backend=backend,
        )
