"""The vLLM server log parser (``vllm-log``): every version family, V0 and V1.

What it reads (``docs/formats/vllm.md``; the patterns, per version family and each with a real
sample, are in :mod:`.line_patterns`, :mod:`.startup_patterns` and :mod:`.request_patterns`):

* periodic stats lines in all their forms -> samples ``requests_running``, ``requests_waiting``
  (V0 "Pending"), ``requests_swapped``, ``requests_deferred``, ``kv_usage_ratio`` (percent /
  100), ``preemptions_in_interval``, ``prefix_cache_hit_ratio`` and the two throughput rates;
  records glued onto one line are split; idle DEBUG repeats of unchanged stats are dropped;
* start-up lines -> ``engine_config`` (weights, profiling, KV budget, blocks, KV tokens,
  concurrency, CUDA graphs, engine arguments) and ``engine_start`` events; the KV-insufficient
  and no-KV refusals -> ``startup_kv_insufficient`` / ``startup_no_kv_memory`` events;
* request lines -> the request table (ids only, never text; see :mod:`.request_table`);
* V0 preemption warnings -> ``preemption`` events and ``preemptions_total`` samples;
* engine death lines -> one ``engine_dead`` event per death; PyTorch OOM text anywhere ->
  ``oom`` events through :func:`oomtrace.ingest.torch.oom_text.extract_ooms`.

``engine_config`` keys, where the log states them: ``num_gpu_blocks``, ``num_cpu_blocks``,
``block_size``, ``kv_cache_tokens``, ``max_concurrency``, ``max_concurrency_tokens``,
``max_model_len``, ``max_num_seqs``, ``max_num_batched_tokens``, ``gpu_memory_utilization``,
``model_weights_bytes``, ``available_kv_cache_bytes`` (negative when vLLM says so),
``cuda_graph_bytes``, ``model``, ``served_model_name``, ``dtype``, ``kv_cache_dtype``,
``quantization``, ``tensor_parallel_size`` (and pipeline, data parallel), ``enable_prefix_caching``,
``max_log_len``, the profiling figures (``device_total_bytes``, ``requested_memory_bytes``,
``profiled_weights_bytes``, ``activation_peak_bytes``, ``non_torch_bytes``,
``non_kv_cache_bytes``, ``initial_free_bytes``, ``torch_peak_bytes``) and timings
(``model_load_seconds``, ``cuda_graph_seconds``, ``init_engine_seconds``). The first statement
of a key wins; a later, different one (a restart) is a note.

Outer prefixes (journald, kubectl, docker-compose, Slurm, Ray, process prefixes, ANSI codes) are
read with the grammar of :mod:`oomtrace.ingest.text.outer_prefixes`, fused with vLLM's own
header into one pass (:mod:`.line_records`); times are placed by
:mod:`oomtrace.ingest.text.yearless_clock`. The same record printed by several ranks at the same
second counts once. Work is vectorised over chunks of
lines; see ``benchmarks/ingest_bench.py``.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import polars as pl

from oomtrace.diagnostics import WITHHELD, SourceDiagnostics
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, note_invalid_utf8
from oomtrace.ingest.text.yearless_clock import (
    ClockDecision,
    FullAnchor,
    combine,
    decide,
    report_disagreement,
)
from oomtrace.ingest.vllm.chunk_reading import (
    WORKERS,
    ReadChunk,
    input_size,
    read_chunk,
    read_chunks,
    reading_for,
)
from oomtrace.ingest.vllm.extract import Extracted
from oomtrace.ingest.vllm.file_tables import (
    UNTIMED_BESIDE_TIMED_NOTE,
    UNTIMED_NOTE,
    Ledger,
    before_first_time,
    event_rows,
    interval_preemptions,
    oom_records,
    oom_rows,
    stats_samples,
    untimed_instant,
    untimed_rows,
    with_ts,
)
from oomtrace.ingest.vllm.frames import CHUNK_CARRY, PRINTED_TIME
from oomtrace.ingest.vllm.line_patterns import BARE_SNIFF, SNIFF_MARKERS
from oomtrace.ingest.vllm.record_times import ChunkInfo
from oomtrace.ingest.vllm.request_table import finish_requests
from oomtrace.ingest.vllm.skipped_lines import (
    EMPTY,
    NO_HEADER,
    NOT_USED,
    UNKNOWN_STATS,
    UVICORN_LINE,
)
from oomtrace.ingest.vllm.startup_config import engine_config, version_family

_SNIFF_HEADER: Final = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +\d\d-\d\d \d\d:\d\d:\d\d \[?[^\s\]]+\.py:\d+\] "
)
_SNIFF_BARE: Final = re.compile(BARE_SNIFF)
# Records without their header are vLLM's only by their wording: below a parser that knows the
# file's shape, above PyTorch's OOM text (which this parser reads too).
BARE_CONFIDENCE: Final = 0.6
_NOT_CONFIG: Final = ("block_device", "kv_device")
__all__ = [
    "EMPTY", "NOT_USED", "NO_HEADER", "PARSER", "UNKNOWN_STATS", "UVICORN_LINE", "WITHHELD",
    "VllmLogParser",
]  # fmt: skip
NO_TIME: Final = "no timestamp could be placed"
ARRIVAL: Final = "collector arrival times"
REJOINED: Final = "piece of a record folded at a fixed width (read with the line before)"


class VllmLogParser:
    """``vllm-log``: a vLLM server's log file, or lines tailed from it."""

    name = "vllm-log"
    description = "vLLM server log (V0 and V1, 0.4 - 0.33), also behind journald/docker/k8s/Ray"

    def sniff(self, head: str, name: str) -> float:
        headers = len(_SNIFF_HEADER.findall(head))
        if headers == 0:
            return BARE_CONFIDENCE if _SNIFF_BARE.search(head) else 0.0
        if any(marker in head for marker in SNIFF_MARKERS) or "vllm" in name.lower():
            return 0.95
        return 0.7

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        run = _Run(ctx, diag, "kubectl/docker timestamps")
        run.untimed_allowed = True
        reading = reading_for(input_size(source))
        # Chunks share no state until finish(): they are read side by side (WORKERS of them)
        # and their results are added in file order.
        with ThreadPoolExecutor(WORKERS) as pool:
            for chunk in read_chunks(source, diag, run.tz, reading, pool):
                run.add(chunk)
        note_invalid_utf8(diag, run.invalid_lines)
        return run.finish()

    def parse_lines(
        self, lines: pl.DataFrame, ctx: ParseContext, diag: SourceDiagnostics
    ) -> ParseResult:
        diag.lines_read += lines.height
        columns = ["line", *(["arrival_ts"] if "arrival_ts" in lines.columns else [])]
        frame = lines.select(columns).with_columns(pl.col("line").str.strip_suffix("\r"))
        source = ARRIVAL if "arrival_ts" in columns else "outer timestamps"
        run = _Run(ctx, diag, source)
        run.feed(frame, 1)
        return run.finish()


PARSER: Final = VllmLogParser()


class _Run:
    """One file (or one batch of tailed lines) from first chunk to result."""

    def __init__(self, ctx: ParseContext, diag: SourceDiagnostics, full_source: str) -> None:
        self.ctx = ctx
        self.diag = diag
        self.full_source = full_source
        self.tz = ctx.clock.tz or "UTC"
        self.out = Extracted()
        self.infos: list[ChunkInfo] = []
        self.invalid_lines = 0
        # A file may be read without any time (its rows keep their order); tailed lines may not.
        self.untimed_allowed = False

    def feed(self, lines: pl.DataFrame, first_line: int) -> None:
        """Read one chunk (chunks must be fed in file order)."""
        chunk = read_chunk(lines, len(self.infos), first_line=first_line, tz=self.tz)
        self.add(chunk)

    def add(self, chunk: ReadChunk) -> None:
        self.diag.lines_read += chunk.lines
        self.invalid_lines += chunk.invalid_lines
        self.infos.append(chunk.info)
        self.out.merge(chunk.out)
        self.diag.lines_recognised += chunk.recognised
        for why, count, example in chunk.skipped:
            self.diag.skip(why, count, example)
        self.diag.skip(REJOINED, chunk.info.rejoined, None)

    def _full_source(self) -> str:
        """What gave the full times: the outer prefix most of the chunks' timed lines carry
        (Cloud Logging's, journald's, kubectl's or docker's), else what the run was told."""
        counts: dict[str, int] = {}
        for info in self.infos:
            for name, count in info.time_sources.items():
                counts[name] = counts.get(name, 0) + count
        if not counts or self.full_source == ARRIVAL:
            return self.full_source
        return min(counts, key=lambda name: (-counts[name], name))

    def finish(self) -> ParseResult:
        diag, out = self.diag, self.out
        bases, summary = combine([info.years for info in self.infos])
        decision = decide(
            summary,
            self.ctx.clock,
            mtime=self.ctx.mtime,
            full=self._anchor(bases),
            full_source=self._full_source(),
            all_full=self._timed > 0 and self._full == self._timed,
            diag=diag,
        )
        disagreement: dict[int, int] = {}
        for info in self.infos:
            for value, count in info.disagreement.items():
                disagreement[value] = disagreement.get(value, 0) + count
        report_disagreement(disagreement, self._full, self._full_source(), diag)
        chunks = self._chunk_table(bases)
        ledger = Ledger(diag)
        frames = {
            name: self._timed_frame(parts, decision, chunks, printed=name != "requests")
            for name, parts in (
                ("stats", out.stats),
                ("config", out.config),
                ("events", out.events),
                ("requests", out.requests),
                ("ooms", out.ooms),
            )
        }
        # Untimed: no record this reader keeps has or states a time of its own. Usually a file
        # none of whose lines has vLLM's header; also one whose timed lines are all of kinds not
        # kept (a worker's death lines below a bare OOM record), where before_first_time has no
        # record's time to lend and the bare records would be dropped.
        untimed = self.untimed_allowed and not any(
            f.height
            and (
                f.get_column("ts").is_not_null().any()
                or ("printed_month_day" in f.columns
                    and f.get_column("printed_month_day").is_not_null().any())
            )
            for f in frames.values()
        )  # fmt: skip
        if untimed:
            # Records pasted without their logger prefix (an issue, a wrapper's error): nothing
            # places them in time, but their order is the file's (see _untimed).
            headers = any(info.header_lines for info in self.infos)
            self.diag.note(UNTIMED_BESIDE_TIMED_NOTE if headers else UNTIMED_NOTE)
            frames = {name: f.with_columns(ts=untimed_instant()) if f.height else f
                      for name, f in frames.items()}  # fmt: skip
        else:
            frames = before_first_time(frames, self.diag)
        # What the engine states about itself needs no time: a start-up line quoted without its
        # header (a blog's two lines above the log) still says what the engine had.
        frames = {
            name: f if name == "config"
            else _placed(f, ledger, oom_records() if name == "ooms" else None)
            for name, f in frames.items()
        }  # fmt: skip
        config, version = (
            engine_config(frames["config"], ledger) if frames["config"].height else ({}, None)
        )
        samples: list[pl.DataFrame] = []
        events: list[pl.DataFrame] = []
        if frames["stats"].height:
            samples.append(stats_samples(frames["stats"], ledger))
            events.append(interval_preemptions(frames["stats"]))
        if frames["events"].height:
            found, totals = event_rows(frames["events"], config, ledger)
            events += [found]
            samples += [totals]
        if frames["ooms"].height:
            found, per_process = oom_rows(frames["ooms"], ledger)
            events += [found]
            samples += [per_process]
        requests = None
        if frames["requests"].height:
            rows = frames.pop("requests").drop(PRINTED_TIME, strict=False)
            requests = finish_requests(rows, config.get("max_log_len"), diag)
            del rows
        ledger.settle()
        self._notes()
        kind = config.pop("engine_kind", None)
        bracketed = sum(info.bracketed for info in self.infos) > 0
        engine = {"name": "vllm", "version_family": version_family(out.evidence, version, kind,
                                                                   bracketed)}  # fmt: skip
        if version:
            engine["version"] = version
        hosts: dict[str, int] = {}
        for info in self.infos:
            for host, count in info.hosts.items():
                hosts[host] = hosts.get(host, 0) + count
        result_samples, result_events = _concat(samples), _concat(events)
        if untimed:
            # every table, the requests too: a preempted request's row must not keep the
            # stand-in instant (1970) as a stated time
            result_samples = untimed_rows(result_samples)
            result_events = untimed_rows(result_events)
            requests = untimed_rows(requests)
        return ParseResult(
            samples=result_samples,
            requests=requests if requests is not None and requests.height else None,
            events=result_events,
            engine=engine,
            engine_config={k: v for k, v in config.items() if k not in _NOT_CONFIG},
            clock=decision.manifest,
            host=min(hosts, key=lambda h: (-hosts[h], h)) if hosts else None,
        )

    @property
    def _timed(self) -> int:
        return sum(info.timed_lines for info in self.infos)

    @property
    def _full(self) -> int:
        return sum(info.full_lines for info in self.infos)

    def _anchor(self, bases: list[int]) -> FullAnchor | None:
        for index in range(len(self.infos) - 1, -1, -1):
            anchor = self.infos[index].full_anchor
            if anchor is not None:
                return FullAnchor(anchor.md, anchor.tod, anchor.offset + bases[index], anchor.ts)
        return None

    def _chunk_table(self, bases: list[int]) -> pl.DataFrame:
        """Per chunk: its year-offset base, and the last printed time before it."""
        rows: list[tuple[int, int, int | None, int | None, int | None]] = []
        carry: tuple[int | None, int | None, int | None] = (None, None, None)
        for index, (info, base) in enumerate(zip(self.infos, bases, strict=True)):
            rows.append((index, base, *carry))
            if info.years.last is not None:
                md, tod, offset = info.years.last
                carry = (md, tod, offset + base)
        return pl.DataFrame(rows, schema=CHUNK_CARRY, orient="row")

    def _timed_frame(
        self,
        parts: list[pl.DataFrame],
        decision: ClockDecision,
        chunks: pl.DataFrame,
        *,
        printed: bool,
    ) -> pl.DataFrame:
        """The rows of ``parts`` with ``ts`` (null where no time places them).
        ``printed``: keep the printed time fields, completed across chunks (the de-duplication
        of ranks groups by them); without it, rows that all carry a full time skip them."""
        if not parts:
            return pl.DataFrame()
        frame = pl.concat(parts, how="diagonal_relaxed")
        parts.clear()  # the rows live on in `frame` alone
        if printed:
            frame = with_ts(frame, decision, chunks)
        else:
            # Chunks whose rows all carried a full time came with `ts` alone (settled).
            if "ts" in frame.columns and frame.get_column("ts").null_count() == 0:
                return frame
            if "ts" in frame.columns:
                frame = frame.rename({"ts": "_ts"})
            frame = with_ts(frame, decision, chunks)
            if "_ts" in frame.columns:
                frame = frame.with_columns(ts=pl.coalesce("_ts", "ts")).drop("_ts")
        return frame

    def _notes(self) -> None:
        glued = sum(info.glued for info in self.infos)
        collapsed = sum(info.ray_collapsed for info in self.infos)
        if glued:
            self.diag.note(
                f"{glued:,} record(s) were glued onto the end of another line (a missing "
                "newline); they were split and read"
            )
        if collapsed:
            self.diag.note(
                f"Ray's log de-duplication left out {collapsed:,} similar line(s) ('[repeated Nx "
                "across cluster]'); their values are not in this log (capture with "
                "RAY_DEDUP_LOGS=0)",
                lost=True,
            )


def _placed(frame: pl.DataFrame, ledger: Ledger, records: pl.Expr | None = None) -> pl.DataFrame:
    """``frame`` without the rows no time places (dropped; those ``records`` selects, default
    all, counted as records lost)."""
    if frame.height == 0 or not frame.select(pl.col("ts").is_null().any()).item():
        return frame
    lost = frame.filter(pl.col("ts").is_null())
    if records is not None:
        lost = lost.filter(records)
    ledger.lose(NO_TIME, lost.get_column("record_seq"))
    return frame.filter(pl.col("ts").is_not_null())


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame | None:
    frames = [f for f in frames if f.height]
    if not frames:
        return None
    return pl.concat(frames, how="diagonal_relaxed").sort("ts", maintain_order=True)
