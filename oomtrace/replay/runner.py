"""Run the fast simulator on a workload and turn its arrays into a :class:`ReplayResult`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import numpy as np
import polars as pl

from oomtrace.replay import kernel
from oomtrace.replay.compiled import Engine, simulator
from oomtrace.replay.results import (
    OUTCOME_SCHEMA,
    OUTCOMES,
    SERIES_SCHEMA,
    ReplayResult,
    ReplaySummary,
    TimeModel,
)
from oomtrace.replay.settings import ReplaySettings
from oomtrace.replay.workload import Workload

log = logging.getLogger(__name__)

SERIES_POINTS: Final = 1000


@dataclass(frozen=True)
class RawRun:
    """The simulator's arrays: per-request ``state`` (columns ``kernel.S_*``), one ``series``
    row per probe, and ``totals`` (see :func:`kernel.simulate`)."""

    state: Any
    series: Any
    totals: Any
    log: Any


def request_arrays(workload: Workload, settings: ReplaySettings) -> dict[str, Any]:
    """The int64 input arrays of :func:`kernel.simulate` for ``settings``: the workload's own
    columns without a copy (they are int64 without nulls), and the blocks each request holds."""
    frame = workload.requests

    def column(name: str) -> Any:
        return np.asarray(frame[name].to_numpy(), dtype=np.int64)

    p, o = column("prompt_tokens"), column("output_tokens")
    block = settings.block_size
    if settings.policy == "reserve":
        contract = p + np.maximum(column("max_tokens"), o)
        res = (contract + block - 1) // block
    else:
        res = (p + o - 1 + block - 1) // block
    arrays = {"arr": column("arrival_ns"), "p": p, "o": o}
    return arrays | {"pre": column("prefill_ns"), "dl": column("decode_ns_per_token"), "res": res}


def limits_array(settings: ReplaySettings, *, log_rows: int = 0, peaks: bool = True) -> Any:
    return np.array(
        [
            settings.block_size,
            kernel.RESERVE if settings.policy == "reserve" else kernel.ON_DEMAND,
            settings.max_num_seqs or 0,
            settings.max_num_batched_tokens or 0,
            -1 if settings.max_waiting is None else settings.max_waiting,
            log_rows,
            1 if peaks else 0,
        ],
        dtype=np.int64,
    )


def state_matrix(requests: int) -> Any:
    """The kernel's per-request state, zeros (see :func:`kernel.simulate`): made by NumPy,
    whose large arrays are zeroed lazily and in huge pages where the kernel offers them."""
    return np.zeros((requests, kernel.layout.NCOL), dtype=np.int64)


def log_rows(requests: int, preemptions: int) -> int:
    """Rows the event log can need: each request ends once (finished or rejected) and is admitted
    once more than it is preempted, and each preemption is a row."""
    return 2 * requests + 2 * preemptions + 1


def simulate(
    workload: Workload,
    settings: ReplaySettings,
    probes_ns: Any = None,
    arrays: dict[str, Any] | None = None,
    *,
    record: bool = False,
    peaks: bool = True,
    engine: Engine = "auto",
) -> RawRun:
    """Run the simulator (plain or compiled by the workload's size, see
    :mod:`oomtrace.replay.compiled`); ``probes_ns`` are sorted instants (ns from
    ``workload.t0``); ``record`` keeps the event log (admissions, preemptions, finishes,
    rejections); ``peaks`` reads the highest level between probes (else only the level)."""
    a = arrays if arrays is not None else request_arrays(workload, settings)
    probes = np.empty(0, dtype=np.int64) if probes_ns is None else np.asarray(probes_ns, np.int64)
    run = simulator(workload.size, engine)
    rows = log_rows(workload.size, workload.size) if record else 0  # reruns past n preemptions
    while True:
        state, series, totals, log = run(
            a["arr"], a["p"], a["o"], a["pre"], a["dl"], a["res"], settings.kv_blocks,
            limits_array(settings, log_rows=rows, peaks=peaks), probes,
            state_matrix(workload.size),
        )  # fmt: skip
        needed = log_rows(workload.size, int(totals[2])) if record else 0
        if needed <= rows:
            return RawRun(state, series, totals, log)
        rows = needed  # the log was made before the preemptions were known: once more, wider


def replay(
    workload: Workload, settings: ReplaySettings, *, series_points: int = SERIES_POINTS
) -> ReplayResult:
    """Replay ``workload`` under ``settings``; with ``series_points`` > 0 the pool series is read
    at that many evenly spaced instants from the first arrival to the last finish."""
    arrays = request_arrays(workload, settings)
    raw = simulate(workload, settings, arrays=arrays)
    series = empty_series()
    if series_points > 0 and workload.size:
        end = int(max(raw.state[:, kernel.S_FINISH].max(), arrays["arr"].max()))
        step = max(1, -(-end // series_points))
        probes = np.arange(step, step * -(-end // step) + 1, step, dtype=np.int64)
        raw = simulate(workload, settings, probes, arrays=arrays)
        series = series_frame(raw.series, probes, workload.t0, settings.kv_blocks)
    return result_from_raw(workload, settings, raw, series)


def empty_series() -> pl.DataFrame:
    return pl.DataFrame(schema=SERIES_SCHEMA)


def series_frame(series: Any, probes: Any, t0: datetime, kv_blocks: int) -> pl.DataFrame:
    """The pool read at each probe: the level just before it and the highest level since the
    previous probe, with running and waiting counts."""
    return (
        pl.DataFrame(
            {
                "ts": pl.Series(probes, dtype=pl.Int64),
                "kv_blocks_used": series[:, 0],
                "kv_blocks_peak": series[:, 3],
                "requests_running": series[:, 1],
                "requests_waiting": series[:, 2],
            }
        )
        .select(
            ts=pl.lit(t0, dtype=pl.Datetime("ns", "UTC")) + pl.duration(nanoseconds=pl.col("ts")),
            kv_blocks_used="kv_blocks_used",
            kv_blocks_peak="kv_blocks_peak",
            kv_usage_ratio=pl.col("kv_blocks_used") / kv_blocks,
            requests_running="requests_running",
            requests_waiting="requests_waiting",
        )
        .cast(SERIES_SCHEMA)
    )


def outcomes_frame(workload: Workload, state: Any) -> pl.DataFrame:
    """One row per request: replayed admission, finish, queueing delay, preemptions, outcome."""
    t0 = pl.lit(workload.t0, dtype=pl.Datetime("ns", "UTC"))

    def at(column: str) -> pl.Expr:
        ns = pl.col(column)
        return pl.when(ns >= 0).then(t0 + pl.duration(nanoseconds=ns))

    kernel_cols = pl.DataFrame(
        {
            "admit_ns": state[:, kernel.S_ADMIT],
            "finish_ns": state[:, kernel.S_FINISH],
            "preemptions": state[:, kernel.S_NPRE],
            "reason": state[:, kernel.S_REASON],
        }
    )
    frame = pl.concat([workload.requests, kernel_cols], how="horizontal")
    return frame.select(
        "request_id",
        "arrival",
        admitted=at("admit_ns"),
        finished=at("finish_ns"),
        queue_delay_s=pl.when(pl.col("admit_ns") >= 0).then(
            (pl.col("admit_ns") - pl.col("arrival_ns")) / 1e9
        ),
        preemptions="preemptions",
        outcome=pl.col("reason").replace_strict(dict(enumerate(OUTCOMES)), return_dtype=pl.String),
        prompt_tokens="prompt_tokens",
        output_tokens="output_tokens",
        output_source="output_source",
    ).cast(OUTCOME_SCHEMA)


def result_from_raw(
    workload: Workload, settings: ReplaySettings, raw: RawRun, series: pl.DataFrame
) -> ReplayResult:
    """The result of a run; its per-request outcomes are built when first read (a replay that
    only prints its summary never builds them)."""
    time_model = TimeModel(
        output_sources=workload.source_counts("output_source"),
        prefill_sources=workload.source_counts("prefill_source"),
        decode_sources=workload.source_counts("decode_source"),
        decode_fallback_tokens_per_s=workload.decode_fallback_tokens_per_s,
        prefill_fallback_tokens_per_s=workload.prefill_fallback_tokens_per_s,
    )
    summary = summarise(workload, settings, raw)
    state = raw.state
    return ReplayResult(
        settings,
        summary,
        series,
        time_model,
        workload.notes,
        outcomes_of=lambda: outcomes_frame(workload, state),
    )


def summarise(workload: Workload, settings: ReplaySettings, raw: RawRun) -> ReplaySummary:
    """The headline numbers, from the simulator's arrays (the outcomes frame is not needed)."""
    state = raw.state
    admit = pl.col("admit_ns")
    delays = (
        pl.DataFrame(
            {
                "arrival_ns": workload.requests["arrival_ns"],
                "admit_ns": state[:, kernel.S_ADMIT],
                "finish_ns": state[:, kernel.S_FINISH],
                "preemptions": state[:, kernel.S_NPRE],
                "reason": state[:, kernel.S_REASON],
            }
        )
        .with_columns(queue_delay_s=pl.when(admit >= 0).then((admit - pl.col("arrival_ns")) / 1e9))
        .select(
            p50=pl.col("queue_delay_s").quantile(0.5, interpolation="linear"),
            p99=pl.col("queue_delay_s").quantile(0.99, interpolation="linear"),
            top=pl.col("queue_delay_s").max(),
            finished=(pl.col("reason") == OUTCOMES.index("finished")).sum(),
            preempted=(pl.col("preemptions") > 0).sum(),
            too_large=(pl.col("reason") == OUTCOMES.index("rejected_too_large")).sum(),
            # as the outcomes' finish column reads it (a datetime to the microsecond)
            end=pl.lit(workload.t0, dtype=pl.Datetime("ns", "UTC"))
            + pl.duration(nanoseconds=pl.col("finish_ns").filter(pl.col("finish_ns") >= 0).max()),
        )
        .row(0, named=True)
    )
    peak, first_over, preemptions = (int(x) for x in raw.totals[:3])
    block_bytes = settings.block_bytes
    return ReplaySummary(
        overflow=first_over >= 0,
        overflow_ts=None if first_over < 0 else workload.t0 + _ns(first_over),
        peak_blocks=peak,
        peak_bytes=None if block_bytes is None else peak * block_bytes,
        preemptions=preemptions,
        preempted_requests=int(delays["preempted"]),
        rejections=workload.size - int(delays["finished"]),
        rejected_too_large=int(delays["too_large"]),
        requests=workload.size,
        finished=int(delays["finished"]),
        queue_delay_p50_s=delays["p50"],
        queue_delay_p99_s=delays["p99"],
        queue_delay_max_s=delays["top"],
        end_ts=delays["end"],
        max_running=int(raw.totals[3]),
    )


def _ns(value: int) -> timedelta:
    return timedelta(microseconds=value / 1000)
