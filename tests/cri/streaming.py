"""A client of the Kubernetes streaming protocols over WebSocket, as kubectl speaks them to a
kubelet's streaming server -- here containerd's, whose URL the CRI's ``Exec``, ``Attach`` and
``PortForward`` return.

* **remotecommand** (exec, attach): subprotocol ``v5.channel.k8s.io`` or
  ``v4.channel.k8s.io`` (containerd 1.6 speaks v4, the newest it knows). Every binary message
  starts with its channel: stdin 0, stdout 1, stderr 2, error 3, resize 4; the server's first
  message is an empty one on the lowest channel it writes. At the end the server writes the
  command's status on the error channel -- a JSON ``metav1.Status``: ``Success``, or
  ``Failure`` with reason ``NonZeroExitCode`` and the exit code as the ``ExitCode`` cause --
  and closes. A resize is JSON ``{"Width": W, "Height": H}`` on channel 4. Only v5 can close
  stdin alone (message ``[255, 0]``).
* **port forwarding**: subprotocol ``v4.channel.k8s.io``, the ports in the ``port`` query
  parameter; per port a data channel (2n) and an error channel (2n+1), the first message on
  each being the port as two little-endian bytes. The server closes the data channel when the
  pod's end of the TCP connection closes.

The WebSocket layer is the ``websockets`` library's synchronous client.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Self

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

if TYPE_CHECKING:
    from collections.abc import Callable

STDIN, STDOUT, STDERR, ERROR, RESIZE = range(5)
STREAM_CLOSE = 255
REMOTECOMMAND_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
PORTFORWARD_PROTOCOLS = ("v4.channel.k8s.io",)
MAX_MESSAGE = 1 << 24


class StreamError(AssertionError):
    """The stream did not do what the case waited for."""


def _ws_url(url: str) -> str:
    if url.startswith("http://"):
        return "ws://" + url[len("http://") :]
    if url.startswith("https://"):
        return "wss://" + url[len("https://") :]
    raise StreamError(f"not a streaming server URL: {url!r}")


class ChannelStream:
    """One WebSocket connection of channel-prefixed messages; what arrived, by channel."""

    def __init__(self, url: str, protocols: tuple[str, ...], timeout: float = 30) -> None:
        self.url = _ws_url(url)
        self.protocols = protocols
        self.timeout = timeout
        self.protocol = ""
        self.received: dict[int, bytearray] = {}
        self.messages: dict[int, int] = {}
        self.closed = False
        self._ws: ClientConnection | None = None

    def __enter__(self) -> Self:
        self._ws = connect(
            self.url,
            subprotocols=[Subprotocol(p) for p in self.protocols],
            compression=None,
            open_timeout=self.timeout,
            close_timeout=5,
            max_size=MAX_MESSAGE,
        ).__enter__()
        self.protocol = str(self._ws.subprotocol or "")
        return self

    def __exit__(self, *exc: object) -> None:
        self.ws.__exit__(None, None, None)
        self.closed = True

    @property
    def ws(self) -> ClientConnection:
        if self._ws is None:
            raise StreamError("the stream is used outside its with block")
        return self._ws

    def send(self, channel: int, data: bytes) -> None:
        self.ws.send(bytes([channel]) + data)

    def data(self, channel: int) -> bytes:
        return bytes(self.received.get(channel, b""))

    def _take(self, message: bytes) -> None:
        if not message:
            return
        channel, data = message[0], message[1:]
        self.messages[channel] = self.messages.get(channel, 0) + 1
        self.received.setdefault(channel, bytearray()).extend(data)

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Read messages until ``predicate()`` holds; a StreamError naming ``what`` (and what
        arrived) when the server closes first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if self.closed or left <= 0:
                got = {c: bytes(d[-300:]) for c, d in self.received.items()}
                why = "the server closed the stream" if self.closed else f"{timeout:g}s passed"
                raise StreamError(f"{why} before {what}; received {got}")
            try:
                message = self.ws.recv(timeout=left)
            except TimeoutError:
                continue
            except ConnectionClosed:
                self.closed = True
                continue
            self._take(message if isinstance(message, bytes) else message.encode())

    def wait_closed(self, timeout: float, what: str = "the end of the stream") -> None:
        self.wait(lambda: self.closed, timeout, what)


class RemoteCommand(ChannelStream):
    """An exec or attach stream (``Exec``'s or ``Attach``'s URL)."""

    def __init__(self, url: str, timeout: float = 30) -> None:
        super().__init__(url, REMOTECOMMAND_PROTOCOLS, timeout)

    def stdin(self, data: bytes) -> None:
        self.send(STDIN, data)

    def close_stdin(self) -> None:
        if self.protocol != "v5.channel.k8s.io":
            raise StreamError(f"{self.protocol or 'this protocol'} cannot close stdin alone")
        self.ws.send(bytes([STREAM_CLOSE, STDIN]))

    def resize(self, width: int, height: int) -> None:
        self.send(RESIZE, json.dumps({"Width": width, "Height": height}).encode())

    def stdout(self) -> bytes:
        return self.data(STDOUT)

    def stderr(self) -> bytes:
        return self.data(STDERR)

    def status(self) -> dict[str, Any]:
        """The command's ``metav1.Status`` from the error channel ({} before the end)."""
        raw = self.data(ERROR)
        status: dict[str, Any] = json.loads(raw) if raw.strip() else {}
        return status

    def exit_code(self) -> int:
        """The exit code the status says: 0 for ``Success``; a StreamError for anything else
        than a plain exit."""
        status = self.status()
        if status.get("status") == "Success":
            return 0
        causes = status.get("details", {}).get("causes", [])
        codes = [c.get("message") for c in causes if c.get("reason") == "ExitCode"]
        if status.get("reason") != "NonZeroExitCode" or len(codes) != 1:
            raise StreamError(f"not an exit status: {status}")
        return int(codes[0])


class PortForward(ChannelStream):
    """One port forwarded (``PortForward``'s URL, the port in the ``port`` query)."""

    def __init__(self, url: str, port: int, timeout: float = 30) -> None:
        sep = "&" if "?" in url else "?"
        super().__init__(f"{url}{sep}port={port}", PORTFORWARD_PROTOCOLS, timeout)
        self.port = port

    def _take(self, message: bytes) -> None:
        # each channel's first message is the port it serves: checked, then not data
        if message and message[0] in (0, 1) and not self.messages.get(message[0]):
            self.messages[message[0]] = 1
            if message[1:3] != self.port.to_bytes(2, "little"):
                raise StreamError(f"channel {message[0]} opened for another port: {message!r}")
            message = message[:1] + message[3:]
            if len(message) == 1:
                return
        super()._take(message)

    def exchange(self, request: bytes, timeout: float = 30) -> bytes:
        """Send ``request`` to the pod's port; all it answered until it closed."""
        self.wait(lambda: 0 in self.messages, timeout, "the data channel to open")
        self.send(0, request)
        self.wait_closed(timeout, "the pod's end to close")
        if self.data(1):
            raise StreamError(f"port forwarding failed: {self.data(1).decode(errors='replace')}")
        return self.data(0)
