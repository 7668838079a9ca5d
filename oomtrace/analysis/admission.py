"""Admission times the source does not state, inferred from the engine's running count.

Part of :mod:`oomtrace.analysis.timeline`. vLLM's log (V0 and V1) and SGLang's state when a request
arrived and when it finished, not when the scheduler first ran it; a queued request holds no KV, so
a residency counted from the arrival (basis ``arrived``) is an upper bound that can add up to more
than the pool. What these engines do state is the size of their running batch
(``requests_running``: vLLM's stats line and ``vllm:num_requests_running``, SGLang's batch lines).

Per node, with ``F(t)`` the requests that ended (finished or aborted) by ``t`` and ``R(t)`` the
running count stated at ``t``, ``A(t) = F(t) + R(t)`` requests had been admitted by ``t``. Under
first come, first served (the default policy of vLLM and SGLang) the ``k``-th request in arrival
order was admitted at the first stats time ``t_j`` with ``A(t_j) >= k``: within ``(t_{j-1},
t_j]``. Its start becomes the **earliest admission that interval allows** (the later of its
arrival and ``t_{j-1}``; its arrival when ``j`` is the first sample; the last stats time when the
count never reaches it), basis ``running_count``: still an upper bound on its residency, now
within one stats interval of the truth. ``start_latest`` keeps the other end of the interval
(``t_j``; null where the count never reached the request).

* A request is never admitted after its first token or its end: nor, under first come, first
  served, after a request that arrived later was seen running or ended. So the bounds are clamped
  to the earliest first token or end of the request and all that arrived after it, which keeps
  every estimate within ``[arrival, first token or end]`` and non-decreasing in arrival order.
* ``A`` is made monotone (its running maximum). A preempted request (vLLM V1 puts it back at the
  head of the waiting queue) leaves the running batch without ending, so ``F + R`` dips by one
  until it is resumed; under strict first come, first served nothing behind it is admitted
  meanwhile, so the running maximum is the admitted count. The bias left: a preemption and new
  admissions inside the same stats interval make the count low until the resume, so those
  admissions are inferred later (by the time the preempted request waits). A request aborted
  while still queued counts as ended: the requests after it are inferred earlier (the upper
  bound side).
* Counts restart at every engine reset (death or start): requests are ranked, and ends and
  samples counted, per node and engine epoch.
* One running-count series per node: where several sources state it, the one with the most
  samples (then the first by name). Several series in that source at one instant (data-parallel
  engines) are summed.

Only residencies with basis ``arrived`` move, and only on nodes with a running count that never
state an admission; elsewhere the timeline is unchanged. Cost grows with requests + samples: one
sort of the requests, one of the ends and samples, and an as-of join.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.analysis.grouped import per_request
from oomtrace.schema import TS

BASIS: Final = "running_count"
GROUP: Final = ["node", "epoch"]
_FAR: Final = pl.lit(2**62, pl.Int64).cast(TS)  # stands for "no bound" inside minima


def running_counts(samples: pl.DataFrame) -> pl.DataFrame:
    """``node, ts, value`` of one ``requests_running`` series per node (see the module
    docstring), sorted by node and time."""
    empty = pl.DataFrame(schema={"node": pl.String, "ts": TS, "value": pl.Int64})
    if samples.is_empty() or "metric" not in samples.columns:
        return empty
    rows = samples.filter(pl.col("metric") == "requests_running").select(
        "node", "source", "ts", "value"
    )
    if rows.is_empty():
        return empty
    best = (
        rows.group_by("node", "source")
        .len()
        .sort(["node", "len", "source"], descending=[False, True, False], nulls_last=True)
        .unique("node", keep="first", maintain_order=True)
        .select("node", "source")
    )
    return (
        rows.join(best, on=["node", "source"], how="semi", nulls_equal=True)
        .group_by("node", "ts")
        .agg(pl.col("value").sum().round().cast(pl.Int64))
        .sort("node", "ts")
    )


def infer_admissions(
    segments: pl.DataFrame,
    summary: pl.DataFrame,
    samples: pl.DataFrame,
    resets: pl.DataFrame,
) -> pl.DataFrame:
    """``segments`` with the starts of basis ``arrived`` inferred from the running count where a
    node states one (see the module docstring), and a ``start_latest`` column (null where the
    start was not inferred)."""
    out = segments.with_columns(start_latest=pl.lit(None, dtype=TS))
    running = running_counts(samples)
    admitting = summary.filter(pl.col("admitted_ts").is_not_null())["node"].unique()
    nodes = running.filter(~pl.col("node").is_in(admitting.implode()))["node"].unique()
    arrived = out.filter(
        (pl.col("start_basis") == "arrived") & pl.col("node").is_in(nodes.implode())
    )
    if arrived.is_empty():
        return out
    running = running.filter(pl.col("node").is_in(nodes.implode()))
    firsts = _first_segments(out, summary, nodes)
    firsts = _with_epoch(firsts, "order_ts", resets)
    running = _with_epoch(running, "ts", resets)
    inferred = _bounds(firsts, _admitted_counts(firsts, running)).filter(
        (pl.col("start_basis") == "arrived") & pl.col("arrived_ts").is_not_null()
    )
    index = inferred["sid"].cast(pl.Int64) - 1
    return out.with_columns(
        start_ts=out["start_ts"].scatter(index, inferred["earliest"]),
        start_latest=out["start_latest"].scatter(index, inferred["latest"]),
        start_basis=out["start_basis"].scatter(
            index, pl.repeat(BASIS, inferred.height, dtype=pl.String, eager=True)
        ),
    )


def _first_segments(
    segments: pl.DataFrame, summary: pl.DataFrame, nodes: pl.Series
) -> pl.DataFrame:
    """The first residency of every request on ``nodes``, in admission order (arrival, requests
    seen without one first: they arrived before the trace), with what bounds its admission: its
    arrival and ``cap``, its first token or the end of that residency; and ``ended``, when the
    request finished or was aborted, for the count of ended requests."""
    ended = per_request(summary["end_event"]).is_in(["finished", "aborted"])
    return (
        segments.filter((pl.col("seg") == 1) & pl.col("node").is_in(nodes.implode()))
        .select(
            "sid",
            "rid",
            "node",
            "start_basis",
            arrived_ts=per_request(summary["arrived_ts"]),
            cap=pl.min_horizontal(per_request(summary["first_token_ts"]), "end_ts"),
            ended=pl.when(ended).then(per_request(summary["end_ts"])),
            # the epoch of a request seen without its arrival is that of its start
            order_ts=pl.coalesce(per_request(summary["arrived_ts"]), "start_ts"),
        )
        .sort("node", "arrived_ts", "rid", nulls_last=False)
    )


def _with_epoch(frame: pl.DataFrame, on: str, resets: pl.DataFrame) -> pl.DataFrame:
    """``epoch``: how many engine resets of the node came at or before ``on``."""
    if resets.is_empty():
        return frame.with_columns(epoch=pl.lit(0, pl.Int64))
    marks = (
        resets.select("node", "ts")
        .sort("node", "ts")
        .with_columns(epoch=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("node"))
        .sort("ts")
    )
    keyed = frame.with_row_index("_row").sort(on)
    joined = keyed.join_asof(
        marks, left_on=on, right_on="ts", by="node", strategy="backward", check_sortedness=False
    )
    return (
        joined.sort("_row")
        .drop("_row", *(["ts_right"] if "ts_right" in joined.columns else []))
        .with_columns(pl.col("epoch").fill_null(0))
    )


def _admitted_counts(firsts: pl.DataFrame, running: pl.DataFrame) -> pl.DataFrame:
    """Per node and epoch, the stats times at which the admitted count ``A`` first reached each
    new value: ``node, epoch, admitted, ts, prev_ts, last_ts`` (``prev_ts`` the stats time
    before). The ended requests by each stats time come from a binary search in their sorted end
    times, one per node and epoch (a handful), not from a sort of ends and samples together."""
    ends = firsts.filter(pl.col("ended").is_not_null()).select(*GROUP, "ended")
    ends_by = ends.partition_by(GROUP, as_dict=True, maintain_order=False)
    parts = []
    for key, stats in running.partition_by(GROUP, as_dict=True, maintain_order=True).items():
        mine = ends_by.get(key)
        times = mine["ended"].sort() if mine is not None else pl.Series("ended", [], dtype=TS)
        # an end stated at a stats instant counts as ended by then
        ended = times.search_sorted(stats["ts"], side="right").cast(pl.Int64)
        parts.append(stats.with_columns(ended=ended))
    counted = pl.concat(parts).with_columns(
        admitted=(pl.col("ended") + pl.col("value")).cum_max().over(GROUP),
        prev_ts=pl.col("ts").shift(1).over(GROUP),
        last_ts=pl.col("ts").last().over(GROUP),
    )
    rises = pl.col("admitted") > pl.col("admitted").shift(1).over(GROUP).fill_null(-1)
    return counted.filter(rises).select(*GROUP, "admitted", "ts", "prev_ts", "last_ts")


def _bounds(firsts: pl.DataFrame, counts: pl.DataFrame) -> pl.DataFrame:
    """Each request's admission interval ``[earliest, latest]`` (see the module docstring)."""
    ranked = firsts.with_columns(
        k=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(GROUP),
        # nothing is admitted after a request that arrived later was seen running or ended
        cap=pl.col("cap").fill_null(_FAR).reverse().cum_min().reverse().over(GROUP),
    )
    last = counts.group_by(GROUP).agg(pl.col("last_ts").first())
    found = (
        ranked.sort("k")
        .join_asof(
            counts.sort("admitted").drop("last_ts"),
            left_on="k",
            right_on="admitted",
            by=GROUP,
            strategy="forward",
            check_sortedness=False,  # both sorted by their key just above
        )
        .join(last, on=GROUP, how="left")
    )
    # Matched: after the stats time before the one that saw it (its arrival when none); never
    # reached: after the last stats time.
    low = pl.when(pl.col("ts").is_not_null()).then(pl.col("prev_ts")).otherwise(pl.col("last_ts"))
    low = pl.coalesce(low, "arrived_ts")
    earliest = pl.max_horizontal("arrived_ts", pl.min_horizontal(low, "cap"))
    latest = pl.min_horizontal(pl.col("ts").fill_null(_FAR), "cap")
    return (
        found.filter(pl.col("last_ts").is_not_null())
        .select(
            "sid",
            "start_basis",
            "arrived_ts",
            earliest=earliest.cast(TS),
            latest=pl.when(latest != _FAR).then(pl.max_horizontal(latest, earliest)).cast(TS),
        )
        .sort("sid")
    )
