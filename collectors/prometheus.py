"""Scrape an engine's ``/metrics`` and keep only its memory and admission families.

The fetch uses one persistent ``http.client`` connection (a new TCP connection per scrape at
10-100 Hz would cost more than the scrape), never follows redirects, never reads proxy settings
from the environment, and enforces a whole-request deadline and a response size cap: the agent
fetches only the URL it is given and cannot be made to hang or to buffer an endless body.

Filtering works on family blocks rather than lines: text exposition keeps each family together
under its ``# TYPE`` line, so splitting at ``\\n# TYPE `` and looking at each block's name costs a
few dozen comparisons for a full vLLM scrape (thousands of histogram lines) instead of one per
line.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import re
import socket
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from collectors import __version__
from collectors.prometheus_families import INFO, KEEP
from collectors.schedule import SegmentSink

logger = logging.getLogger(__name__)

_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^\n]*\})?[ \t]+\S")
_CHUNK = 1 << 16


class FetchError(Exception):
    """A scrape that produced no usable exposition (down, slow, HTTP error, too big, garbage)."""


@dataclass(frozen=True)
class Filtered:
    text: str
    info_text: str
    families: int
    kept: int


def _is_sample(line: str) -> bool:
    return _SAMPLE.match(line) is not None


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FetchError(f"response is not UTF-8 text (byte {err.start})") from err


def filter_exposition(
    body: bytes | str, keep: frozenset[str] = KEEP, info: frozenset[str] = INFO
) -> Filtered:
    """Keep the ``# TYPE`` line and samples of each family in ``keep`` (and, separately, in
    ``info``); drop ``# HELP`` lines and everything else. Raises :class:`FetchError` when the
    body is not Prometheus text exposition at all, or what is kept is not UTF-8.

    Works on bytes with ``find`` from one ``# TYPE`` line to the next, slicing out only the kept
    families: a full scrape is never decoded or copied as a whole.
    """
    data = body.encode("utf-8") if isinstance(body, str) else body
    starts: list[int] = [0] if data.startswith(b"# TYPE ") else []  # where each TYPE line is
    at = data.find(b"\n# TYPE ")
    while at != -1:
        starts.append(at + 1)
        at = data.find(b"\n# TYPE ", at + 1)
    preamble = _text(data[: starts[0] if starts else len(data)])
    preamble_samples = [ln for ln in preamble.split("\n") if ln and ln[0] != "#"]
    if not starts and not (preamble_samples and _is_sample(preamble_samples[0])):
        raise FetchError("response is not Prometheus text exposition")
    # Samples before the first # TYPE line (untyped families): checked one by one.
    kept = [ln for ln in preamble_samples if ln.split("{", 1)[0].split(" ", 1)[0] in keep]
    info_lines: list[str] = []
    kept_families = 0
    for i, start in enumerate(starts):
        name_start = start + len("# TYPE ")
        name = data[name_start : data.find(b" ", name_start)].decode("utf-8", "replace")
        target = kept if name in keep else info_lines if name in info else None
        if target is None:
            continue
        kept_families += 1
        end = starts[i + 1] - 1 if i + 1 < len(starts) else len(data)
        lines = _text(data[start:end]).split("\n")
        target.append(lines[0])
        target.extend(ln for ln in lines[1:] if ln and ln[0] != "#")
    return Filtered(
        "\n".join(kept) + "\n" if kept else "",
        "\n".join(info_lines) + "\n" if info_lines else "",
        len(starts),
        kept_families,
    )


class HttpFetcher:
    """GET one URL over a kept-alive connection, within a deadline and a size cap."""

    def __init__(self, url: str, *, timeout_s: float, max_bytes: int) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        self.url = url
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._timeout_s, self._max_bytes = timeout_s, max_bytes
        self._conn: http.client.HTTPConnection | None = None
        self._headers = {
            "Accept": "text/plain;version=0.0.4;q=1.0,*/*;q=0.1",
            "Accept-Encoding": "identity",
            "User-Agent": f"oomtrace-collect/{__version__}",
        }

    def fetch(self) -> bytes:
        deadline = time.monotonic() + self._timeout_s
        try:
            conn = self._connection()
            conn.request("GET", self._path, headers=self._headers)
            _quick_ack(conn)
            response = conn.getresponse()
            if response.status != 200:
                raise FetchError(f"HTTP {response.status} {response.reason}".strip())
            length = response.getheader("Content-Length", "")
            if length.isdigit() and int(length) > self._max_bytes:
                cap = self._max_bytes
                raise FetchError(f"response of {length} bytes is over the {cap} byte cap")
            body = self._read(conn, response, deadline)
            if response.will_close:
                self.close()
            return body
        except FetchError:
            self.close()
            raise
        except (OSError, http.client.HTTPException) as err:
            self.close()
            if isinstance(err, TimeoutError) or time.monotonic() >= deadline:
                raise FetchError(f"no complete response within {self._timeout_s:g} s") from err
            raise FetchError(f"{type(err).__name__}: {err}".rstrip(": ")) from err

    def _read(
        self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: float
    ) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FetchError(f"no complete response within {self._timeout_s:g} s")
            if conn.sock is not None:
                conn.sock.settimeout(remaining)
            chunk = response.read1(_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > self._max_bytes:
                raise FetchError(f"response is over the {self._max_bytes} byte cap")
            parts.append(chunk)
        if response.length:  # Content-Length promised more than arrived
            raise FetchError(f"response ended {response.length} bytes early")
        # Done with this response; the connection stays open for the next scrape.
        response.close()
        return b"".join(parts)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout_s)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _quick_ack(conn: http.client.HTTPConnection) -> None:
    """Acknowledge the response's first segment at once. On a kept-alive connection, a server
    that writes headers and body separately with Nagle's algorithm on (Python's http.server, for
    one) otherwise waits for our delayed ACK: about 40 ms per scrape on Linux."""
    quickack = getattr(socket, "TCP_QUICKACK", None)
    if quickack is not None and conn.sock is not None:
        with contextlib.suppress(OSError):
            conn.sock.setsockopt(socket.IPPROTO_TCP, quickack, 1)


class Fetcher(Protocol):
    url: str

    def fetch(self) -> bytes: ...

    def close(self) -> None: ...


class PrometheusSource:
    """Scrapes one endpoint; writes the filtered text (or ``same`` when unchanged) per scrape
    and the ``cache_config_info`` text once per segment and whenever it changes."""

    def __init__(
        self,
        fetcher: Fetcher,
        sink: SegmentSink,
        *,
        name: str = "collector.prometheus",
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.name, self.target = name, fetcher.url
        self._fetcher, self._sink, self._monotonic_ns = fetcher, sink, monotonic_ns
        self._last_text: str | None = None
        self._info_text = ""
        self._warned_empty = False

    def poll(self, now_ns: int) -> None:
        started = self._monotonic_ns()
        body = self._fetcher.fetch()
        duration = self._monotonic_ns() - started
        filtered = filter_exposition(body)
        base = {"k": "prom", "ts": now_ns, "dur": duration, "src": self.name, "url": self.target}
        if filtered.info_text and filtered.info_text != self._info_text:
            self._info_text = filtered.info_text
            info = {**base, "info": 1, "text": self._info_text}
            self._sink.set_sticky(f"info:{self.target}", info)
        repeat = {**base, "same": 1} if filtered.text == self._last_text else None
        self._sink.append_keyed(f"prom:{self.target}", {**base, "text": filtered.text}, repeat)
        self._last_text = filtered.text
        if not filtered.kept and not self._warned_empty:
            self._warned_empty = True
            logger.warning(
                "%s serves %d metric families but none about memory or admission",
                self.target,
                filtered.families,
            )

    def close(self) -> None:
        self._fetcher.close()
