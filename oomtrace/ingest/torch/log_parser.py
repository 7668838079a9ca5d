"""Any text log that holds PyTorch/CUDA out-of-memory messages: a training or serving script's
stdout, TGI's log (RFC 3339 UTC times), a llama.cpp log (ggml ``cudaMalloc failed``), a journald
export. Engine-specific parsers (vLLM, SGLang) handle their own logs, OOMs included; this one is
for everything else, so it sniffs modestly and steps aside when an engine's line shapes appear.

Each line's time is the first timestamp near its start in the forms of
:mod:`oomtrace.ingest.text.timestamps`; lines without one (traceback frames, the message itself)
inherit the previous line's time, and lines before the first timestamp take that first one (with
a note).

**A log with no timestamp at all** (llama.cpp by default, many scripts' stdout) keeps its order
but gets no made-up time: its rows leave with a null ``ts`` and their line number (``order``),
and :mod:`oomtrace.ingest.alignment.anchoring` places them where another input of the incident
saw the same failure, or keeps them un-timed. (The file's modification time is no time of the
incident once the file was copied or checked out.) llama.cpp's newer lines say how long after its
start each came (:mod:`oomtrace.ingest.torch.llamacpp_log`): a duration, not a time, so such a
log is one without times too. Lines handed over without a file (``parse_lines``) use their
arrival time instead.

Besides :func:`~oomtrace.ingest.torch.oom_text.extract_ooms`, TGI's own lines (its warm-up
refusals, the KV pool its warm-up settled on, the launcher's account of a crash:
:mod:`oomtrace.ingest.torch.tgi_log`) and llama.cpp's statement of its KV cache at start-up
(:mod:`oomtrace.ingest.torch.llamacpp_log`) and its server's requests, from its slot lines
(:mod:`oomtrace.ingest.torch.llamacpp_slots`) are read too, and TensorRT-LLM's KV pool, refusals
and out-of-memory failures (:mod:`oomtrace.ingest.torch.trtllm_log`), and the kernel's OOM
killer's kills (:mod:`oomtrace.ingest.torch.host_kill`: host memory, never a GPU OOM).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.alignment.anchoring import line_instant, untimed_rows
from oomtrace.ingest.nvidia_smi import table_parser
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, first_line
from oomtrace.ingest.text.outer_prefixes import strip_prefixes
from oomtrace.ingest.text.split_records import LOG_RECORD_START, find_split_records
from oomtrace.ingest.text.timestamps import SEARCH_CHARS, StampForms, line_stamps, tz_hint
from oomtrace.ingest.torch import (
    alloc_retry,
    gpu_xid,
    host_kill,
    llamacpp_log,
    llamacpp_slots,
    oom_backends,
    oom_phase,
    tgi_log,
    trtllm_log,
)
from oomtrace.ingest.torch.oom_text import (
    BUFFER_FAILURE,
    GGML_DEVICE,
    OOM_SHAPES,
    PREFILTER,
    TOLD_AGAIN,
    extract_ooms,
    fold_wrappers,
)
from oomtrace.schema import TS

CONFIDENCE: Final = 0.55
# Lines this parser reads: OOM messages, the lines around them that state the phase, and TGI's
# and llama.cpp's own lines about memory.
_USED: Final = (
    f"{OOM_SHAPES}|{BUFFER_FAILURE}|{oom_phase.LINES}|{tgi_log.LINES}|{llamacpp_log.STARTUP}|"
    f"{GGML_DEVICE}|{host_kill.LINE}|{llamacpp_log.KV_FULL}|{oom_backends.NCCL_CALLOC}|"
    f"{gpu_xid.LINE}|{alloc_retry.LINE}|{trtllm_log.LINES}|{llamacpp_slots.LINES}|"
    f"{oom_backends.GGML_LOAD}"
)
_KEEP: Final = (
    f"{PREFILTER}|{oom_phase.LINES}|Not enough memory to handle|{tgi_log.LINES}|"
    f"{llamacpp_log.STARTUP}|{GGML_DEVICE}|{host_kill.LINE}|{llamacpp_log.KV_FULL}|{gpu_xid.LINE}|"
    f"{alloc_retry.LINE}|{trtllm_log.LINES}|{llamacpp_slots.LINES}"
)
_SNIFF_OOM = re.compile(
    f"{OOM_SHAPES}|{BUFFER_FAILURE}|{tgi_log.WARMUP}|{host_kill.LINE}|{gpu_xid.LINE}|"
    f"{alloc_retry.SNIFF}|{oom_backends.GGML_LOAD}"
)
# LMDeploy's lines: its Python logger ("01/19 15:19:51 - turbomind - WARNING - ...", the date
# without its year) and TurboMind's C++ ones ("[TM][ERROR] CUDA runtime error: out of memory
# /lmdeploy/src/turbomind/utils/allocator.h:231", https://github.com/InternLM/lmdeploy/issues/1019,
# https://github.com/InternLM/lmdeploy/issues/1001).
LMDEPLOY_MARKERS: Final = (
    r"\d\d/\d\d \d\d:\d\d:\d\d - (?:turbomind|lmdeploy) - (?:DEBUG|INFO|WARNING|ERROR)\b"
    r"|\[TM\]\[(?:DEBUG|INFO|WARNING|ERROR)\]"
)
# A server log this parser reads even when its head holds no failure.
_SNIFF_SERVER = re.compile(
    f"{llamacpp_log.MARKERS.pattern}|{tgi_log.MARKERS}|{llamacpp_log.KV_SNIFF}|"
    f"{trtllm_log.MARKERS}|{llamacpp_slots.MARKERS}|{llamacpp_log.OLLAMA_MARKERS}|"
    f"{LMDEPLOY_MARKERS}",
    re.MULTILINE,
)
# Line shapes another parser owns: a log that has them belongs to that parser.
_ENGINE_SHAPES = re.compile(
    r"(?m)(?:^|\s)(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}[ .]"  # vLLM
    r"|\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: [A-Z][A-Z_]*\d+)*\] "  # SGLang
    r"(?:Decode batch|Prefill batch|server_args=|Load weight|KV Cache is allocated)"
)
# The engines whose own lines this parser recognises, each by what only it prints: the trace's
# engine is the one with the most such lines (Ollama's wherever it has any: its runner prints
# llama.cpp's), so that a remedy names that engine's own settings.
_ENGINES: Final = (
    ("ollama", llamacpp_log.OLLAMA_MARKERS),
    ("tgi", rf"{tgi_log.LINES}|text_generation_(?:launcher|router|client)\b"),
    ("tensorrt-llm", trtllm_log.MARKERS),
    (
        "llama.cpp",
        (
            f"{llamacpp_log.MARKERS.pattern}|{llamacpp_slots.MARKERS}|{llamacpp_log.KV_SNIFF}|"
            f"{llamacpp_log.STARTUP}|ggml_(?:backend_cuda_buffer_type_alloc_buffer|gallocr)"
        ),
    ),
    ("lmdeploy", LMDEPLOY_MARKERS),
)
_NOT_RELEVANT = "no out-of-memory message (not relevant)"
# A record's first line: a log's, or the kernel's (``kernel: NVRM: ...``, journald's ``-o cat``),
# whose lines of one width are no folded record.
_RECORD_START: Final = f"{LOG_RECORD_START}|{gpu_xid.RECORD_START}"
# What an nvidia-smi table's header box holds (a literal: the table reader is run only then).
_TABLE_HEAD: Final = "NVIDIA-SMI "


class PyTorchLogParser:
    """The ``pytorch-log`` format."""

    name = "pytorch-log"
    description = (
        "any text log with PyTorch/CUDA OOM messages (script stdout, TGI, llama.cpp, TensorRT-LLM)"
    )

    def sniff(self, head: str, name: str) -> float:
        if "\x00" in head:
            return 0.0
        if not _SNIFF_OOM.search(head):
            # llama.cpp's and TGI's logs are read for their failures, which may come after the
            # head, and for what they state about their KV cache
            return CONFIDENCE if _SNIFF_SERVER.search(head) else 0.0
        return 0.2 if _ENGINE_SHAPES.search(head) else CONFIDENCE

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        acc = _Acc(ctx, diag)
        for chunk in source.line_chunks(diag):
            acc.add(chunk.lines)
        return acc.finish(untimed_allowed=True)

    def parse_lines(
        self, lines: pl.DataFrame, ctx: ParseContext, diag: SourceDiagnostics
    ) -> ParseResult:
        diag.lines_read += lines.height
        acc = _Acc(ctx, diag)
        arrival = lines["arrival_ts"] if "arrival_ts" in lines.columns else None
        acc.add(lines["line"].cast(pl.String), arrival)
        return acc.finish(untimed_allowed=False)


class _Acc:
    def __init__(self, ctx: ParseContext, diag: SourceDiagnostics) -> None:
        self.ctx, self.diag = ctx, diag
        self.tz = ctx.clock.tz or "UTC"
        self.forms = StampForms()
        self.first_ts: datetime | None = None
        self.last_ts: datetime | None = None
        self.kept: list[pl.DataFrame] = []
        self.lines_seen = 0
        self.untimed = False
        self.durations = False
        self.tables: list[ParseResult] = []
        self.engine_lines = dict.fromkeys((name for name, _ in _ENGINES), 0)
        self.own_offset: str | None = None
        self.first_src: str | None = None
        self.last_src: str | None = None

    def add(self, lines: pl.Series, arrival: pl.Series | None = None) -> None:
        raw = lines
        lines = find_split_records(lines, starts=_RECORD_START, opens=OOM_SHAPES).lines
        stamps, forms = line_stamps(lines, self.tz, self.ctx.clock.year, self.ctx.mtime)
        self.forms += forms
        first = self.lines_seen + 1
        self.lines_seen += lines.len()
        frame = pl.DataFrame({"text": lines, "ts": stamps}).with_columns(
            line=pl.int_range(first, first + lines.len(), dtype=pl.Int64)
        )
        # the line each time was read from (its head), so that finish() can read it again once
        # the whole log has said its zone and year ("" where the time came from elsewhere)
        own = pl.col("ts").is_not_null()
        if arrival is not None:
            frame = frame.with_columns(ts=pl.coalesce("ts", arrival.cast(TS)))
        frame = frame.with_columns(
            src=pl.when(own)
            .then(pl.col("text").str.slice(0, SEARCH_CHARS + 60))
            .when(pl.col("ts").is_not_null())
            .then(pl.lit(""))
        ).with_columns(pl.col("ts", "src").forward_fill())
        if self.last_ts is not None:
            frame = frame.with_columns(
                pl.col("ts").fill_null(pl.lit(self.last_ts, TS)),
                pl.col("src").fill_null(pl.lit(self.last_src, pl.String)),
            )
        known = frame.filter(pl.col("ts").is_not_null())
        if known.height:
            if self.first_ts is None:
                self.first_ts, self.first_src = known["ts"][0], known["src"][0]
            self.last_ts, self.last_src = known["ts"][-1], known["src"][-1]
        for name, marks in _ENGINES:
            self.engine_lines[name] += int(lines.str.contains(marks).sum())
        self.durations = self.durations or bool(lines.str.contains(llamacpp_log.RELATIVE).any())
        if raw.str.contains(_TABLE_HEAD, literal=True).any():
            # an nvidia-smi table printed inside the log (TGI's `--env` report): its lines are
            # read and counted by the table reader, as printed (a table's lines are all of one
            # width, which the fold-joining above takes for a folded record)
            tables, read = table_parser.embedded_tables(raw, first, self.ctx, self.diag)
            self.tables.append(tables)
            frame = frame.filter(~pl.col("line").is_in(read.implode()))
        frame = frame.with_columns(text=tgi_log.join_pretty_args(pl.col("text")))
        keep = pl.col("text").str.contains(_KEEP)
        unused = frame.filter(~keep)
        self.diag.skip(_NOT_RELEVANT, unused.height, first_line(unused["text"]))
        self.kept.append(frame.filter(keep))

    def finish(self, *, untimed_allowed: bool) -> ParseResult:
        kept = (
            pl.concat(self.kept)
            if self.kept
            else pl.DataFrame(
                schema={"text": pl.String, "ts": TS, "line": pl.Int64, "src": pl.String}
            )
        )
        kept = self._place(self._restamp(kept), untimed_allowed).drop("src")
        config = {
            **tgi_log.engine_config(kept["text"], self.diag),
            **llamacpp_log.engine_config(kept["text"], self.diag),
            **trtllm_log.engine_config(kept["text"], self.diag),
        }
        used = kept.filter(pl.col("text").str.contains(_USED))
        self.diag.lines_recognised += used.height
        other = kept.height - used.height
        self.diag.skip(
            "mentions memory but is no known out-of-memory message",
            other,
            first_line(kept.filter(~pl.col("text").is_in(used["text"].implode()))["text"])
            if other
            else None,
        )
        # the process prefixes of each line ("(VllmWorker rank=0 pid=10672) "): each process's
        # lines are read apart for their phase, and the events keep the process that printed them
        timed = kept.drop_nulls("ts")
        timed = timed.with_columns(
            proc=strip_prefixes(timed.select(line="text")).get_column("proc")
        )
        timed = oom_phase.failure_phases(timed, OOM_SHAPES, by="proc")
        events, samples = extract_ooms(timed, diag=self.diag)
        events = fold_wrappers(events, TOLD_AGAIN) if events.height else events
        texts = timed.select("ts", "text")
        found = [
            f
            for f in (
                events,
                tgi_log.events(texts),
                host_kill.events(texts),
                gpu_xid.events(texts),
                alloc_retry.events(texts),
                llamacpp_log.kv_full_events(texts),
                trtllm_log.events(texts),
            )
            if f.height
        ]
        requests = llamacpp_slots.requests(texts)
        result = ParseResult(
            requests=requests if requests.height else None,
            events=pl.concat(found, how="diagonal_relaxed") if found else None,
            samples=samples if samples.height else None,
            clock=self._clock(),
            engine=self._engine(),
            engine_config=config,
        )
        if self.untimed:
            result.events = untimed_rows(result.events)
            result.samples = untimed_rows(result.samples)
            result.requests = untimed_rows(result.requests)
        for table in self.tables:
            _add_table(result, table)
        return result

    def _place(self, kept: pl.DataFrame, untimed_allowed: bool) -> pl.DataFrame:
        """Lines before the first timestamp take it. In a log with none, each line stands at
        its :func:`~oomtrace.ingest.alignment.anchoring.line_instant`, for the extraction's
        order and repeats only."""
        missing = kept.filter(pl.col("ts").is_null()).height
        if not missing:
            return kept
        first = self.first_ts
        if first is not None:
            self.diag.note(
                f"{missing} out-of-memory line(s) came before the first timestamp; placed at it"
            )
            return kept.with_columns(pl.col("ts").fill_null(pl.lit(first, TS)))
        if untimed_allowed:
            self.untimed = True
            self.diag.note(
                "this log prints no time: its events keep their order and are placed only where "
                "another input of the incident saw the same failure (the clock record says "
                "where); the others stay without a time"
            )
            if self.durations:
                self.diag.note(llamacpp_log.DURATIONS_NOTE)
            return kept.with_columns(ts=line_instant(pl.col("line")))
        self.diag.skip(
            "out-of-memory line with no time (no timestamps, no file time)",
            missing,
            first_line(kept["text"]),
        )
        return kept.filter(pl.col("ts").is_not_null())

    def _restamp(self, kept: pl.DataFrame) -> pl.DataFrame:
        """``kept`` with its times read again where the whole log says more than each chunk
        knew: the host's zone (:meth:`_own_zone`), and the year of a year-less time where a
        line states one (an Ollama line's ``time=2025-01-10T...`` beside journald's ``Jan 10
        16:31:40``: that year, not the file's modification time's)."""
        zone = self._own_zone(self.forms)
        dated = (
            self.forms.first_dated if self.ctx.clock.year is None and self.forms.syslog else None
        )
        if not zone and dated is None:
            return kept
        anchor = dated or self.ctx.mtime
        year = self.ctx.clock.year

        def again(heads: pl.Series) -> pl.Series:
            return line_stamps(heads, self.tz, year, anchor, dated_anchor=dated is not None)[0]

        if self.first_src:
            self.first_ts = again(pl.Series([self.first_src]))[0] or self.first_ts
        heads = kept.get_column("src")
        return kept.with_columns(ts=pl.coalesce(again(heads.fill_null("")), pl.col("ts")))

    def _own_zone(self, forms: StampForms) -> bool:
        """Where no ``--tz`` was given and the log holds times without a zone beside zoned ones
        that all state one whole-hour offset (journald's prefix over Ollama's
        ``time=...+01:00``), the zone-less ones are the same host's clock: read at that offset
        (wherever in the log the zoned lines are)."""
        if self.ctx.clock.tz is not None or self.own_offset is not None:
            return False
        if not (forms.syslog or forms.zoneless) or len(forms.offsets) != 1:
            return False
        offset = next(iter(forms.offsets))
        if offset[4:] != "00":
            return False
        self.own_offset = offset
        self.tz = f"Etc/GMT{'-' if offset[0] == '+' else '+'}{int(offset[1:3])}"
        return True

    def _engine(self) -> dict[str, object]:
        """The engine whose own lines the log holds (:data:`_ENGINES`); none where it holds
        none (a script's stdout, a PyTorch message pasted alone)."""
        if self.engine_lines["ollama"]:
            return {"name": "ollama"}
        lines, name = max((n, name) for name, n in self.engine_lines.items())
        return {"name": name} if lines else {}

    def _clock(self) -> dict[str, object]:
        clock: dict[str, object] = {}
        if len(self.forms.offsets) == 1:
            # the host's offset as the log's own zoned times state it (Ollama's "+01:00"): the
            # zone a year-less kernel or journald time of the same host was printed in
            clock["stated_offset"] = next(iter(self.forms.offsets))
        if self.own_offset is not None and (self.forms.zoneless or self.forms.syslog):
            clock.update(
                tz=self.tz,
                tz_assumed=False,
                tz_source=f"the log's zoned lines (UTC{self.own_offset})",
            )
            self.diag.note(
                f"timestamps without a zone are read at UTC{self.own_offset}, the offset this "
                "log's zoned lines state (pass --tz with the host's zone if it differed)"
            )
        elif self.forms.zoneless or self.forms.syslog:
            clock.update(tz=self.tz, tz_assumed=self.ctx.clock.tz is None)
            if self.ctx.clock.tz is None:
                self.diag.note(
                    "timestamps without a zone are read as UTC (pass --tz with the host's zone"
                    f"{tz_hint(clock.get('stated_offset'))})"
                )
        if self.forms.syslog:
            year_given = self.ctx.clock.year is not None
            clock.update(year_assumed=not year_given)
            if not year_given and self.forms.first_dated is not None:
                self.diag.note(
                    "year-less timestamps (syslog's, glog's) carry no year: taken from the year "
                    f"this log's dated lines state ({self.forms.first_dated:%Y-%m-%d}; the one "
                    "within half a year of it); pass --year to set it"
                )
            elif not year_given:
                self.diag.note(
                    "year-less timestamps (syslog's, glog's) carry no year: taken from the file's "
                    "modification time "
                    "(a date after it belongs to the year before); pass --year to set it"
                )
        return clock


def _add_table(result: ParseResult, table: ParseResult) -> None:
    """An embedded nvidia-smi table's rows (each at its own time line's time) added to the
    log's; its zone is the one the log's zoneless times are read in (the same ``--tz``)."""
    for name in ("samples", "events"):
        mine, theirs = getattr(result, name), getattr(table, name)
        if theirs is not None and theirs.height:
            both = theirs if mine is None else pl.concat([mine, theirs], how="diagonal_relaxed")
            setattr(result, name, both)
    result.device_index.update(table.device_index)
    for key, value in table.clock.items():
        result.clock.setdefault(key, value)


PARSER: Final = PyTorchLogParser()
