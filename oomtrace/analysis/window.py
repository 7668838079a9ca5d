"""Per-request detail, materialised only inside an incident window.

The sweep (:mod:`oomtrace.analysis.pool`) never looks at one request at a time; here, for the few
hundred or thousand segments that overlap a window, each request's stored tokens are read off its
knots at given instants, with their bounds and basis (see :mod:`oomtrace.analysis.timeline`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.analysis.grouped import per_request
from oomtrace.analysis.timeline import KEYS, NS_PER_S, Timeline, lit_ts
from oomtrace.schema import TS

_FIGURES = ("tokens", "tokens_low", "tokens_high", "basis", "blocks", "bytes")


def tokens_at(timeline: Timeline, points: pl.DataFrame) -> pl.DataFrame:
    """``points`` (``sid``, ``rid`` and ``at``, plus anything else) gain ``tokens``
    (interpolated), ``tokens_low``, ``tokens_high``, ``basis``, ``blocks`` and ``bytes`` as of
    ``at`` within segment ``sid``."""
    if points.is_empty():
        return points.with_columns(
            pl.lit(None, pl.String if c == "basis" else pl.Int64).alias(c) for c in _FIGURES
        )
    points = points.with_columns(pl.col("at").cast(TS)).with_row_index("_row").sort("at")
    out = _figures(timeline, _bracket(timeline, points))
    original = [c for c in points.columns if c != "_row"]
    return (
        points.join(out.select("_row", *_FIGURES), on="_row", how="left")
        .sort("_row")
        .select(*original, *_FIGURES)
    )


def _bracket(timeline: Timeline, points: pl.DataFrame) -> pl.DataFrame:
    """Per point: the knots just before and after it, and the stated ones around it."""
    wanted = points["sid"].unique().implode()
    knots = timeline.points.filter(pl.col("sid").is_in(wanted)).sort("ts")
    stated = knots.filter(pl.col("stated"))

    def asof(right: pl.DataFrame, strategy: str, names: tuple[str, str]) -> pl.DataFrame:
        picked = right.select("sid", pl.col("ts").alias(names[0]), pl.col("tokens").alias(names[1]))
        return points.select("_row", "sid", "rid", "at").join_asof(
            picked,
            left_on="at",
            right_on=names[0],
            by="sid",
            strategy=strategy,  # type: ignore[arg-type]
            check_sortedness=False,  # both sides sorted on the asof key above
        )

    prev = asof(knots, "backward", ("ts_p", "y_p"))
    # The next knot strictly after: a knot at the instant itself is already the previous one.
    nxt = asof(knots, "forward", ("ts_n", "y_n")).with_columns(
        pl.when(pl.col("ts_n") > pl.col("at")).then(pl.col("ts_n")).alias("ts_n")
    )
    low = asof(stated, "backward", ("_ts_l", "low"))
    high = asof(stated, "forward", ("_ts_h", "high_stated"))
    return (
        prev.join(nxt.select("_row", "ts_n", "y_n"), on="_row")
        .join(low.select("_row", "low"), on="_row")
        .join(high.select("_row", "high_stated"), on="_row")
    )


def _figures(timeline: Timeline, joined: pl.DataFrame) -> pl.DataFrame:
    """Interpolated tokens, their bounds and basis (see :mod:`oomtrace.analysis.timeline`), and
    bytes."""
    summary = timeline.requests
    span = (pl.col("ts_n") - pl.col("ts_p")).dt.total_nanoseconds() / NS_PER_S
    into = (pl.col("at") - pl.col("ts_p")).dt.total_nanoseconds() / NS_PER_S
    value = (
        pl.when(pl.col("ts_n").is_not_null() & (span > 0))
        .then(pl.col("y_p") + (pl.col("y_n") - pl.col("y_p")) * into / span)
        .otherwise(pl.col("y_p"))
    )
    basis = (
        pl.when(pl.col("high_stated").is_null())
        .then(pl.lit("bounded"))
        .when(per_request(summary["progress_stated"]) > 0)
        .then(pl.lit("exact"))
        .otherwise(pl.lit("modelled"))
    )
    contract = per_request(summary["contract_tokens"]).cast(pl.Float64)
    out = joined.with_columns(
        tokens=value.round(0).cast(pl.Int64),
        tokens_low=pl.col("low").fill_null(0.0).round(0).cast(pl.Int64),
        tokens_high=pl.coalesce("high_stated", contract).round(0).cast(pl.Int64),
        basis=basis,
    )
    return out.with_columns(
        tokens_high=pl.max_horizontal("tokens_high", "tokens"),
        tokens_low=pl.min_horizontal("tokens_low", "tokens"),
        blocks=timeline.kv.blocks_expr(pl.col("tokens")),
        bytes=timeline.kv.bytes_expr(pl.col("tokens")),
    )


# A residency cut short at the very instant read (aborted, or ended by an engine reset) was
# still there: an engine that dies at its OOM aborts its requests in the same logged second.
_CUT: Final = ("aborted", "reset")


def resident_at(timeline: Timeline, node: str, at: datetime) -> pl.DataFrame:
    """Every request resident on ``node`` at ``at``, with its segment and figures."""
    return residents_with_ids(timeline, node, at).drop("sid", "rid")


def residents_with_ids(timeline: Timeline, node: str, at: datetime) -> pl.DataFrame:
    """:func:`resident_at` keeping the internal ``sid`` and ``rid`` (row keys of the timeline's
    segments and requests)."""
    end = pl.col("end_ts")
    segments = timeline.segments.filter(
        (pl.col("node") == node)
        & (pl.col("start_ts") <= lit_ts(at))
        & ((end > lit_ts(at)) | ((end == lit_ts(at)) & pl.col("end_basis").is_in(_CUT)))
    )
    points = segments.select(
        "sid", "rid", *KEYS, "start_ts", "start_basis", at=pl.lit(at, dtype=TS)
    )
    return tokens_at(timeline, points).drop("at")


def window_segments(timeline: Timeline, node: str, start: datetime, end: datetime) -> pl.DataFrame:
    """Segments overlapping ``[start, end]``, clipped to it, with tokens at both clipped ends:
    the swimlanes of a report."""
    segments = timeline.segments.filter(
        (pl.col("node") == node)
        & (pl.col("start_ts") <= lit_ts(end))
        & (pl.col("end_ts") >= lit_ts(start))
    ).select(
        "sid",
        "rid",
        *KEYS,
        "start_ts",
        "end_ts",
        "start_basis",
        "end_basis",
        from_ts=pl.max_horizontal("start_ts", pl.lit(start, dtype=TS)),
        to_ts=pl.min_horizontal("end_ts", pl.lit(end, dtype=TS)),
    )
    first = tokens_at(timeline, segments.with_columns(at=pl.col("from_ts")))
    last = tokens_at(timeline, segments.select("sid", "rid", at=pl.col("to_ts")))
    return first.select(
        *KEYS,
        "start_ts",
        "end_ts",
        "start_basis",
        "end_basis",
        "from_ts",
        "to_ts",
        tokens_from=pl.col("tokens"),
        basis=pl.col("basis"),
    ).with_columns(tokens_to=last["tokens"], bytes_to=last["bytes"], basis_to=last["basis"])
