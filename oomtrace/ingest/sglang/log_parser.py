"""SGLang server logs: scheduler batch lines, retractions, KV-pool OOMs, startup memory lines,
request lines, and PyTorch OOMs anywhere in the log (``docs/formats/sglang.md``).

Lines look like ``[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8, ...``: SGLang's own
prefix carries the year and (with ``SGLANG_LOG_MS=1``) milliseconds, but no zone, so times are
read in ``--tz`` (UTC unless told; recorded as an assumption). Releases up to 0.3.x print the time
of day only (``[11:19:46 TP0]``): the dates come from the file's modification time
(:mod:`oomtrace.ingest.sglang.time_of_day`). Under a logging configuration of the user's own the
lines are Python ``logging``'s (``2026-06-07 10:59:32,625 [INFO] sglang...: Decode batch, ...``)
and are read alike, as are a format with the rank tag beside the source file (``2025-10-20
03:02:22 INFO 31223 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] Decode batch. ...``) and SGLang's
prefix that lost its ``[`` in a paste (``2025-09-13 09:09:15 TP0] Decode batch. ...``). Anything
before the ``[`` is an
outer prefix (docker-compose, Ray ``(name pid=N)``, journald) and is ignored, except a full RFC
3339 timestamp with a zone (``kubectl logs --timestamps``, ``docker logs -t``), which wins.
Lines without SGLang's prefix (tracebacks, continuation lines) inherit the previous line's time.

Every scheduler rank prints its own lines (``[... DP1 TP1]``). Batch lines are kept from one rank
only (the lowest rank tag, normally TP0 or DP0: with DP attention each DP rank has its own KV
pool and the samples table has no rank column); the other ranks' batch lines are counted as
skipped. Retractions, KV-pool OOMs and deaths printed by several ranks count once. Startup
figures are taken from the lowest rank (they are per GPU).

Version-dependent patterns live in :mod:`oomtrace.ingest.sglang.line_patterns`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.alignment.anchoring import line_instant, untimed_rows
from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.sglang import extract, time_of_day
from oomtrace.ingest.sglang import line_patterns as pat
from oomtrace.ingest.sglang.frames import KIND_LINES
from oomtrace.ingest.sglang.line_kinds import classify, split_prefix
from oomtrace.ingest.text.input_file import InputFile, first_line
from oomtrace.ingest.text.timestamps import ISO, localize, naive, with_offset
from oomtrace.ingest.torch.oom_phase import failure_phases
from oomtrace.ingest.torch.oom_text import OOM_SHAPES, extract_ooms
from oomtrace.schema import TS

# A second or two between an outer (kubectl/docker) time and SGLang's own is normal buffering.
_OUTER_TOLERANCE_S: Final = 2.0
_OUTER_ISO: Final = r"(?:^|[\s|])" + ISO
_SNIFF_PREFIX = re.compile(pat.PREFIX_SNIFF)
_SNIFF_RANKS = re.compile(
    r"\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: (?:DP|TP|PP|EP)\d+)+\] "
)
_MESSAGES = (
    r"(?:Decode batch|Prefill batch|server_args=ServerArgs\(|Load weight (?:begin|end)|"
    r"KV Cache is allocated|max_total_num_tokens=|Capture cuda graph|Init torch distributed|"
    r"Memory pool end|The server is fired up|KV cache pool is full|Decode out of memory happened)"
)
_SNIFF_MESSAGES = re.compile(pat.PREFIX_SNIFF + _MESSAGES)
# SGLang's messages under Python logging's own prefix (a logging configuration of the user's)
_SNIFF_PYTHON_LOGGING = re.compile(
    r"(?m)^.{0,40}\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}[,.]\d{3}\b.{0,80}?(?:sglang\S*[:\s-]+)"
    + _MESSAGES
)
# The rank tag beside the source file in a format of the user's, SGLang's prefix that lost its
# "[" in a paste, each field bracketed (line_patterns.RANKED_LOGGING, LOST_BRACKET,
# BRACKETED_FIELDS)
_SNIFF_RANKED_LOGGING = re.compile(
    r"(?m)^.{0,40}\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d{3}\d*)?\s+\[?(?:DEBUG|INFO|"
    r"WARNING|WARN|ERROR|CRITICAL)\]?\s+(?:\d+\s+)?\[(?:[A-Z][A-Z_]*\d+ )*[\w./-]+\.py:\d+\]\s+"
    + _MESSAGES
)
_SNIFF_LOST_BRACKET = re.compile(
    r"(?m)^.{0,40}\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: [A-Z][A-Z_]*\d+)+\] "
    + _MESSAGES
)
_SNIFF_BRACKETED_FIELDS = re.compile(
    r"(?m)^.{0,40}\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d+)?\]\[[\w./-]+\.py:\d+\]"
    r"\[[A-Z]+\]:?\s+" + _MESSAGES
)
_SNIFF_TIME_ONLY = re.compile(time_of_day.TIME_ONLY)
# SGLang's messages without its prefix: only those no other program prints (a batch line with its
# counters, the KV pool's statement, the scheduler's death, the KV pool running out).
_SNIFF_BARE = re.compile(
    r"(?m)^[\s`>*|]*(?:\[(?:[A-Z][A-Z_]*\d+ ?)+\] ?)?"
    r"(?:(?:Decode|Prefill) batch[.,] .*#running-req: |KV Cache is allocated\. .*#tokens: "
    r"|Scheduler hit an exception|KV cache pool is full\. Retract requests"
    # 0.1.x, which printed no prefix at all
    r"|new fill batch\. #seq: \d+\. |#running-req: \d+, #token: \d+, token usage: )"
    r"|(?:Prefill|Decode) out of memory\. Try to lower your batch size"
    r"|No space left for only one request, self\.token_to_kv_pool"
    r"|Not enough memory\. Please try to increase --mem-fraction-static"
)
# Kinds whose pattern is tested on the whole line (they have no SGLang prefix, or it varies).
_WHOLE_LINE_KINDS: Final = ("kv_pool_oom", "kv_pool_figures", "oom_phase", "no_kv_memory")
_NOT_USED: Final = "SGLang line not used (not relevant to memory or admission)"
_NUMBER: Final = "number"
_STAMPED: Final = "stamped"
_NO_PREFIX = "line without SGLang's [date time] prefix (traceback, continuation or other output)"


@dataclass
class _Acc:
    """What the chunks of one input have contributed so far."""

    ctx: ParseContext
    diag: SourceDiagnostics
    day_clock: time_of_day.DayClock | None = None
    midnights: int = 0
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    own_stamps: int = 0
    outer_gap_s: float | None = None
    offset_note: str | None = None
    frames: dict[str, list[pl.DataFrame]] = field(default_factory=dict)
    tag_examples: dict[str, str] = field(default_factory=dict)
    families: set[str] = field(default_factory=set)
    lines_seen: int = 0
    untimed: bool = False

    @property
    def tz(self) -> str:
        return self.ctx.clock.tz or "UTC"

    def keep(self, name: str, frame: pl.DataFrame) -> None:
        if frame.height:
            self.frames.setdefault(name, []).append(frame)

    def add(self, lines: pl.Series, arrival: pl.Series | None = None) -> None:
        first = self.lines_seen + 1
        self.lines_seen += lines.len()
        frame = self._stamped(lines.alias("line"), arrival)
        number = pl.int_range(first, first + lines.len(), dtype=pl.Int64).alias(_NUMBER)
        stamped = frame.select(number, _STAMPED)
        frame = check_frame(
            frame.drop(_STAMPED).with_columns(kind=classify()), KIND_LINES, "SGLang lines"
        ).hstack(stamped)
        self._count_unused(frame)
        used = frame.filter(pl.col("kind").is_not_null())
        if used.height == 0:
            return
        timed = used.filter(pl.col("ts").is_not_null()).drop(_NUMBER, _STAMPED)
        untimed = used.filter(pl.col("ts").is_null())
        # Lines before any time (a traceback, or a log pasted without its prefixes) wait for
        # the first time, or for the file's end: then they keep their order and no time.
        self.keep("pending", untimed.filter(~pl.col(_STAMPED)).drop(_STAMPED))
        impossible = untimed.filter(_STAMPED)
        self.diag.skip(
            "SGLang line with an impossible local time (DST gap or invalid date)",
            impossible.height,
            first_line(impossible["line"]),
        )
        self._dispatch(timed)

    def _stamped(self, lines: pl.Series, arrival: pl.Series | None) -> pl.DataFrame:
        parts = split_prefix(lines)
        dated = pl.col("stamp").str.to_datetime("%Y-%m-%d %H:%M:%S", time_unit="ns", strict=False)
        if self.day_clock is not None:
            tod = parts.select(time_of_day.seconds_of_day(pl.col("stamp"))).to_series()
            dated = pl.coalesce(dated, pl.lit(self.day_clock.naive(tod)))
        frame = parts.with_columns(
            ranks=pl.col("ranks").str.strip_chars(),
            _own=dated
            + pl.duration(milliseconds=pl.col("ms").cast(pl.Int64, strict=False).fill_null(0)),
            # kubectl/docker put an RFC 3339 time first; on lines without SGLang's prefix too.
            _o=pl.coalesce("outer", pl.col("line").str.slice(0, 80)).str.extract_groups(_OUTER_ISO),
        )
        frame = frame.unnest("_o").with_columns(
            _outer=pl.when(pl.col("zone").is_not_null()).then(
                with_offset(naive(pl.col("date"), pl.col("time"), pl.col("frac")), pl.col("zone"))
            )
        )
        own = self._own_times(frame, arrival)
        frame = frame.with_columns(_own=own).with_columns(ts=pl.coalesce("_outer", "_own"))
        self._check_outer(frame)
        self.own_stamps += frame.filter(
            pl.col("_outer").is_null() & pl.col("_own").is_not_null()
        ).height
        if arrival is not None:
            # The collector's arrival time is exact to its poll interval, where SGLang prints
            # whole seconds: it wins over the printed time (an outer RFC 3339 time wins over both).
            frame = frame.with_columns(ts=pl.coalesce("_outer", arrival.cast(TS), "_own"))
        else:
            frame = frame.with_columns(ts=pl.col("ts").forward_fill())
            if self.last_ts is not None:
                frame = frame.with_columns(ts=pl.col("ts").fill_null(pl.lit(self.last_ts, TS)))
        last = frame["ts"].drop_nulls()
        if last.len():
            self.first_ts = self.first_ts or last[0]
            self.last_ts = last[-1]
        return frame.select(
            "line",
            "ranks",
            "msg",
            pl.col("ts").cast(TS),
            pl.col("stamp").is_not_null().alias(_STAMPED),
        )

    def _own_times(self, frame: pl.DataFrame, arrival: pl.Series | None) -> pl.Series:
        """SGLang's own zone-less times in UTC: in ``--tz``; failing that, for lines a collector
        read as they were written, in the zone their arrival times reveal."""
        if arrival is not None and self.ctx.clock.tz is None:
            gaps = (
                frame.with_columns(_a=arrival.cast(TS))
                .select(
                    (pl.col("_own").dt.replace_time_zone("UTC") - pl.col("_a")).dt.total_seconds()
                )
                .to_series()
                .drop_nulls()
            )
            if gaps.len():
                median = gaps.median()
                assert isinstance(median, float | int)
                quarter_hours = round(float(median) / 900)
                if quarter_hours:
                    hours, minutes = divmod(abs(quarter_hours) * 15, 60)
                    sign = "+" if quarter_hours > 0 else "-"
                    self.offset_note = f"UTC{sign}{hours:02d}:{minutes:02d}"
                return frame.select(
                    pl.col("_own").dt.replace_time_zone("UTC")
                    - pl.duration(minutes=quarter_hours * 15)
                ).to_series()
        return frame.select(localize(pl.col("_own"), self.tz)).to_series()

    def _check_outer(self, frame: pl.DataFrame) -> None:
        both = frame.filter(pl.col("_outer").is_not_null() & pl.col("_own").is_not_null())
        if both.height == 0:
            return
        gap = both.select((pl.col("_own") - pl.col("_outer")).dt.total_seconds().median()).item()
        if gap is not None and abs(gap) > _OUTER_TOLERANCE_S:
            self.outer_gap_s = float(gap)

    def _count_unused(self, frame: pl.DataFrame) -> None:
        unused = frame.filter(pl.col("kind").is_null())
        if unused.height == 0:
            return
        prefixed = unused.filter(pl.col("msg").is_not_null())
        self.diag.skip(_NOT_USED, prefixed.height, first_line(prefixed["line"]))
        bare = unused.filter(pl.col("msg").is_null())
        self.diag.skip(_NO_PREFIX, bare.height, first_line(bare["line"]))

    def _validated(self, used: pl.DataFrame) -> pl.DataFrame:
        """Each candidate kind's full pattern, applied to its own lines only (the literal test
        of :func:`_classify` picked them); lines it does not match are not used."""
        checks = [
            (pl.col("kind") == k.name)
            & ~pl.col("line" if k.name in _WHOLE_LINE_KINDS else "msg").str.contains(k.pattern)
            for k in pat.KINDS
            if k.name in self._kinds_seen(used)
        ]
        if not checks:
            return used
        bad = used.filter(pl.any_horizontal(checks))
        self.diag.skip(_NOT_USED, bad.height, first_line(bad["line"]))
        return used.filter(~pl.any_horizontal(checks))

    @staticmethod
    def _kinds_seen(used: pl.DataFrame) -> set[str]:
        return {k for k in used["kind"].unique().to_list() if k is not None}

    def _dispatch(self, used: pl.DataFrame) -> None:
        used = self._validated(used)
        kinds = used["kind"]
        batch = used.filter(kinds == "batch")
        if batch.height:
            self._note_families(batch.filter(pl.col("msg").str.contains(pat.BATCH.pattern)))
            for tag, line in batch.group_by("ranks").agg(pl.col("line").first()).iter_rows():
                if tag is not None:
                    self.tag_examples.setdefault(tag, line)
            self.keep("batch", extract.batch_fields(batch))
        retract = used.filter(kinds == "retract")
        if retract.height:
            self._note_families(retract)
            self.keep("retract", extract.retractions(retract))
        self.keep("oom_text", used.filter(kinds.is_in(["torch_oom", *_WHOLE_LINE_KINDS])))
        self.keep("dead", used.filter(kinds == "engine_dead").select("ts", "ranks", "msg"))
        self.keep("no_kv", used.filter(kinds == "no_kv_memory").select("ts", "line"))
        startup = used.filter(kinds.is_in(list(extract.STARTUP_KINDS)))
        self.keep("startup", extract.startup_fields(startup))
        self.keep(
            "requests", extract.requests(used.filter(kinds.is_in(["receive", "finish"])), self.diag)
        )
        # the OOM shapes' pattern on the few candidate lines only: on every line it cost about a
        # third of a millisecond each (0.66 s for a sample incident's 2,000 lines)
        oom_lines = used.filter(kinds == "torch_oom")
        not_oom = oom_lines.filter(~pl.col("line").str.contains(OOM_SHAPES))
        self.diag.skip(
            "mentions memory but is no known out-of-memory message",
            not_oom.height,
            first_line(not_oom["line"]),
        )
        self.diag.lines_recognised += used.filter(kinds != "batch").height - not_oom.height

    def _note_families(self, frame: pl.DataFrame) -> None:
        # Only families newer than the newest seen so far can change the answer.
        for family in pat.FAMILIES:
            if family.name in self.families:
                return
            if frame["msg"].str.contains(family.marker).any():
                self.families.add(family.name)
                return

    def finish(self, *, untimed_allowed: bool = True) -> ParseResult:
        self._place_pending(untimed_allowed)
        result = ParseResult(engine={"name": "sglang", "version_family": self._family()})
        samples = [self._batch_samples()]
        events = [
            extract.retraction_events(self._all("retract")),
            extract.dead_events(self._all("dead")),
            extract.no_kv_memory_events(self._all("no_kv")),
        ]
        retract_samples = extract.retraction_samples(self._all("retract"))
        samples.append(retract_samples)
        oom_text = self._all("oom_text")
        if oom_text.height == 0:
            oom_text = pl.DataFrame(schema=KIND_LINES)
        events.append(extract.kv_pool_oom_events(oom_text))
        # the frames kept beside the failures say what the engine was doing (distances count
        # the kept lines, in the log's order)
        lines = oom_text.select("ts", text="line").with_row_index("line").cast({"line": pl.Int64})
        torch_events, torch_samples = extract_ooms(
            failure_phases(lines, OOM_SHAPES).drop("line"), diag=self.diag
        )
        events.append(torch_events)
        samples.append(torch_samples)
        startup = self._all("startup")
        events.append(extract.start_events(startup))
        config, model, notes = extract.engine_config(startup)
        for note in notes:
            self.diag.note(note)
        result.engine_config, result.model = config, model
        result.samples = _concat(samples)
        result.events = _concat(events)
        result.requests = _concat([self._all("requests")])
        result.clock = self._clock()
        if self.untimed:
            result.events = untimed_rows(result.events)
            result.samples = untimed_rows(result.samples)
            result.requests = untimed_rows(result.requests)
        return result

    def _all(self, name: str) -> pl.DataFrame:
        frames = self.frames.get(name, [])
        return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()

    def _place_pending(self, untimed_allowed: bool) -> None:
        """The lines that came before any time: at the first time where the log has one; in a
        log with none (a paste without SGLang's prefixes), in file order without a time, to be
        anchored where another input saw the same failure
        (:mod:`oomtrace.ingest.alignment.anchoring`)."""
        pending = self._all("pending")
        if pending.height == 0:
            return
        first = self.first_ts
        if first is not None:
            self.diag.note(
                f"{pending.height} line(s) came before the first timestamp; placed at the first "
                "timestamp"
            )
            self._dispatch(pending.drop(_NUMBER).with_columns(ts=pl.lit(first, TS)))
        elif untimed_allowed:
            self.untimed = True
            self.diag.note(
                "these SGLang lines carry no time (pasted without SGLang's [date time] prefix): "
                "their rows keep their order and are placed only where another input of the "
                "incident saw the same failure; the others stay without a time"
            )
            self._dispatch(pending.with_columns(ts=line_instant(pl.col(_NUMBER))).drop(_NUMBER))
        else:
            self.diag.skip(
                "SGLang line with no time anywhere in the input",
                pending.height,
                first_line(pending["line"]),
            )

    def _batch_samples(self) -> pl.DataFrame:
        batch = self._all("batch")
        if batch.height == 0:
            return pl.DataFrame()
        lead = extract.lead_tag(batch["ranks"].unique().to_list())
        kept = batch.filter((pl.col("ranks") == lead) | pl.col("ranks").is_null())
        others = batch.height - kept.height
        if others:
            example = next((v for k, v in self.tag_examples.items() if k != lead), None)
            self.diag.skip(
                f"batch line of another rank (kept {lead or 'the untagged rank'})", others, example
            )
        self.diag.lines_recognised += kept.height
        return extract.batch_samples(kept)

    def _family(self) -> str | None:
        return next((f.name for f in pat.FAMILIES if f.name in self.families), None)

    def _clock(self) -> dict[str, Any]:
        if self.outer_gap_s is not None:
            self.diag.note(
                f"SGLang's own times differ from the outer (kubectl/docker) times by "
                f"{self.outer_gap_s:+.0f} s; used the outer times, which carry a zone"
            )
        if self.offset_note is not None:
            self.diag.note(
                f"SGLang's zone-less times read as {self.offset_note}, from arrival times"
            )
            return {"tz": self.offset_note, "tz_assumed": False}
        if not self.own_stamps:
            return {}
        if self.ctx.clock.tz is None:
            self.diag.note(
                "SGLang prints local time without a zone; read as UTC (pass --tz with the "
                "server's zone)"
            )
        clock: dict[str, Any] = {"tz": self.tz, "tz_assumed": self.ctx.clock.tz is None}
        if self.day_clock is not None:
            self.diag.note(
                "this SGLang release prints the time of day only ([HH:MM:SS TP0]): the dates are "
                "placed from the file's modification time (the last line on its day, "
                f"{self.midnights} midnight(s) passed before it); the order is kept, the day is "
                "an assumption"
            )
            # the date, year included, is a guess: alignment may move it like a year-less log's
            given = self.ctx.clock.year is not None
            clock.update(
                year=self.day_clock.first_day.year, year_source="option" if given else "mtime"
            )
        return clock


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame | None:
    present = [f for f in frames if f.height]
    return pl.concat(present, how="diagonal_relaxed") if present else None


class SGLangLogParser:
    """The ``sglang-log`` format (also a :class:`~oomtrace.ingest.parser_api.LineParser`)."""

    name = "sglang-log"
    description = "SGLang server log: batch lines, retractions, startup memory, requests, OOMs"

    def sniff(self, head: str, name: str) -> float:
        if "\x00" in head:
            return 0.0
        lines = head.splitlines()[:400]
        prefixed = sum(1 for line in lines if _SNIFF_PREFIX.search(line))
        if not prefixed:
            if (
                _SNIFF_PYTHON_LOGGING.search(head)
                or _SNIFF_RANKED_LOGGING.search(head)
                or _SNIFF_BRACKETED_FIELDS.search(head)
            ):
                return 0.9
            if _SNIFF_LOST_BRACKET.search(head):
                return 0.6
            # above pytorch-log's, which would read a bare KV-pool OOM's torch lines only
            return 0.6 if _SNIFF_BARE.search(head) else 0.0
        if any(_SNIFF_MESSAGES.search(line) for line in lines):
            return 0.95
        # "[date time] message" alone is a common Python logging format; rank tags are SGLang's.
        if any(_SNIFF_RANKS.search(line) for line in lines):
            return 0.8
        return 0.45

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        acc = _Acc(ctx, diag)
        if ctx.mtime is not None and _SNIFF_TIME_ONLY.search(source.head()):
            found = time_of_day.scan(source, ctx.mtime, acc.tz, ctx.clock.year)
            if found is not None:
                acc.day_clock, acc.midnights = found
        for chunk in source.line_chunks(diag):
            acc.add(chunk.lines)
        return acc.finish()

    def parse_lines(
        self, lines: pl.DataFrame, ctx: ParseContext, diag: SourceDiagnostics
    ) -> ParseResult:
        diag.lines_read += lines.height
        acc = _Acc(ctx, diag)
        arrival = lines["arrival_ts"] if "arrival_ts" in lines.columns else None
        acc.add(lines["line"].cast(pl.String), arrival)
        return acc.finish(untimed_allowed=False)


PARSER: Final = SGLangLogParser()
