"""Any text log that holds PyTorch/CUDA out-of-memory messages: a training or serving script's
stdout, TGI's log (RFC 3339 UTC times), a llama.cpp log (ggml ``cudaMalloc failed``), a journald
export. Engine-specific parsers (vLLM, SGLang) handle their own logs, OOMs included; this one is
for everything else, so it sniffs modestly and steps aside when an engine's line shapes appear.

Each line's time is the first timestamp near its start in the forms of
:mod:`oomtrace.ingest.text.timestamps`; lines without one (traceback frames, the message itself)
inherit the previous line's time, and lines before the first timestamp take that first one (with
a note).

**A log with no timestamp at all** (llama.cpp by default, many scripts' stdout) is accepted with
one stated assumption: every event is placed at the file's modification time, which for a crash
log is when the process last wrote, i.e. the crash. The order of events within the file is kept
by the rows' order; their times are not invented. The note says so, and ``oomtrace inspect``
shows it. Lines handed over without a file (``parse_lines``) use their arrival time instead.

Besides :func:`~oomtrace.ingest.torch.oom_text.extract_ooms`, TGI's warm-up failure ``Not enough
memory to handle max_total_tokens=N`` becomes a ``startup_kv_insufficient`` event.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, first_line
from oomtrace.ingest.text.timestamps import StampForms, line_stamps
from oomtrace.ingest.torch.oom_text import OOM_SHAPES, PREFILTER, extract_ooms
from oomtrace.schema import TS

CONFIDENCE: Final = 0.55
_TGI_WARMUP: Final = r"Not enough memory to handle `?max_total_tokens=(\d+)"
_KEEP: Final = PREFILTER + r"|Not enough memory to handle"
_SNIFF_OOM = re.compile(f"{OOM_SHAPES}|{_TGI_WARMUP}")
# Line shapes another parser owns: a log that has them belongs to that parser.
_ENGINE_SHAPES = re.compile(
    r"(?m)(?:^|\s)(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}[ .]"  # vLLM
    r"|\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: [A-Z][A-Z_]*\d+)*\] "  # SGLang
    r"(?:Decode batch|Prefill batch|server_args=|Load weight|KV Cache is allocated)"
)
_NOT_RELEVANT = "no out-of-memory message (not relevant)"


class PyTorchLogParser:
    """The ``pytorch-log`` format."""

    name = "pytorch-log"
    description = "any text log with PyTorch/CUDA OOM messages (script stdout, TGI, llama.cpp)"

    def sniff(self, head: str, name: str) -> float:
        if "\x00" in head or not _SNIFF_OOM.search(head):
            return 0.0
        return 0.2 if _ENGINE_SHAPES.search(head) else CONFIDENCE

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        acc = _Acc(ctx, diag)
        for chunk in source.line_chunks(diag):
            acc.add(chunk.lines)
        return acc.finish(ctx.mtime)

    def parse_lines(
        self, lines: pl.DataFrame, ctx: ParseContext, diag: SourceDiagnostics
    ) -> ParseResult:
        diag.lines_read += lines.height
        acc = _Acc(ctx, diag)
        arrival = lines["arrival_ts"] if "arrival_ts" in lines.columns else None
        acc.add(lines["line"].cast(pl.String), arrival)
        return acc.finish(None)


class _Acc:
    def __init__(self, ctx: ParseContext, diag: SourceDiagnostics) -> None:
        self.ctx, self.diag = ctx, diag
        self.tz = ctx.clock.tz or "UTC"
        self.forms = StampForms()
        self.first_ts: datetime | None = None
        self.last_ts: datetime | None = None
        self.kept: list[pl.DataFrame] = []

    def add(self, lines: pl.Series, arrival: pl.Series | None = None) -> None:
        stamps, forms = line_stamps(lines, self.tz, self.ctx.clock.year, self.ctx.mtime)
        self.forms += forms
        frame = pl.DataFrame({"text": lines, "ts": stamps})
        if arrival is not None:
            frame = frame.with_columns(ts=pl.coalesce("ts", arrival.cast(TS)))
        frame = frame.with_columns(pl.col("ts").forward_fill())
        if self.last_ts is not None:
            frame = frame.with_columns(pl.col("ts").fill_null(pl.lit(self.last_ts, TS)))
        known = frame["ts"].drop_nulls()
        if known.len():
            self.first_ts = self.first_ts or known[0]
            self.last_ts = known[-1]
        keep = pl.col("text").str.contains(_KEEP)
        unused = frame.filter(~keep)
        self.diag.skip(_NOT_RELEVANT, unused.height, first_line(unused["text"]))
        self.kept.append(frame.filter(keep))

    def finish(self, mtime: datetime | None) -> ParseResult:
        kept = (
            pl.concat(self.kept)
            if self.kept
            else pl.DataFrame(schema={"text": pl.String, "ts": TS})
        )
        kept = self._place(kept, mtime)
        used = kept.filter(
            pl.col("text").str.contains(OOM_SHAPES) | pl.col("text").str.contains(_TGI_WARMUP)
        )
        self.diag.lines_recognised += used.height
        other = kept.height - used.height
        self.diag.skip(
            "mentions memory but is no known out-of-memory message",
            other,
            first_line(kept.filter(~pl.col("text").is_in(used["text"].implode()))["text"])
            if other
            else None,
        )
        events, samples = extract_ooms(kept.drop_nulls("ts"))
        warmup = (
            used.with_columns(tokens=pl.col("text").str.extract(_TGI_WARMUP, 1))
            .drop_nulls("tokens")
            .unique(subset=["tokens"], keep="first", maintain_order=True)
            .select(
                "ts",
                kind=pl.lit("startup_kv_insufficient"),
                detail=pl.format(
                    "TGI warm-up: not enough memory to handle max_total_tokens={}", pl.col("tokens")
                ),
            )
        )
        found = [f for f in (events, warmup) if f.height]
        return ParseResult(
            events=pl.concat(found, how="diagonal_relaxed") if found else None,
            samples=samples if samples.height else None,
            clock=self._clock(),
        )

    def _place(self, kept: pl.DataFrame, mtime: datetime | None) -> pl.DataFrame:
        """Lines before the first timestamp take it; a log with none takes the file's mtime."""
        missing = kept.filter(pl.col("ts").is_null()).height
        if not missing:
            return kept
        first = self.first_ts
        if first is not None:
            self.diag.note(
                f"{missing} out-of-memory line(s) came before the first timestamp; placed at it"
            )
            return kept.with_columns(pl.col("ts").fill_null(pl.lit(first, TS)))
        if mtime is not None:
            self.diag.note(
                "this log has no timestamps: every event is placed at the file's modification "
                f"time ({mtime:%Y-%m-%d %H:%M:%S} UTC, when the process last wrote); their order "
                "in the file is kept, their times are not known"
            )
            return kept.with_columns(pl.col("ts").fill_null(pl.lit(mtime, TS)))
        self.diag.skip(
            "out-of-memory line with no time (no timestamps, no file time)",
            missing,
            first_line(kept["text"]),
        )
        return kept.filter(pl.col("ts").is_not_null())

    def _clock(self) -> dict[str, object]:
        clock: dict[str, object] = {}
        if self.forms.zoneless or self.forms.syslog:
            clock.update(tz=self.tz, tz_assumed=self.ctx.clock.tz is None)
            if self.ctx.clock.tz is None:
                self.diag.note(
                    "timestamps without a zone are read as UTC (pass --tz with the host's zone)"
                )
        if self.forms.syslog:
            year_given = self.ctx.clock.year is not None
            clock.update(year_assumed=not year_given)
            if not year_given:
                self.diag.note(
                    "syslog timestamps carry no year: taken from the file's modification time "
                    "(a date after it belongs to the year before); pass --year to set it"
                )
        return clock


PARSER: Final = PyTorchLogParser()
