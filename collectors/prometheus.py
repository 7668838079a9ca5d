"""Scrape an engine's ``/metrics`` and keep only its memory and admission families.

The fetch (``collectors.httpget``) uses one persistent connection (a new TCP connection per
scrape at 10-100 Hz would cost more than the scrape), never follows redirects, never reads proxy
settings from the environment, and enforces a whole-request deadline and a response size cap:
the agent fetches only the URL it is given and cannot be made to hang or to buffer an endless
body.

Filtering works on family blocks rather than lines: text exposition keeps each family together
under its ``# TYPE`` line, so splitting at ``\\n# TYPE `` and looking at each block's name costs a
few dozen comparisons for a full vLLM scrape (thousands of histogram lines) instead of one per
line.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from collectors import __version__
from collectors.httpget import FetchError, HttpGetter
from collectors.prometheus_families import INFO, KEEP
from collectors.schedule import SegmentSink

logger = logging.getLogger(__name__)

__all__ = ["FetchError", "Filtered", "HttpFetcher", "PrometheusSource", "filter_exposition"]

_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^\n]*\})?[ \t]+\S")


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
        self.url = url
        self._getter = HttpGetter(
            url,
            timeout_s=timeout_s,
            max_bytes=max_bytes,
            user_agent=f"oomtrace-collect/{__version__}",
        )

    def fetch(self) -> bytes:
        return self._getter.get()

    def close(self) -> None:
        self._getter.close()


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
