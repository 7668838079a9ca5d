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

Memory: a day of traffic has millions of knots. The sweep puts them in time order once (a
permutation) and builds each cumulative column on its own, and the breakpoints keep only the
sums (``t`` is recomputed from ``ts``); values are evaluated where they are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.analysis.grouped import per_request
from oomtrace.analysis.timeline import NS_PER_S, Timeline
from oomtrace.schema import TS

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


@dataclass(frozen=True)
class Breakpoints:
    """The pool's state after each change, per node: ``nodes`` maps a node to its frame of
    ``ts`` (distinct, sorted) and the cumulative sums ``L_q, S_q, C_q`` of each quantity, ``R``
    (resident requests) and ``K`` (contract bytes). ``t`` of a breakpoint is its ``ts`` in
    seconds after ``t0``."""

    nodes: dict[str, pl.DataFrame]
    t0: datetime
    has_bytes: bool
    bytes_per_block: int | None

    def is_empty(self) -> bool:
        return not self.nodes

    @property
    def height(self) -> int:
        return sum(frame.height for frame in self.nodes.values())

    def sums(self) -> list[str]:
        first = next(iter(self.nodes.values()))
        return [c for c in first.columns if c != "ts"]

    def evaluated(self, node: str, columns: tuple[str, ...] = POOL_COLUMNS) -> pl.DataFrame:
        """``ts`` and the chosen :data:`POOL_COLUMNS` at every breakpoint of ``node``."""
        frame = self.nodes[node]
        values = _evaluate(_seconds(pl.col("ts"), self.t0), frame.columns, self.bytes_per_block)
        blocks = _blocks(frame.columns, self.bytes_per_block) if "kv_blocks" in columns else []
        if blocks:
            columns = (*columns, "kv_bytes")
        return (
            frame.select("ts", *[v for v in values if v.meta.output_name() in columns])
            .with_columns(blocks)
            .select("ts", *[c for c in POOL_COLUMNS if c in columns])
        )

    def frames(self) -> Iterator[tuple[str, pl.DataFrame]]:
        yield from sorted(self.nodes.items())


def empty_breakpoints(timeline: Timeline) -> Breakpoints:
    return Breakpoints({}, datetime(2000, 1, 1), timeline.kv.has_bytes, timeline.kv.bytes_per_block)


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
    # with_columns, not select: without a bytes model the expression is a literal, and the
    # series must still hold one value per request
    contract = timeline.requests.with_columns(
        _contract=kv.bytes_expr(pl.col("contract_tokens")).cast(pl.Float64).fill_null(0.0)
    ).get_column("_contract")
    step = first.cast(pl.Float64) - last.cast(pl.Float64)
    return knots.with_columns(*out, d_resident=step).select(
        "rid",
        "ts",
        "t",
        *[c for q in quantities for c in (f"dl_{q}", f"ds_{q}")],
        "d_resident",
        d_contract=pl.col("d_resident") * per_request(contract),
    )


def pool_breakpoints(timeline: Timeline) -> Breakpoints:
    """Cumulative sums per node at every distinct knot time: the pool's state after each change
    (see :class:`Breakpoints`)."""
    if timeline.points.is_empty():
        return empty_breakpoints(timeline)
    deltas = knot_deltas(timeline)
    nodes = timeline.requests["node"]
    names = sorted(nodes.unique().to_list())
    frames: dict[str, pl.DataFrame] = {}
    for node in names:
        mine = deltas if len(names) == 1 else deltas.filter(per_request(nodes) == node)
        frames[node] = _sweep(mine, _quantities(timeline))
    del deltas
    return Breakpoints(
        frames, _reference(timeline), timeline.kv.has_bytes, timeline.kv.bytes_per_block
    )


def _sweep(deltas: pl.DataFrame, quantities: tuple[str, str]) -> pl.DataFrame:
    """One node's deltas in time order, summed: one permutation, then each cumulative column on
    its own (a day of knots is millions of rows; a sort of the whole frame would copy it all)."""
    order = deltas["ts"].arg_sort()
    ts = deltas["ts"].gather(order)
    # Several knots at one instant: the state after the last of them is the state then.
    keep = ts.ne_missing(ts.shift(-1))
    columns: dict[str, pl.Series] = {"ts": ts.filter(keep)}
    sums: list[tuple[str, pl.Expr]] = []
    for q in quantities:
        sums += [
            (f"L_{q}", pl.col(f"dl_{q}")),
            (f"S_{q}", pl.col(f"ds_{q}")),
            (f"C_{q}", pl.col(f"ds_{q}") * pl.col("t")),
        ]
    sums += [("R", pl.col("d_resident")), ("K", pl.col("d_contract"))]
    for name, expr in sums:
        step = deltas.select(expr).to_series().gather(order)
        columns[name] = step.cum_sum().filter(keep).alias(name)
    return pl.DataFrame(columns)


def _evaluate(
    t: pl.Expr,
    columns: list[str],
    per_block: int | None,
    sum_of: Callable[[str], pl.Expr] = pl.col,
) -> list[pl.Expr]:
    """The pool columns at ``t`` from the sums (``sum_of`` gives each sum's expression); KV
    blocks from the ``kv_bytes`` column, so they come in a second step where there are bytes."""

    def at(q: str) -> pl.Expr:
        value = sum_of(f"L_{q}") + sum_of(f"S_{q}") * t - sum_of(f"C_{q}")
        return value.clip(lower_bound=0.0).round(0).cast(pl.Int64)

    none = pl.lit(None, dtype=pl.Int64)
    if "L_bytes" in columns:
        kv_bytes, contract = at("bytes"), sum_of("K").round(0).cast(pl.Int64)
    else:
        kv_bytes, contract = none, none
    return [
        sum_of("R").round(0).cast(pl.Int64).alias("resident_requests"),
        at("tokens").alias("stored_tokens"),
        (none if "L_bytes" in columns else at("blocks")).alias("kv_blocks"),
        kv_bytes.alias("kv_bytes"),
        contract.alias("contract_bytes"),
    ]


def _blocks(columns: list[str], per_block: int | None) -> list[pl.Expr]:
    """KV blocks from KV bytes, with uniform blocks (the second step of :func:`_evaluate`)."""
    if "L_bytes" not in columns or not per_block:
        return []
    return [(pl.col("kv_bytes") / per_block).round(0).cast(pl.Int64).alias("kv_blocks")]


def pool_at(breakpoints: Breakpoints, at: pl.DataFrame, *, has_bytes: bool) -> pl.DataFrame:
    """The pool at arbitrary times: ``at`` (columns ``node, ts``, any order) gains
    :data:`POOL_COLUMNS` by one as-of join per node on the breakpoints; zero before the first
    knot. Rows keep their order. Only the breakpoint's row number travels through the join; each
    pool column gathers the sums it needs."""
    if breakpoints.is_empty():
        return at.with_columns(
            *[pl.lit(0, dtype=pl.Int64).alias(c) for c in POOL_COLUMNS[:3]],
            *[pl.lit(0 if has_bytes else None, dtype=pl.Int64).alias(c) for c in POOL_COLUMNS[3:]],
        )
    frame = at.with_row_index("_order").with_columns(_ts=pl.col("ts").cast(TS))
    nodes = frame["node"].unique(maintain_order=True).to_list()
    parts, reorder = [], len(nodes) > 1
    for node in nodes:
        mine = frame.filter(pl.col("node") == node) if len(nodes) > 1 else frame
        if not mine["_ts"].is_sorted():
            mine, reorder = mine.sort("_ts"), True
        parts.append(_at_node(breakpoints, node, mine))
    out = pl.concat(parts)
    if reorder:
        out = out.sort("_order")
    return out.select(*at.columns, *POOL_COLUMNS)


def _at_node(breakpoints: Breakpoints, node: str, mine: pl.DataFrame) -> pl.DataFrame:
    state = breakpoints.nodes.get(node)
    if state is None:
        state = next(iter(breakpoints.nodes.values())).clear()
    sums = breakpoints.sums()
    index = state.select(_bp_ts="ts").with_row_index("_bp")
    joined = mine.join_asof(index, left_on="_ts", right_on="_bp_ts", strategy="backward")
    bp_t = _seconds(pl.col("_bp_ts"), breakpoints.t0)
    elapsed = (pl.col("_ts") - pl.col("_bp_ts")).dt.total_nanoseconds() / NS_PER_S

    def gathered(column: str) -> pl.Expr:  # inline: no column of sums per sample is kept
        return pl.lit(state[column]).gather(pl.col("_bp")).fill_null(0.0)

    per_block = breakpoints.bytes_per_block
    # t once as a column: inline, every quantity would recompute it from the timestamps.
    return (
        joined.with_columns(_t=(bp_t + elapsed).fill_null(0.0))
        .with_columns(_evaluate(pl.col("_t"), sums, per_block, gathered))
        .with_columns(_blocks(sums, per_block))
        .drop("_bp", "_bp_ts", "_t")
    )


def pool_series(timeline: Timeline) -> pl.DataFrame:
    """The modelled pool at every breakpoint: ``node, ts`` and :data:`POOL_COLUMNS`."""
    if timeline.points.is_empty():
        return pl.DataFrame(
            schema={"node": pl.String, "ts": TS, **dict.fromkeys(POOL_COLUMNS, pl.Int64)}
        )
    breakpoints = pool_breakpoints(timeline)
    return pl.concat(
        [
            breakpoints.evaluated(node).select(pl.lit(node).alias("node"), "ts", *POOL_COLUMNS)
            for node, _ in breakpoints.frames()
        ]
    )
