"""Pool-level series by a sweep over the timeline's knots: never a samples x requests product.

Every segment's stored tokens are piecewise linear between its knots. At each knot the pool's
level changes by a jump (``Δlevel``) and its slope by ``Δslope``; after cumulative sums per node,
``L``, ``S`` and ``C = Σ Δslope·t_knot``, the pool at any time ``t`` is ``L + S·t - C`` taken as of
the last knot at or before ``t``. Evaluating at N sample times is one as-of join: the cost grows
with knots plus samples, never with their product.

Quantities swept: resident requests, stored tokens, KV bytes (whole blocks at each knot, linear in
between; without a bytes model, KV blocks instead), and the contract bytes (every resident request
at ``prompt_tokens + max_tokens``: what a reserve-the-whole-contract policy would hold). With
uniform blocks, KV blocks are KV bytes over bytes per block.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.analysis.grouped import per_request
from oomtrace.schema import TS
from oomtrace.timeline import NS_PER_S, Timeline

QUANTITIES: Final = ("tokens", "bytes")  # "blocks" instead of "bytes" without a bytes model
POOL_COLUMNS: Final = (
    "resident_requests",
    "stored_tokens",
    "kv_blocks",
    "kv_bytes",
    "contract_bytes",
)


def _seconds(ts: pl.Expr, t0: datetime) -> pl.Expr:
    return (ts - pl.lit(t0, dtype=TS)).dt.total_nanoseconds().cast(pl.Float64) / NS_PER_S


def _reference(timeline: Timeline) -> datetime:
    first = timeline.points["ts"].min()
    return first if isinstance(first, datetime) else datetime(2000, 1, 1, tzinfo=None)


def _quantities(timeline: Timeline) -> tuple[str, str]:
    return ("tokens", "bytes") if timeline.kv.has_bytes else ("tokens", "blocks")


def knot_deltas(timeline: Timeline) -> pl.DataFrame:
    """Per knot: the jumps of level and slope of each quantity, and of the resident count.
    Knots are sorted by segment (``sid``) and time; each segment's first knot adds it, its last
    removes it."""
    kv = timeline.kv
    t0 = _reference(timeline)
    second = kv.bytes_expr if kv.has_bytes else kv.blocks_expr
    quantities = _quantities(timeline)
    knots = timeline.points.select(
        "sid",
        "rid",
        per_request(timeline.requests["node"]).alias("node"),
        "ts",
        t=_seconds(pl.col("ts"), t0),
        tokens=pl.col("tokens").fill_null(0.0),
        **{quantities[1]: second(pl.col("tokens")).cast(pl.Float64).fill_null(0.0)},
    )
    first, last = g.is_first("sid"), g.is_last("sid")
    dt_next = g.following(pl.col("t"), "sid") - pl.col("t")
    dt_prev = pl.col("t") - g.prev(pl.col("t"), "sid")
    knots = knots.with_columns(
        (
            pl.when(last | (dt_next <= 0))
            .then(0.0)
            .otherwise((g.following(pl.col(q), "sid") - pl.col(q)) / dt_next)
        ).alias(f"s_{q}")
        for q in quantities
    )
    out: list[pl.Expr] = []
    for q in quantities:
        value, slope = pl.col(q), pl.col(f"s_{q}")
        prev_slope = g.prev(slope, "sid")
        carried = pl.when(first).then(0.0).otherwise(g.prev(value, "sid") + prev_slope * dt_prev)
        target = pl.when(last).then(0.0).otherwise(value)
        d_slope = pl.when(first).then(slope).otherwise(slope - prev_slope)
        out += [(target - carried).alias(f"dl_{q}"), d_slope.alias(f"ds_{q}")]
    contract = timeline.requests.select(
        kv.bytes_expr(pl.col("contract_tokens")).cast(pl.Float64).fill_null(0.0)
    ).to_series()
    step = first.cast(pl.Float64) - last.cast(pl.Float64)
    return knots.with_columns(*out, d_resident=step).select(
        "node",
        "ts",
        "t",
        *[c for q in quantities for c in (f"dl_{q}", f"ds_{q}")],
        "d_resident",
        d_contract=pl.col("d_resident") * per_request(contract),
    )


def pool_breakpoints(timeline: Timeline) -> pl.DataFrame:
    """Cumulative sums per node at every distinct knot time: the pool's state after each change.

    Columns ``node, ts, t`` and, per quantity, ``L_q, S_q, C_q`` (see the module docstring), plus
    ``R`` (resident requests) and ``K`` (contract bytes), and the evaluated pool columns at the
    breakpoint itself (:data:`POOL_COLUMNS`).
    """
    deltas = knot_deltas(timeline)
    frames = []
    for node in sorted(deltas["node"].unique().to_list()):
        mine = deltas.filter(pl.col("node") == node).sort("ts")
        cumulative: list[pl.Expr] = []
        for q in _quantities(timeline):
            cumulative += [
                pl.col(f"dl_{q}").cum_sum().alias(f"L_{q}"),
                pl.col(f"ds_{q}").cum_sum().alias(f"S_{q}"),
                (pl.col(f"ds_{q}") * pl.col("t")).cum_sum().alias(f"C_{q}"),
            ]
        cumulative += [
            pl.col("d_resident").cum_sum().alias("R"),
            pl.col("d_contract").cum_sum().alias("K"),
        ]
        # Several knots at one instant: the state after the last of them is the state then.
        state = mine.select("node", "ts", "t", *cumulative).filter(
            pl.col("ts").ne_missing(pl.col("ts").shift(-1))
        )
        frames.append(state)
    del deltas
    state = pl.concat(frames)
    return state.with_columns(
        _evaluate(pl.col("t"), state.columns, timeline.kv.bytes_per_block)
    ).with_columns(bytes_per_block=pl.lit(timeline.kv.bytes_per_block, dtype=pl.Int64))


def _evaluate(t: pl.Expr, columns: list[str], per_block: int | None) -> list[pl.Expr]:
    def at(q: str) -> pl.Expr:
        value = pl.col(f"L_{q}") + pl.col(f"S_{q}") * t - pl.col(f"C_{q}")
        return value.clip(lower_bound=0.0).round(0).cast(pl.Int64)

    none = pl.lit(None, dtype=pl.Int64)
    if "L_bytes" in columns:
        kv_bytes, contract = at("bytes"), pl.col("K").round(0).cast(pl.Int64)
        blocks = (kv_bytes / per_block).round(0).cast(pl.Int64) if per_block else none
    else:
        kv_bytes, contract, blocks = none, none, at("blocks")
    return [
        pl.col("R").round(0).cast(pl.Int64).alias("resident_requests"),
        at("tokens").alias("stored_tokens"),
        blocks.alias("kv_blocks"),
        kv_bytes.alias("kv_bytes"),
        contract.alias("contract_bytes"),
    ]


def pool_at(breakpoints: pl.DataFrame, at: pl.DataFrame, *, has_bytes: bool) -> pl.DataFrame:
    """The pool at arbitrary times: ``at`` (columns ``node, ts``, any order) gains
    :data:`POOL_COLUMNS` by one as-of join per node on the breakpoints; zero before the first
    knot. Rows keep their order."""
    if breakpoints.is_empty():
        return at.with_columns(
            *[pl.lit(0, dtype=pl.Int64).alias(c) for c in POOL_COLUMNS[:3]],
            *[pl.lit(0 if has_bytes else None, dtype=pl.Int64).alias(c) for c in POOL_COLUMNS[3:]],
        )
    sums = [c for c in breakpoints.columns if c[:2] in ("L_", "S_", "C_") or c in ("R", "K")]
    per_block = breakpoints["bytes_per_block"][0] if "bytes_per_block" in breakpoints else None
    state = breakpoints.select(
        "node", pl.col("ts").alias("_bp_ts"), pl.col("t").alias("_bp_t"), *sums
    )
    frame = at.with_row_index("_order").with_columns(_ts=pl.col("ts").cast(TS))
    nodes = frame["node"].unique(maintain_order=True).to_list()
    parts, reorder = [], len(nodes) > 1
    for node in nodes:
        mine = frame.filter(pl.col("node") == node) if len(nodes) > 1 else frame
        if not mine["_ts"].is_sorted():
            mine, reorder = mine.sort("_ts"), True
        joined = mine.join_asof(
            state.filter(pl.col("node") == node).drop("node"),
            left_on="_ts",
            right_on="_bp_ts",
            strategy="backward",
        )
        elapsed = (pl.col("_ts") - pl.col("_bp_ts")).dt.total_nanoseconds() / NS_PER_S
        t = (pl.col("_bp_t") + elapsed).fill_null(0.0)
        joined = joined.with_columns(pl.col(c).fill_null(0.0) for c in sums)
        parts.append(joined.with_columns(_evaluate(t, sums, per_block)))
    out = pl.concat(parts)
    if reorder:
        out = out.sort("_order")
    return out.select(*at.columns, *POOL_COLUMNS)


def pool_series(timeline: Timeline) -> pl.DataFrame:
    """The modelled pool at every breakpoint: ``node, ts`` and :data:`POOL_COLUMNS`."""
    if timeline.points.is_empty():
        return pl.DataFrame(
            schema={"node": pl.String, "ts": TS, **dict.fromkeys(POOL_COLUMNS, pl.Int64)}
        )
    return pool_breakpoints(timeline).select("node", "ts", *POOL_COLUMNS)
