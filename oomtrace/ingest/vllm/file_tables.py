"""From the extracted rows of a whole file to the canonical tables and manifest entries."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.alignment.anchoring import ORDER
from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.text.yearless_clock import ClockDecision, placed_utc
from oomtrace.ingest.torch import alloc_retry, oom_phase
from oomtrace.ingest.torch.oom_text import OOM_SHAPES, PREFILTER, extract_ooms, fold_wrappers
from oomtrace.ingest.vllm.frames import (
    CHUNK_CARRY,
    EVENT_ROWS,
    OOM_ROWS,
    PRINTED_TIME,
    SETTLED_REQUEST_ROWS,
    STATS_ROWS,
    timed,
)
from oomtrace.ingest.vllm.line_patterns import EVENT_LINES, PREEMPT_LOG_EVERY, STARTUP_REFUSALS
from oomtrace.schema import TS
from oomtrace.units import parse_bytes

RANK_REPEAT: Final = "repeated by another rank or process at the same second (counted once)"
STALE_STATS: Final = "stats line repeated at DEBUG while idle (stale values)"
# Lines of one engine death (worker, engine core, client, every in-flight request's traceback)
# arrive within seconds of each other; a gap longer than this starts another death.
DEATH_WINDOW_S: Final = 30
_METRICS: Final = {
    "prompt_tps": ("prompt_throughput_tokens_per_s", 1.0),
    "gen_tps": ("generation_throughput_tokens_per_s", 1.0),
    "running": ("requests_running", 1.0),
    "waiting": ("requests_waiting", 1.0),
    "swapped": ("requests_swapped", 1.0),
    "deferred": ("requests_deferred", 1.0),
    "preemptions": ("preemptions_in_interval", 1.0),
    "kv_pct": ("kv_usage_ratio", 0.01),
    "prefix_pct": ("prefix_cache_hit_ratio", 0.01),
}
UNTIMED_NOTE: Final = (
    "no line of this log carries a time (records pasted without their logger prefix): its "
    "events keep their order and are placed only where another input of the incident saw the "
    "same failure; the others stay without a time"
)
UNTIMED_BESIDE_TIMED_NOTE: Final = (
    "no record read from this log carries a time (its timed lines are of kinds not used, the "
    "records read were pasted without their logger prefix): its events keep their order and are "
    "placed only where another input of the incident saw the same failure; the others stay "
    "without a time"
)
_GAUGES: Final = ("running", "waiting", "swapped", "deferred", "kv_pct", "prefix_pct")
_DETAILS: Final = {e.name: e.detail for e in EVENT_LINES}
_OPTIONAL: Final = re.compile(r"\[([^\]]*)\]")
_FIELD: Final = re.compile(r"\{(\w+)\}")


def untimed_instant() -> pl.Expr:
    """A stand-in ``ts`` for a log with no time: its line's place in seconds from the epoch, so
    that repeats and deaths are told apart by lines (:func:`untimed_rows` takes it back).

    Lines are numbered within their piece (``piece * 2**32`` + the line in it,
    :func:`~.line_records.piece_first_line`); a piece of ``PIECE_BYTES`` (24 MiB) holds fewer
    than ``1 << 25`` lines, so piece and line are packed into 25 bits a piece: in range of the
    nanosecond clock for a log of up to 274 pieces (6.4 GiB), where the raw number was not past
    the second piece."""
    line = pl.col("record_seq") // 256
    place = (line // (1 << 32)) * (1 << 25) + line % (1 << 32)
    return pl.from_epoch(place, time_unit="s").dt.replace_time_zone("UTC").cast(TS)


def untimed_rows(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    """Rows of a log without times: their line as ``order`` and no time (see
    :mod:`oomtrace.ingest.alignment.anchoring`)."""
    if frame is None:
        return None
    return frame.with_columns(pl.col("ts").dt.epoch("s").alias(ORDER), ts=pl.lit(None, TS))


def with_ts(frame: pl.DataFrame, decision: ClockDecision, chunks: pl.DataFrame) -> pl.DataFrame:
    """Add ``ts``: the collector's arrival time, else the outer full timestamp, else the printed
    time placed by ``decision``. ``chunks`` (``chunk``, ``year_offset_base``, ``carried_month_day``,
    ``carried_second_of_day``, ``carried_year_offset``) gives each chunk's year-offset base and the
    printed time that lines before its first timestamp inherit from the chunks before."""
    check_frame(chunks, CHUNK_CARRY, "vLLM chunk carry")
    frame = frame.join(chunks, on="chunk", how="left", maintain_order="left").with_columns(
        printed_month_day=pl.coalesce("printed_month_day", "carried_month_day"),
        printed_second_of_day=pl.coalesce("printed_second_of_day", "carried_second_of_day"),
        year_offset=pl.coalesce(
            pl.col("year_offset") + pl.col("year_offset_base"), "carried_year_offset"
        ),
    )
    printed = placed_utc(
        pl.col("printed_month_day"),
        pl.col("printed_second_of_day"),
        pl.col("year_offset"),
        decision,
    )
    return frame.with_columns(ts=pl.coalesce("arrival_ts", "outer_ts", printed)).drop(
        "year_offset_base", "carried_month_day", "carried_second_of_day", "carried_year_offset"
    )


def settled(requests: pl.DataFrame) -> pl.DataFrame:
    """Request rows that all carry a full time: ``ts`` from it, and none of the printed-time
    fields that would otherwise wait for the whole file (the request table is the bulk of what
    a file accumulates)."""
    full = full_time(requests)
    if full is None:
        return requests
    settled = requests.drop(PRINTED_TIME).with_columns(full.alias("ts"))
    return check_frame(settled, SETTLED_REQUEST_ROWS, "vLLM settled request rows")


def full_time(frame: pl.DataFrame) -> pl.Series | None:
    """The collector's arrival time, else the outer timestamp, of every row; None when some row
    has neither."""
    arrival, outer = frame.get_column("arrival_ts"), frame.get_column("outer_ts")
    if arrival.null_count() == 0:
        return arrival
    if arrival.null_count() == arrival.len() and outer.null_count() == 0:
        return outer
    full = arrival.fill_null(outer)
    return full if full.null_count() == 0 else None


@dataclass
class Ledger:
    """Records dropped after they were counted as recognised (repeats, stale stats, no time),
    by reason. One record can feed several tables: :meth:`settle` counts it once."""

    diag: SourceDiagnostics
    lost: dict[str, list[pl.Series]] = field(default_factory=dict)

    def lose(self, reason: str, seqs: pl.Series) -> None:
        if seqs.len():
            self.lost.setdefault(reason, []).append(seqs)

    def settle(self) -> None:
        seen = pl.Series("record_seq", [], dtype=pl.Int64)
        for reason, parts in self.lost.items():
            seqs = pl.concat(parts).unique()
            seqs = seqs.filter(~seqs.is_in(seen.implode()))
            self.diag.skip(reason, seqs.len(), None)
            self.diag.lines_recognised -= seqs.len()
            seen = pl.concat([seen, seqs])
        self.lost.clear()


def drop_rank_repeats(frame: pl.DataFrame, keys: Iterable[str], ledger: Ledger) -> pl.DataFrame:
    """The same record at the same printed second from another process (tensor-parallel
    workers, Ray actors, Slurm tasks) counts once; repeats within one process are kept."""
    if frame.height == 0:
        return frame
    group = ["printed_month_day", "printed_second_of_day", "year_offset", *keys]
    keep = pl.col("proc").eq_missing(pl.col("proc").first().over(group, order_by="record_seq"))
    kept = frame.filter(keep)
    dropped = frame.filter(~keep).get_column("record_seq")
    ledger.lose(
        RANK_REPEAT, dropped.filter(~dropped.is_in(kept.get_column("record_seq").implode()))
    )
    return kept


def stats_samples(stats: pl.DataFrame, ledger: Ledger) -> pl.DataFrame:
    """Samples from the periodic stats lines (and V0's separate prefix-cache line)."""
    check_frame(stats, timed(STATS_ROWS), "vLLM stats rows")
    stats = stats.sort("record_seq").with_columns(
        pl.col(*_METRICS).cast(pl.Float64), pl.col("pending").cast(pl.Float64, strict=False)
    )
    stats = stats.with_columns(waiting=pl.coalesce("waiting", "pending"))
    stats = drop_rank_repeats(stats, ["engine", *_METRICS], ledger)
    stats = _drop_stale(stats, ledger)
    engines = stats.get_column("engine").drop_nulls().unique()
    if engines.len() > 1:
        ledger.diag.note(
            f"stats lines come from {engines.len()} data-parallel engines "
            f"({', '.join(sorted(engines.to_list()))}); their samples share one series per metric"
        )
    long = stats.select(
        "ts",
        *[(pl.col(c) * scale).alias(name) for c, (name, scale) in _METRICS.items()],
    ).unpivot(index="ts", variable_name="metric", value_name="value")
    return long.drop_nulls("value").select(
        "ts", pl.lit(None, pl.Int32).alias("device"), "metric", "value"
    )


def _drop_stale(stats: pl.DataFrame, ledger: Ledger) -> pl.DataFrame:
    """vLLM repeats the last stats at DEBUG when idle (issue 22545): the gauges did not change,
    so those lines add nothing and may be stale."""
    is_stats = pl.col("running").is_not_null()
    same = pl.all_horizontal(
        pl.col(c).eq_missing(pl.col(c).shift(1).over("engine", order_by="record_seq"))
        for c in _GAUGES
    )
    stale = (pl.col("level") == "DEBUG") & is_stats & same
    stale = stale.fill_null(value=False)
    ledger.lose(STALE_STATS, stats.filter(stale).get_column("record_seq"))
    return stats.filter(~stale)


def event_rows(
    events: pl.DataFrame, config: dict[str, Any], ledger: Ledger
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Events from the event lines, and the ``preemptions_total`` samples of V0 warnings."""
    check_frame(events, timed(EVENT_ROWS), "vLLM event rows")
    events = drop_rank_repeats(events, ["kind", "line_name", "captures_json"], ledger).sort(
        "record_seq"
    )
    rows: list[dict[str, Any]] = []
    totals: list[dict[str, Any]] = []
    for row in events.iter_rows(named=True):
        groups = json.loads(row["captures_json"]) if row["captures_json"] else {}
        out = {"ts": row["ts"], "kind": row["kind"], "detail": _detail(row, groups, config)}
        out |= _bytes(groups)
        if row["kind"] == "startup_no_kv_memory":
            out |= _no_kv(config)
        if row["kind"] == "preemption" and groups.get("total") is not None:
            totals.append({"ts": row["ts"], "value": float(groups["total"])})
        if row["repeat"] and row["repeat"] > 1:
            out["detail"] += f" (Ray: this line stood for {row['repeat']} similar lines)"
        rows.append(out)
    frame = pl.DataFrame(
        rows,
        schema={
            "ts": TS,
            "kind": pl.String,
            "detail": pl.String,
            "requested_bytes": pl.Int64,
            "total_bytes": pl.Int64,
            "free_bytes": pl.Int64,
        },
    )
    samples = pl.DataFrame(totals, schema={"ts": TS, "value": pl.Float64}).with_columns(
        metric=pl.lit("preemptions_total"), device=pl.lit(None, pl.Int32)
    )
    return _merge_runs(frame), samples.select("ts", "device", "metric", "value")


def _detail(row: dict[str, Any], groups: dict[str, Any], config: dict[str, Any]) -> str:
    if row["kind"] == "preemption":
        mode = str(groups.get("mode", "")).lower()
        return (
            f"request {groups.get('id')} preempted ({mode}) for lack of KV cache space; "
            f"cumulative preemptions: {groups.get('total')} (vLLM V0 logs only every "
            f"{PREEMPT_LOG_EVERY}th one)"
        )
    template = str(_DETAILS.get(row["line_name"], row["line_name"]))
    # A [bracketed] part of a template is left out where a group it names matched nothing.
    template = _OPTIONAL.sub(
        lambda part: "" if any(groups.get(name) is None for name in _FIELD.findall(part[1]))
        else part[1],
        template,
    )  # fmt: skip
    try:
        return str(template.format(**groups))
    except (KeyError, IndexError, ValueError):
        return template


def _bytes(groups: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in groups.items():
        if name.endswith("__gib") and value is not None:
            column = name.removesuffix("__gib")
            out[column] = max(parse_bytes(f"{value} GiB", allow_negative=True), 0)
    return out


def _no_kv(config: dict[str, Any]) -> dict[str, Any]:
    stated = config.get("available_kv_cache_bytes")
    if isinstance(stated, int) and stated <= 0:
        return {"free_bytes": 0}
    return {}


def _merge_runs(events: pl.DataFrame) -> pl.DataFrame:
    """One event per engine death and per start-up refusal, however many lines tell of it."""
    if events.height == 0:
        return events
    events = events.sort("ts", maintain_order=True)
    merged = pl.col("kind").is_in(["engine_dead", *STARTUP_REFUSALS])
    key = pl.when(pl.col("kind") == "engine_dead").then(pl.lit("")).otherwise(pl.col("detail"))
    events = events.with_columns(_key=key, _merged=merged)
    gap = (pl.col("ts") - pl.col("ts").shift(1)).over("kind", "_key").dt.total_seconds()
    starts = pl.col("ts").shift(1).over("kind", "_key").is_null() | (gap > DEATH_WINDOW_S)
    events = events.with_columns(_run=starts.cast(pl.Int64).cum_sum().over("kind", "_key"))
    singles = events.filter(~pl.col("_merged"))
    runs = (
        events.filter(pl.col("_merged"))
        .group_by("kind", "_key", "_run", maintain_order=True)
        .agg(
            pl.col("ts").first(),
            pl.col("detail").first(),
            pl.col("requested_bytes").first(),
            pl.col("total_bytes").first(),
            pl.col("free_bytes").first(),
            _n=pl.len(),
        )
        .with_columns(
            detail=pl.when(pl.col("_n") > 1)
            .then(pl.format("{} (and {} related line(s))", pl.col("detail"), pl.col("_n") - 1))
            .otherwise(pl.col("detail"))
        )
    )
    columns = ["ts", "kind", "detail", "requested_bytes", "total_bytes", "free_bytes"]
    return pl.concat([singles.select(columns), runs.select(columns)]).sort(
        "ts", maintain_order=True
    )


def interval_preemptions(stats: pl.DataFrame) -> pl.DataFrame:
    """A ``preemption`` event for every stats interval that reports preemptions (V1 0.12+)."""
    if "preemptions" not in stats.columns:
        return pl.DataFrame()
    hits = stats.filter(pl.col("preemptions").cast(pl.Float64) > 0)
    return hits.select(
        "ts",
        kind=pl.lit("preemption"),
        detail=pl.format(
            "{} preemption(s) in the stats interval ending here",
            pl.col("preemptions").cast(pl.Float64).cast(pl.Int64),
        ),
    )


def oom_records() -> pl.Expr:
    """The rows of the OOM table that are records (failures, the allocator's retry warnings),
    not the traceback frames read beside them for their phase: a frame is no record, so one left
    without a time is no record lost."""
    body = pl.col("body")
    return body.str.contains(PREFILTER) | body.str.contains(alloc_retry.SNIFF)


def oom_rows(ooms: pl.DataFrame, ledger: Ledger) -> tuple[pl.DataFrame, pl.DataFrame]:
    """PyTorch OOM events and per-process samples (shared extractor, after rank de-dup)."""
    check_frame(ooms, timed(OOM_ROWS), "vLLM OOM rows")
    # the traceback frames around each failure say what the engine was doing (each process's
    # lines apart: ranks interleave theirs); then only the failures go on
    lines = ooms.sort("record_seq").with_columns(line=pl.col("record_seq") // 256, text="body")
    # the allocator's retried allocations (warnings, never failures), each process's apart
    retried = alloc_retry.events(lines.select("ts", "text")) if _retries(lines) else None
    ooms = oom_phase.failure_phases(lines, OOM_SHAPES, by="proc").filter(
        pl.col("body").str.contains(PREFILTER)
    )
    ooms = drop_rank_repeats(ooms, ["body"], ledger)
    # The pid of the process prefix ("(EngineCore_DP0 pid=494) ") names the failing process.
    pid = pl.col("proc").str.extract(r"\bpid=(\d+)", 1).cast(pl.Int64, strict=False)
    events, samples = extract_ooms(
        ooms.select("ts", "phase", "shards", "proc", text="body", pid=pid), diag=ledger.diag
    )
    events = fold_wrappers(events)
    if retried is not None and retried.height:
        events = pl.concat([events, retried], how="diagonal_relaxed")
    return events, samples


def _retries(lines: pl.DataFrame) -> bool:
    return bool(lines.select(pl.col("text").str.contains(alloc_retry.SNIFF).any()).item())


def before_first_time(
    frames: dict[str, pl.DataFrame], diag: SourceDiagnostics
) -> dict[str, pl.DataFrame]:
    """``frames`` with the records above the first one the file places in time (an error quoted
    above the log it came from, a header-less line at the top) placed at that record's time, as
    SGLang's reader does, and a note; without it they would be dropped as unplaceable. A record
    that printed a time no calendar has (a daylight-saving gap, February 29 of a common year)
    stays unplaced wherever it is."""
    tables = {n: f for n, f in frames.items() if n != "config" and f.height and "ts" in f.columns}
    if not tables:
        return frames
    # each table's first timed record (its two columns only: the request rows are many)
    timed = [
        f.lazy().select("record_seq", "ts").filter(pl.col("ts").is_not_null()).sort("record_seq")
        for f in tables.values()
    ]
    firsts = pl.concat([f.head(1) for f in timed]).collect()
    if not firsts.height:
        return frames
    first = firsts.sort("record_seq").row(0, named=True)
    out = dict(frames)
    early = 0
    for name, frame in tables.items():
        stated = (
            pl.col("printed_month_day").is_not_null()
            if "printed_month_day" in frame.columns
            else pl.lit(value=False)
        )
        above = pl.col("ts").is_null() & (pl.col("record_seq") < first["record_seq"]) & ~stated
        count = frame.select(above.sum()).item()
        if count:
            early += count
            out[name] = frame.with_columns(
                ts=pl.when(above).then(pl.lit(first["ts"], TS)).otherwise(pl.col("ts"))
            )
    if early:
        diag.note(
            f"{early:,} record(s) came above the first one the log places in time (quoted above "
            "it, or without a header at its top); placed at that record's time"
        )
    return out
