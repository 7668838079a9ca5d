"""The replayed run as a canonical ``requests`` table, one row per lifecycle event.

This is what the engine *would have* logged under the replayed settings: ``arrived``,
``admitted`` (first admission) or ``resumed`` (after a preemption), ``first_token``,
``preempted`` (with the output tokens produced so far), ``finished`` (with the output length)
and ``rejected``. It goes through the same :func:`oomtrace.schema.conform` as any ingested
trace, so a what-if can be analysed, reported or written out as sample input like a recorded run.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.replay import kernel, runner
from oomtrace.replay.settings import ReplaySettings
from oomtrace.replay.workload import Workload
from oomtrace.schema import conform

SOURCE: Final = "oomtrace-replay"


def replayed_requests(
    workload: Workload, settings: ReplaySettings, *, node: str = "replay", source: str = SOURCE
) -> pl.DataFrame:
    """Replay ``workload`` under ``settings`` and return its canonical request events, in time
    order (ties: arrival order of the requests)."""
    raw = runner.simulate(workload, settings, record=True)
    base = workload.requests.with_row_index("i").select(
        pl.col("i").cast(pl.Int64), "request_id", "arrival", "arrival_ns", "prompt_tokens",
        "max_tokens", "output_tokens",
    )  # fmt: skip
    log = (
        pl.DataFrame(
            {"t": raw.log[0], "i": raw.log[1], "kind": raw.log[2], "extra": raw.log[3]},
            schema={"t": pl.Int64, "i": pl.Int64, "kind": pl.Int64, "extra": pl.Int64},
        )
        .with_row_index("seq")
        .with_columns(pl.col("seq").cast(pl.Int64))
    )
    log = log.join(base, on="i", how="left").sort("i", "seq")
    admits = log.filter(pl.col("kind") == kernel.LOG_ADMIT)
    # the first token comes at the end of a residency's prefill, if the residency lasts that long
    # and the request had produced nothing before it
    # the log is in request order: windows per request are single passes, not one group each
    preempted_with = pl.when(pl.col("kind") == kernel.LOG_PREEMPT).then(pl.col("extra"))
    nxt = log.with_columns(
        next_kind=g.following(pl.col("kind"), "i"),
        next_extra=g.following(pl.col("extra"), "i"),
        produced_before=g.prev(g.forward_fill(preempted_with, "i"), "i").fill_null(0),
    ).filter(pl.col("kind") == kernel.LOG_ADMIT)
    first_token = nxt.filter(
        (pl.col("produced_before") == 0)
        & ((pl.col("next_kind") == kernel.LOG_FINISH) | (pl.col("next_extra") > 0))
    ).select("i", "request_id", "seq", t=pl.col("extra"), event=pl.lit("first_token"))
    first_admit = admits.group_by("i").agg(pl.col("seq").min().alias("first_seq"))
    events = pl.concat(
        [
            base.select("i", "request_id", "prompt_tokens", "max_tokens", seq=pl.lit(-1, pl.Int64),
                        t="arrival_ns", event=pl.lit("arrived")),
            log.join(first_admit, on="i", how="left").select(
                "i", "request_id", "seq", "t",
                event=pl.when(pl.col("kind") == kernel.LOG_ADMIT)
                .then(pl.when(pl.col("seq") == pl.col("first_seq")).then(pl.lit("admitted"))
                      .otherwise(pl.lit("resumed")))
                .when(pl.col("kind") == kernel.LOG_PREEMPT).then(pl.lit("preempted"))
                .when(pl.col("kind") == kernel.LOG_FINISH).then(pl.lit("finished"))
                .otherwise(pl.lit("rejected")),
                output_tokens=pl.when(pl.col("kind") == kernel.LOG_PREEMPT).then("extra")
                .when(pl.col("kind") == kernel.LOG_FINISH).then("output_tokens"),
            ),
            first_token,
        ],
        how="diagonal_relaxed",
    )  # fmt: skip
    t0 = pl.lit(workload.t0, dtype=pl.Datetime("ns", "UTC"))
    frame = events.sort("t", "i", "seq").select(
        ts=t0 + pl.duration(nanoseconds=pl.col("t")),
        node=pl.lit(node),
        source=pl.lit(source),
        request_id="request_id",
        event="event",
        prompt_tokens="prompt_tokens",
        max_tokens="max_tokens",
        output_tokens="output_tokens",
    )
    return conform("requests", frame, what=f"replay of {workload.size} requests")
