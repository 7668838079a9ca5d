"""Pool-level series by a sweep over the timeline's knots: never a samples x requests product.

Every segment's stored tokens are piecewise linear between its knots. At each knot the pool's
level changes by a jump (``Δlevel``) and its slope by ``Δslope``. Per node, in time order, the
slope after each knot is the cumulative sum of ``Δslope``, and the level after it the cumulative
sum of ``Δlevel + slope·Δt`` (``Δt`` in whole nanoseconds since the knot before); the pool at any
time ``t`` is ``level + slope·(t - t_knot)`` as of the last knot at or before ``t``. Evaluating at
N sample times is one as-of join: the cost grows with knots plus samples, never with their
product.

A node's figures depend on its own knots alone, to the last bit: time enters only as integer
nanoseconds between two of the node's own instants (never as seconds since a start shared by all
nodes, which would round differently as other nodes start earlier or later), and no column is
divided by a constant (Polars multiplies by the reciprocal instead, except on a one-row column,
so the last bit would depend on how many rows a frame has). A modelled level that is exactly
half a token would otherwise round up beside one node's rows and down beside another's.

Quantities swept: resident requests, stored tokens, KV bytes (whole blocks at each knot, linear in
between; without a bytes model, KV blocks instead), and the contract bytes (every resident request
at ``prompt_tokens + max_tokens``: what a reserve-the-whole-contract policy would hold). With
uniform blocks, KV blocks are KV bytes over bytes per block.

Memory: a day of traffic has millions of knots. The sweep puts them in time order once (a
permutation) and builds each cumulative column on its own, and the breakpoints keep only the
sums; values are evaluated where they are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.analysis.grouped import per_request
from oomtrace.analysis.timeline import Timeline
from oomtrace.schema import TS

POOL_COLUMNS: Final = (
    "resident_requests",
    "stored_tokens",
    "kv_blocks",
    "kv_bytes",
    "contract_bytes",
)


def _nanoseconds(later: pl.Expr, earlier: pl.Expr) -> pl.Expr:
    return (later - earlier).dt.total_nanoseconds()


def _quantities(timeline: Timeline) -> tuple[str, str]:
    return ("tokens", "bytes") if timeline.kv.has_bytes else ("tokens", "blocks")


@dataclass(frozen=True)
class Breakpoints:
    """The pool's state after each change, per node: ``nodes`` maps a node to its frame of
    ``ts`` (distinct, sorted) and, after that instant, each quantity's ``level_q`` and
    ``slope_q`` (per nanosecond), ``resident`` (requests) and ``contract`` (bytes)."""

    nodes: dict[str, pl.DataFrame]
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
        values = _evaluate(None, frame.columns, self.bytes_per_block)
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
    return Breakpoints({}, timeline.kv.has_bytes, timeline.kv.bytes_per_block)


def knot_deltas(timeline: Timeline) -> pl.DataFrame:
    """Per knot: the jumps of level and slope (per nanosecond) of each quantity, and of the
    resident count. Knots are sorted by segment (``sid``) and time; each segment's first knot adds
    it, its last removes it."""
    kv = timeline.kv
    second = kv.bytes_expr if kv.has_bytes else kv.blocks_expr
    quantities = _quantities(timeline)
    knots = timeline.points.select(
        "sid",
        "rid",
        "ts",
        tokens=pl.col("tokens").fill_null(0.0),
        **{quantities[1]: second(pl.col("tokens")).cast(pl.Float64).fill_null(0.0)},
    )
    first, last = g.is_first("sid"), g.is_last("sid")
    dt_next = _nanoseconds(g.following(pl.col("ts"), "sid"), pl.col("ts"))
    dt_prev = _nanoseconds(pl.col("ts"), g.prev(pl.col("ts"), "sid"))
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
    if len(names) == 1:
        # the one node's deltas are handed over whole: the sweep lets each column go once used
        frames[names[0]] = _sweep(deltas, _quantities(timeline))
    for node in names if len(names) > 1 else ():
        frames[node] = _sweep(deltas.filter(per_request(nodes) == node), _quantities(timeline))
    del deltas
    return Breakpoints(frames, timeline.kv.has_bytes, timeline.kv.bytes_per_block)


def _sweep(deltas: pl.DataFrame, quantities: tuple[str, str]) -> pl.DataFrame:
    """One node's deltas in time order, summed: one permutation, then each cumulative column on
    its own (a day of knots is millions of rows; a sort of the whole frame would copy it all).
    Knots at one instant keep their order (a stable sort), so the sums run in the same order
    whatever other nodes hold. Takes ``deltas`` over: each of its columns is dropped from it once
    used (on a day, the deltas and the sums are each hundreds of megabytes)."""
    order = deltas.select(pl.arg_sort_by("ts", maintain_order=True)).to_series()
    ts = deltas.drop_in_place("ts").gather(order)
    # Several knots at one instant: the state after the last of them is the state then. One
    # chunk: a mask in two (a shift makes two) cuts every filtered column into two slices, and
    # a slice keeps its whole unfiltered buffer alive (the breakpoints would hold twice their
    # size: hundreds of megabytes on a day).
    keep = ts.ne_missing(ts.shift(-1)).rechunk()
    since_previous = ts.diff().dt.total_nanoseconds().fill_null(0)
    columns: dict[str, pl.Series] = {"ts": ts.filter(keep)}

    def summed(column: str) -> pl.Series:
        return deltas.drop_in_place(column).gather(order).cum_sum()

    for q in quantities:
        slope = summed(f"ds_{q}")
        # the level after a knot: the one after the knot before, moved along its slope, plus
        # this knot's jump
        moved = slope.shift(1, fill_value=0.0) * since_previous
        columns[f"slope_{q}"] = slope.filter(keep)
        del slope
        level = (deltas.drop_in_place(f"dl_{q}").gather(order) + moved).cum_sum()
        del moved
        columns[f"level_{q}"] = level.filter(keep)
        del level
    columns["resident"] = summed("d_resident").filter(keep)
    columns["contract"] = summed("d_contract").filter(keep)
    sums = [f"{kind}_{q}" for q in quantities for kind in ("level", "slope")]
    return pl.DataFrame(columns).select("ts", *sums, "resident", "contract")


def _evaluate(
    elapsed: pl.Expr | None,
    columns: list[str],
    per_block: int | None,
    sum_of: Callable[[str], pl.Expr] = pl.col,
) -> list[pl.Expr]:
    """The pool columns ``elapsed`` nanoseconds after a breakpoint (``None``: at it) from its
    sums (``sum_of`` gives each sum's expression); KV blocks from the ``kv_bytes`` column, so they
    come in a second step where there are bytes."""

    def at(q: str) -> pl.Expr:
        value = sum_of(f"level_{q}")
        if elapsed is not None:
            value = value + sum_of(f"slope_{q}") * elapsed
        return value.clip(lower_bound=0.0).round(0).cast(pl.Int64)

    none = pl.lit(None, dtype=pl.Int64)
    bytes_swept = "level_bytes" in columns
    if bytes_swept:
        kv_bytes, contract = at("bytes"), sum_of("contract").round(0).cast(pl.Int64)
    else:
        kv_bytes, contract = none, none
    return [
        sum_of("resident").round(0).cast(pl.Int64).alias("resident_requests"),
        at("tokens").alias("stored_tokens"),
        (none if bytes_swept else at("blocks")).alias("kv_blocks"),
        kv_bytes.alias("kv_bytes"),
        contract.alias("contract_bytes"),
    ]


def _blocks(columns: list[str], per_block: int | None) -> list[pl.Expr]:
    """KV blocks from KV bytes, with uniform blocks (the second step of :func:`_evaluate`)."""
    if "level_bytes" not in columns or not per_block:
        return []
    # In integers (half to even, as Polars rounds): a float quotient by a constant would take
    # its last bit from the frame's length (see the module's docstring).
    whole, rest = pl.col("kv_bytes") // per_block, 2 * (pl.col("kv_bytes") % per_block)
    up = (rest > per_block) | ((rest == per_block) & (whole % 2 == 1))
    return [(whole + up.cast(pl.Int64)).alias("kv_blocks")]


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

    def gathered(column: str) -> pl.Expr:  # inline: no column of sums per sample is kept
        return pl.lit(state[column]).gather(pl.col("_bp")).fill_null(0.0)

    per_block = breakpoints.bytes_per_block
    # The time since the breakpoint once as a column: inline, every quantity would recompute it
    # from the timestamps. Before the first breakpoint the sums are zero and so is the time.
    elapsed = _nanoseconds(pl.col("_ts"), pl.col("_bp_ts")).fill_null(0)
    return (
        joined.with_columns(_elapsed=elapsed)
        .with_columns(_evaluate(pl.col("_elapsed"), sums, per_block, gathered))
        .with_columns(_blocks(sums, per_block))
        .drop("_bp", "_bp_ts", "_elapsed")
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
