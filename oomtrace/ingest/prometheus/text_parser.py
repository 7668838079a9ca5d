"""Prometheus text exposition: one scrape, or many concatenated, and the collector's live scrapes
(``docs/formats/prometheus.md``).

Live capture and files left behind go through one code path: :func:`parse_scrapes` takes
``(scrape time, exposition text)`` pairs (what the collector holds); a file is cut into scrapes
at its *time lines* and read the same way. A time line is a line holding only:

* ``# oomtrace-scrape <time>`` (a comment, so the file stays valid exposition text);
* an epoch in seconds (``date +%s``, optionally with a fraction), milliseconds, microseconds or
  nanoseconds (``date +%s%N``);
* an ISO 8601 time (``date -Is``, ``date -u +%FT%T.%3NZ``; without a zone it is local time,
  placed with ``--tz``, UTC otherwise, recorded as assumed);
* ``date -R`` output, or plain ``date`` output in the C locale (``Fri Mar 14 09:00:00 UTC
  2025``); a zone abbreviation other than UTC/GMT is read in ``--tz``, and refused without it.

If the first non-blank line is a time line, each time line starts the scrape after it (``date;
curl``); otherwise each one ends the scrape before it (``curl; date``), and lines after the last
one have no time. A sample's own trailing timestamp (milliseconds) wins over its scrape's time.
A file with no time at all is accepted only if it holds one scrape (no series twice): it is
placed at the file's modification time, and a note says so. Several untimed scrapes are refused.

Lines are classified with Polars over whole chunks; only the sample lines of families in the
dialect table go through ``prometheus_client``'s parser (the rest, mostly histogram buckets,
is counted by family), so that big exports stay cheap (``benchmarks/prometheus_parse_bench.py``).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.prometheus import dialects as d
from oomtrace.ingest.prometheus.canonical_map import (
    ConfigInfo,
    note_unmapped,
    raw_frame,
    seconds_to_ts,
    to_result,
)
from oomtrace.ingest.prometheus.frames import RAW_SAMPLES, SCRAPE_TIMES
from oomtrace.ingest.prometheus.sample_lines import parse_samples
from oomtrace.ingest.prometheus.time_lines import TIME_LINE, parse_times
from oomtrace.ingest.text.input_file import InputFile, first_line
from oomtrace.isotime import iso_time
from oomtrace.schema import TS

log = logging.getLogger(__name__)

BATCH_CHARS: Final = 32 * 1024 * 1024
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_NAME: Final = r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\s*\{|\s)"
_META: Final = r"^#\s*(?:HELP|TYPE|UNIT|EOF)\b"
_SNIFF_META: Final = re.compile(r"^# (?:HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]*", re.MULTILINE)
_SNIFF_KNOWN: Final = re.compile(
    r"^(?:vllm:|sglang:|tgi_|llamacpp:|DCGM_FI_)[a-zA-Z0-9_:]*(?:\{[^\n]*\})? \S+", re.MULTILINE
)


class PrometheusTextParser:
    """The ``prometheus`` format: exposition text, one scrape or many with time lines."""

    name = "prometheus"
    description = "Prometheus /metrics text: one scrape, or many with time lines"

    def sniff(self, head: str, name: str) -> float:
        if re.search(r"^#\s*oomtrace-scrape ", head, re.MULTILINE):
            return 0.95
        if _SNIFF_META.search(head):
            return 0.9
        return 0.8 if _SNIFF_KNOWN.search(head) else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        reader = _Reader(diag)
        for chunk in source.line_chunks(diag):
            reader.feed_file_lines(chunk.lines)
        return reader.finish_file(source.name, ctx)


def parse_scrapes(
    scrapes: Iterable[tuple[datetime | int, str]],
    diag: SourceDiagnostics,
    batch_chars: int = BATCH_CHARS,
) -> ParseResult:
    """Canonical rows from scrapes, each ``(scrape time, exposition text)``; the time is a
    timezone-aware datetime or an int of UTC epoch nanoseconds (what the collector records).

    For the collector and for files alike. Families outside the dialect table are counted in
    ``diag``, not returned; ``vllm:cache_config_info`` goes to ``engine_config``. Work is done in
    batches of about ``batch_chars`` characters of text.
    """
    reader = _Reader(diag)
    times: list[int] = []
    texts: list[str] = []
    size = 0
    for when, text in scrapes:
        times.append(when if isinstance(when, int) else _epoch_ns(when))
        texts.append(text)
        size += len(text)
        if size >= batch_chars:
            reader.feed_scrapes(times, texts)
            times, texts, size = [], [], 0
    if texts:
        reader.feed_scrapes(times, texts)
    return reader.finish_scrapes()


def _epoch_ns(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError(f"scrape time {iso_time(when, 6, zone='')} has no time zone; pass UTC")
    return (when - _EPOCH) // timedelta(microseconds=1) * 1000


class _Reader:
    """Classifies lines chunk by chunk and keeps only what maps; times are joined at the end."""

    def __init__(self, diag: SourceDiagnostics) -> None:
        self.diag = diag
        self.raw: list[pl.DataFrame] = []
        self.configs: list[tuple[int, float | None, dict[str, str]]] = []
        self.config_states: list[dict[str, str]] = []
        self.unmapped: Counter[str] = Counter()
        self.unmapped_example: str | None = None
        self.grouped: set[str] = set()
        self.scrapes = 0
        self.time_lines: list[pl.DataFrame] = []
        self.leading: bool | None = None
        self.scrape_times: list[pl.DataFrame] = []

    def feed_file_lines(self, lines: pl.Series) -> None:
        frame = pl.DataFrame({"line": lines}).with_columns(
            time_text=pl.coalesce(
                pl.col("line").str.extract(r"^#\s*oomtrace-scrape\s+(\S.*?)\s*$", 1),
                pl.col("line").str.extract(TIME_LINE, 1),
            )
        )
        is_time = pl.col("time_text").is_not_null()
        frame = frame.with_columns(scrape=is_time.cum_sum().cast(pl.Int64) + self.scrapes)
        if self.leading is None:
            first = frame.filter(pl.col("line").str.strip_chars() != "").head(1)
            if first.height:
                self.leading = first["time_text"][0] is not None
        times = frame.filter(is_time)
        self.diag.lines_recognised += times.height
        self.time_lines.append(times.select("scrape", "time_text", "line"))
        self.scrapes += times.height
        self._feed(frame.filter(~is_time).select("line", "scrape"))

    def feed_scrapes(self, times: list[int], texts: list[str]) -> None:
        ids = pl.int_range(self.scrapes, self.scrapes + len(texts), eager=True)
        stamps = (
            pl.Series(times, dtype=pl.Int64).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")
        )
        self.scrape_times.append(pl.DataFrame({"scrape": ids, "scrape_ts": stamps}, SCRAPE_TIMES))
        self.scrapes += len(texts)
        lines = (
            pl.DataFrame({"scrape": ids, "line": texts})
            .with_columns(pl.col("line").str.strip_suffix("\n").str.split("\n"))
            .explode("line")
            .with_columns(pl.col("line").str.strip_suffix("\r"))
        )
        self.diag.lines_read += lines.height
        self._feed(lines.select("line", "scrape"))

    def _feed(self, frame: pl.DataFrame) -> None:
        line = pl.col("line")
        frame = frame.with_columns(name=line.str.extract(_NAME, 1)).with_columns(
            kind=pl.when(line.str.strip_chars() == "")
            .then(pl.lit("blank"))
            .when(line.str.starts_with("#"))
            .then(pl.when(line.str.contains(_META)).then(pl.lit("meta")).otherwise(pl.lit("#")))
            .when(pl.col("name").is_not_null())
            .then(pl.lit("sample"))
            .otherwise(pl.lit("other"))
        )
        for kind, reason in (
            ("blank", "blank line"),
            ("#", "comment line"),
            ("other", "not Prometheus exposition text"),
        ):
            part = frame.filter(pl.col("kind") == kind)
            self.diag.skip(reason, part.height, first_line(part["line"]))
        self.diag.lines_recognised += int((frame["kind"] == "meta").sum())
        typed = frame["line"].str.extract(r"^#\s*TYPE\s+(\S+)\s+(?:histogram|summary)", 1)
        self.grouped.update(typed.drop_nulls().to_list())
        samples = frame.filter(pl.col("kind") == "sample")
        wanted = pl.col("name").is_in(list(d.WANTED_NAMES))
        self._count_unmapped(samples.filter(~wanted))
        self._parse(samples.filter(wanted))

    def _count_unmapped(self, frame: pl.DataFrame) -> None:
        if not frame.height:
            return
        self.unmapped.update(dict(frame.group_by("name").len().iter_rows()))
        self.unmapped_example = self.unmapped_example or frame["line"][0]

    def _parse(self, frame: pl.DataFrame) -> None:
        if not frame.height:
            return
        raw, configs = parse_samples(frame.select("line", "name", "scrape"), self.diag)
        if raw is not None:
            self.raw.append(raw)
        for scrape, stamp, labels in configs:
            # Every scrape repeats the config; only a change is worth keeping.
            if labels not in self.config_states:
                self.config_states.append(labels)
                self.configs.append((scrape, stamp, labels))

    def finish_scrapes(self) -> ParseResult:
        times = pl.concat(self.scrape_times) if self.scrape_times else _no_times()
        return self._finish(times, None)

    def finish_file(self, name: str, ctx: ParseContext) -> ParseResult:
        lines = pl.concat(self.time_lines) if self.time_lines else pl.DataFrame()
        times = _no_times()
        if lines.height:
            when = parse_times(lines["time_text"], lines["line"], ctx.clock.tz, name, self.diag)
            shift = 0 if self.leading else 1  # a trailing time line closes the scrape before it
            times = pl.DataFrame(
                {"scrape": lines["scrape"] - shift, "scrape_ts": when}, SCRAPE_TIMES
            )
        result = self._finish(times, (name, ctx))
        if any(n.startswith("scrape times without a zone") for n in self.diag.notes):
            result.clock = {"tz": "UTC", "tz_assumed": True}
        elif ctx.clock.tz is not None and lines.height:
            result.clock = {"tz": ctx.clock.tz, "tz_assumed": False}
        return result

    def _finish(self, times: pl.DataFrame, file: tuple[str, ParseContext] | None) -> ParseResult:
        note_unmapped(self.unmapped, self.unmapped_example, self.diag, self.grouped)
        raw = pl.concat(self.raw) if self.raw else None
        if raw is not None:
            raw = raw.join(times, on="scrape", how="left").with_columns(
                ts=pl.coalesce("ts", "scrape_ts")
            )
            raw = self._untimed(raw, times, file)
        configs = [
            ConfigInfo(_config_time(stamp, scrape, times), labels)
            for scrape, stamp, labels in self.configs
        ]
        if raw is None:
            raw = raw_frame(pl.Series([], dtype=TS), [], [], [])
        return to_result(raw.select(RAW_SAMPLES.names()), configs, self.diag)

    def _untimed(
        self, raw: pl.DataFrame, times: pl.DataFrame, file: tuple[str, ParseContext] | None
    ) -> pl.DataFrame:
        untimed = raw.filter(pl.col("ts").is_null())
        if not untimed.height or file is None:
            return raw
        name, ctx = file
        if times.height:
            self._drop(
                "sample outside any timed scrape (before the first or after the last time line)",
                untimed,
            )
            return raw.filter(pl.col("ts").is_not_null())
        repeated = untimed.filter(pl.col("key").is_duplicated())
        if repeated.height == 0 and ctx.mtime is not None:
            stamp = iso_time(ctx.mtime, 0)
            self.diag.note(
                f"one scrape with no time: placed at the file's modification time {stamp} "
                "(an assumption; `# oomtrace-scrape <time>` lines or the collector give real times)"
            )
            return raw.with_columns(pl.col("ts").fill_null(pl.lit(ctx.mtime).cast(TS)))
        if raw.height == untimed.height:
            raise InputError(
                f"{name}: several scrapes with no time (series {repeated['key'][0]} appears "
                f"{int((untimed['key'] == repeated['key'][0]).sum())} times), so they cannot be "
                "placed in time; put a line `# oomtrace-scrape <ISO time>` (e.g. from "
                "`date -u +%FT%T.%3NZ`) before each scrape"
            )
        self._drop("sample of an untimed scrape", untimed)
        return raw.filter(pl.col("ts").is_not_null())

    def _drop(self, reason: str, rows: pl.DataFrame) -> None:
        """Parsed (so counted as recognised) but unusable: moved to the skipped lines."""
        self.diag.skip(reason, rows.height, rows["key"][0] if rows.height else None)
        self.diag.lines_recognised -= rows.height


def _no_times() -> pl.DataFrame:
    return pl.DataFrame(schema=SCRAPE_TIMES)


def _config_time(stamp: float | None, scrape: int, times: pl.DataFrame) -> datetime | None:
    if stamp is not None:
        found = seconds_to_ts(pl.Series([stamp], dtype=pl.Float64))
        return found[0]  # type: ignore[no-any-return]
    found = times.filter(pl.col("scrape") == scrape)["scrape_ts"]
    return found[0] if found.len() else None


PARSER = PrometheusTextParser()
__all__ = ["PARSER", "parse_scrapes"]
