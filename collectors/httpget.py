"""GET one URL again and again over one kept-alive HTTP/1.1 connection, within a whole-request
deadline and a size cap.

Written on ``socket`` (and ``ssl``) rather than ``http.client``: at 10-100 scrapes a second,
``http.client`` spent most of a scrape's CPU on its general machinery (the request assembled
header by header, a file object per response, the headers parsed by the ``email`` package:
about 0.6 ms of CPU per scrape against 0.25 ms here, benchmarks/collector_overhead.py). A scrape
needs only a fixed request and three response headers (``Content-Length``,
``Transfer-Encoding``, ``Connection``). Never follows redirects, never reads proxy settings
from the environment.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
import urllib.parse

_CHUNK = 1 << 16
_MAX_HEAD = 64 << 10  # status line and headers


class FetchError(Exception):
    """A scrape that produced no usable exposition (down, slow, HTTP error, too big, garbage)."""


class _StaleConnectionError(Exception):
    """A reused connection the server had already closed (idle timeout): nothing was answered."""


class HttpGetter:
    """The connection and the fixed request; :meth:`get` returns one 200 response's body."""

    def __init__(self, url: str, *, timeout_s: float, max_bytes: int, user_agent: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]  # never send credentials as the Host
        self._request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
            "Accept: text/plain;version=0.0.4;q=1.0,*/*;q=0.1\r\n"
            f"Accept-Encoding: identity\r\nUser-Agent: {user_agent}\r\n\r\n"
        ).encode("ascii", "strict")
        self._timeout_s, self._max_bytes = timeout_s, max_bytes
        self._sock: socket.socket | None = None
        self._buffer = b""  # what was read past the last response's end (never, from a server)

    def get(self) -> bytes:
        deadline = time.monotonic() + self._timeout_s
        try:
            reused = self._sock is not None
            try:
                return self._exchange(deadline)
            except _StaleConnectionError:
                if not reused:
                    raise
                self.close()  # the server dropped the idle connection: once more, afresh
                return self._exchange(deadline)
        except _StaleConnectionError as err:
            self.close()
            raise FetchError("the server closed the connection without a response") from err
        except FetchError:
            self.close()
            raise
        except OSError as err:
            self.close()
            if isinstance(err, TimeoutError) or time.monotonic() >= deadline:
                raise FetchError(f"no complete response within {self._timeout_s:g} s") from err
            raise FetchError(f"{type(err).__name__}: {err}".rstrip(": ")) from err

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
        self._buffer = b""

    # -- one exchange -----------------------------------------------------------------------

    def _exchange(self, deadline: float) -> bytes:
        sock = self._connection(deadline)
        try:
            sock.sendall(self._request)
        except (BrokenPipeError, ConnectionResetError) as err:
            raise _StaleConnectionError from err
        _quick_ack(sock)
        head, rest = self._head(sock, deadline)
        status, reason, headers = _parse_head(head)
        if status != 200:
            raise FetchError(f"HTTP {status} {reason}".strip())
        closes = headers.get("connection", "").lower() == "close" or head.startswith(b"HTTP/1.0")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked(sock, rest, deadline)
        elif "content-length" in headers:
            body = self._sized(sock, rest, headers["content-length"], deadline)
        else:
            body, closes = self._until_close(sock, rest, deadline), True
        if closes:
            self.close()
        return body

    def _connection(self, deadline: float) -> socket.socket:
        if self._sock is None:
            sock = socket.create_connection((self._host, self._port), self._remaining(deadline))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._https:
                context = ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self._host)
            self._sock = sock
        return self._sock

    def _remaining(self, deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(f"no complete response within {self._timeout_s:g} s")
        return remaining

    def _recv(self, sock: socket.socket, deadline: float) -> bytes:
        sock.settimeout(self._remaining(deadline))
        return sock.recv(_CHUNK)

    def _head(self, sock: socket.socket, deadline: float) -> tuple[bytes, bytes]:
        data = self._buffer
        self._buffer = b""
        while True:
            end = data.find(b"\r\n\r\n")
            if end != -1:
                return data[:end], data[end + 4 :]
            if len(data) > _MAX_HEAD:
                raise FetchError(f"response headers are over {_MAX_HEAD} bytes")
            try:
                chunk = self._recv(sock, deadline)
            except ConnectionResetError as err:
                if data:
                    raise
                raise _StaleConnectionError from err
            if not chunk:
                if not data:
                    raise _StaleConnectionError
                raise FetchError("the server closed the connection in the middle of the headers")
            data += chunk

    def _sized(self, sock: socket.socket, rest: bytes, length: str, deadline: float) -> bytes:
        if not length.strip().isdigit():
            raise FetchError(f"Content-Length {length!r} is not a number")
        size = int(length)
        if size > self._max_bytes:
            raise FetchError(f"response of {size} bytes is over the {self._max_bytes} byte cap")
        parts, have = [rest], len(rest)
        while have < size:
            chunk = self._recv(sock, deadline)
            if not chunk:
                raise FetchError(f"response ended {size - have} bytes early")
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts)
        self._buffer = data[size:]
        return data[:size]

    def _until_close(self, sock: socket.socket, rest: bytes, deadline: float) -> bytes:
        parts, have = [rest], len(rest)
        while True:
            self._check_cap(have)
            chunk = self._recv(sock, deadline)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            have += len(chunk)

    def _chunked(self, sock: socket.socket, rest: bytes, deadline: float) -> bytes:
        data, at, body = rest, 0, list[bytes]()
        have = 0
        while True:
            line_end = data.find(b"\r\n", at)
            while line_end == -1:
                data = self._more(sock, data, deadline)
                line_end = data.find(b"\r\n", at)
            size_text = data[at:line_end].split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError as err:
                raise FetchError(f"chunk size {size_text!r} is not hexadecimal") from err
            have += size
            self._check_cap(have)
            start = line_end + 2
            if size == 0:  # trailers (none expected) end with an empty line
                end = data.find(b"\r\n\r\n", line_end)
                while end == -1:
                    data = self._more(sock, data, deadline)
                    end = data.find(b"\r\n\r\n", line_end)
                self._buffer = data[end + 4 :]
                return b"".join(body)
            while len(data) < start + size + 2:
                data = self._more(sock, data, deadline)
            body.append(data[start : start + size])
            data, at = data[start + size + 2 :], 0

    def _more(self, sock: socket.socket, data: bytes, deadline: float) -> bytes:
        chunk = self._recv(sock, deadline)
        if not chunk:
            raise FetchError("the server closed the connection in the middle of a chunk")
        return data + chunk

    def _check_cap(self, size: int) -> None:
        if size > self._max_bytes:
            raise FetchError(f"response is over the {self._max_bytes} byte cap")


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/") or not code.isdigit():
        raise FetchError(f"the server's answer is not HTTP: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return int(code), reason.strip(), headers


def _quick_ack(sock: socket.socket) -> None:
    """Acknowledge the response's first segment at once. On a kept-alive connection, a server
    that writes headers and body separately with Nagle's algorithm on (Python's http.server, for
    one) otherwise waits for our delayed ACK: about 40 ms per scrape on Linux."""
    quickack = getattr(socket, "TCP_QUICKACK", None)
    if quickack is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)
