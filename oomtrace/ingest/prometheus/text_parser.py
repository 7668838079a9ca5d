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
placed at the time its name holds (``scrape-$(date +%s).txt``), else at its modification time,
and a note says which. Several untimed scrapes in one file are refused.

**One scrape per file.** The files of one series (same folder, same name but for its time, same
engine: :meth:`PrometheusTextParser.series_key`) are read together as one source
(:meth:`PrometheusTextParser.parse_series`), so that a counter's increase across the files is
one series' increase (:mod:`.scrape_files`).

Lines are classified with Polars over whole chunks; only the sample lines of families in the
dialect table go through ``prometheus_client``'s parser (the rest, mostly histogram buckets,
is counted by family), so that big exports stay cheap (``benchmarks/prometheus_parse_bench.py``).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.prometheus import dialects as d
from oomtrace.ingest.prometheus.canonical_map import (
    ConfigInfo,
    note_unmapped,
    raw_frame,
    seconds_to_ts,
    to_result,
)
from oomtrace.ingest.prometheus.file_names import series_pattern
from oomtrace.ingest.prometheus.frames import RAW_SAMPLES, SCRAPE_TIMES
from oomtrace.ingest.prometheus.sample_lines import parse_samples
from oomtrace.ingest.prometheus.scrape_files import (
    ScrapeFile,
    check_one_scrape,
    note_placement,
    scrape_times,
)
from oomtrace.ingest.prometheus.time_lines import TIME_LINE
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
_ENGINE_PREFIX: Final = re.compile(r"^(vllm:|sglang:|tgi_|llamacpp:|DCGM_FI_)", re.MULTILINE)


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
        return self.parse_series([source], ctx, diag)

    def series_key(self, source: InputFile, head: str) -> str | None:
        """The series a file is one part of: its folder, its name with the time (else its last
        number) replaced by ``*``, and the engine its metrics come from. None: no such name."""
        pattern = series_pattern(source.name)
        engine = _ENGINE_PREFIX.search(head)
        if pattern is None or engine is None:
            return None
        return f"{Path(source.path).resolve().parent}|{pattern}|{engine.group(1)}"

    def parse_series(
        self, sources: Sequence[InputFile], ctx: ParseContext, diag: SourceDiagnostics
    ) -> ParseResult:
        """The files of one series (or one file) as one source, each scrape at its time."""
        reader = _Reader(diag)
        for source in sources:
            reader.begin_file(source.name, source.mtime if len(sources) > 1 else ctx.mtime)
            for chunk in source.line_chunks(diag):
                reader.feed_file_lines(chunk.lines)
        return reader.finish_files(ctx)


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
        self.files: list[ScrapeFile] = []
        self.scrape_times: list[pl.DataFrame] = []

    def begin_file(self, name: str, mtime: datetime | None) -> None:
        """The lines fed from now on are a new file's; its scrape numbers start after the last
        file's (one more for the untimed tail a trailing time line leaves)."""
        if self.files:
            self.scrapes += 1
        self.files.append(ScrapeFile(name, mtime, self.scrapes))

    def feed_file_lines(self, lines: pl.Series) -> None:
        file = self.files[-1]
        frame = pl.DataFrame({"line": lines}).with_columns(
            time_text=pl.coalesce(
                pl.col("line").str.extract(r"^#\s*oomtrace-scrape\s+(\S.*?)\s*$", 1),
                pl.col("line").str.extract(TIME_LINE, 1),
            )
        )
        is_time = pl.col("time_text").is_not_null()
        frame = frame.with_columns(scrape=is_time.cum_sum().cast(pl.Int64) + self.scrapes)
        if file.leading is None:
            first = frame.filter(pl.col("line").str.strip_chars() != "").head(1)
            if first.height:
                file.leading = first["time_text"][0] is not None
        times = frame.filter(is_time)
        self.diag.lines_recognised += times.height
        file.time_lines.append(times.select("scrape", "time_text", "line"))
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

    def finish_files(self, ctx: ParseContext) -> ParseResult:
        times, placement = scrape_times(self.files, ctx.clock.tz, self.diag)
        result = self._finish(times, self.files)
        note_placement(placement, len(self.files), self.diag)
        timed_lines = any(f.timed for f in self.files)
        zone_less = any(n.startswith("scrape times without a zone") for n in self.diag.notes)
        if zone_less or placement.zone_assumed:
            result.clock = {"tz": "UTC", "tz_assumed": True}
        elif ctx.clock.tz is not None and (timed_lines or placement.by_name):
            result.clock = {"tz": ctx.clock.tz, "tz_assumed": False}
        return result

    def _finish(self, times: pl.DataFrame, files: list[ScrapeFile] | None) -> ParseResult:
        note_unmapped(self.unmapped, self.unmapped_example, self.diag, self.grouped)
        raw = pl.concat(self.raw) if self.raw else None
        if raw is not None:
            if files is not None:
                check_one_scrape(raw, files)
            raw = raw.join(times, on="scrape", how="left").with_columns(
                ts=pl.coalesce("ts", "scrape_ts")
            )
            self._drop(
                "sample outside any timed scrape (before the first or after the last time line)",
                raw.filter(pl.col("ts").is_null()),
            )
            raw = raw.filter(pl.col("ts").is_not_null())
        configs = [
            ConfigInfo(_config_time(stamp, scrape, times), labels)
            for scrape, stamp, labels in self.configs
        ]
        if raw is None:
            raw = raw_frame(pl.Series([], dtype=TS), [], [], [])
        return to_result(raw.select(RAW_SAMPLES.names()), configs, self.diag)

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
