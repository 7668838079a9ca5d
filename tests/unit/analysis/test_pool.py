"""The pool sweep kept per node, read at breakpoints and at arbitrary times."""

from __future__ import annotations

from typing import Any, Final

import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.analysis.kvmodel import kv_model
from oomtrace.analysis.pool import (
    POOL_COLUMNS,
    Breakpoints,
    pool_at,
    pool_breakpoints,
    pool_series,
)
from oomtrace.analysis.reconcile import modelled_index
from oomtrace.analysis.timeline import DecodeRate, Timeline, build_timeline
from oomtrace.schema import TS, empty
from oomtrace.trace import Manifest
from tests.factories import at, requests

KV = kv_model(
    Manifest(
        engine_config={
            "block_size": 16,
            "num_gpu_blocks": 1000,
            "available_kv_cache_bytes": 1000 * 16 * 1024,
        }
    ),
    empty("samples"),
)
NO_RESETS = pl.DataFrame(schema={"node": pl.String, "ts": TS})


def timeline(rows: list[dict[str, Any]], nodes: tuple[str, ...]) -> Timeline:
    return build_timeline(
        requests(*rows),
        KV,
        trace_end={n: at(100) for n in nodes},
        resets=NO_RESETS,
        rate=DecodeRate(10.0, "requests", "test"),
    )


def ev(t: float, rid: str, event: str, node: str, **counts: int) -> dict[str, Any]:
    return {"ts": at(t), "node": node, "request_id": rid, "event": event, **counts}


@st.composite
def two_nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 8))):
        node = draw(st.sampled_from(["a", "b"]))
        start = draw(st.integers(0, 40))
        rows.append(ev(start, f"r{i}", "admitted", node, prompt_tokens=draw(st.integers(0, 999))))
        if draw(st.booleans()):
            end = start + draw(st.integers(0, 30))
            rows.append(ev(end, f"r{i}", "finished", node, output_tokens=draw(st.integers(1, 99))))
    return rows


def probe(node: str, *seconds: float) -> pl.DataFrame:
    return pl.DataFrame(
        {"node": [node] * len(seconds), "ts": [at(s) for s in seconds]},
        schema={"node": pl.String, "ts": TS},
    )


def stored_tokens(rows: list[dict[str, Any]], nodes: tuple[str, ...], at_s: float) -> int:
    got = pool_at(pool_breakpoints(timeline(rows, nodes)), probe("a", at_s), has_bytes=True)
    return int(got["stored_tokens"].item())


def assert_each_node_alone(rows: list[dict[str, Any]], probes: list[int]) -> None:
    """Read on two nodes at the same instants, each node's figures are those of a sweep over
    that node's requests only."""
    both = timeline(rows, ("a", "b"))
    times = pl.concat([probe(n, p) for p in probes for n in ("a", "b")])
    got = pool_at(pool_breakpoints(both), times, has_bytes=True)
    for node in ("a", "b"):
        mine = [r for r in rows if r["node"] == node]
        on_node = times.filter(pl.col("node") == node)
        alone = (
            pool_at(pool_breakpoints(timeline(mine, (node,))), on_node, has_bytes=True)
            if mine
            else on_node.with_columns(pl.lit(0, pl.Int64).alias(c) for c in POOL_COLUMNS)
        )
        assert_frame_equal(got.filter(pl.col("node") == node), alone)


# Found by Hypothesis: node a holds 191.5 tokens at 19 s (r2 decoding since 0 s at 10 tokens/s,
# r0 half-way through 3 tokens).
OPEN_ELSEWHERE: Final = [
    ev(17, "r0", "admitted", "a", prompt_tokens=0),
    ev(21, "r0", "finished", "a", output_tokens=3),
    ev(0, "r1", "admitted", "a", prompt_tokens=0),
    ev(0, "r1", "finished", "a", output_tokens=1),
    ev(0, "r2", "admitted", "a", prompt_tokens=0),
    ev(0, "r3", "admitted", "b", prompt_tokens=0),
    ev(0, "r4", "admitted", "b", prompt_tokens=0),
]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(rows=two_nodes(), probes=st.lists(st.integers(-5, 110), min_size=1, max_size=6))
@example(rows=OPEN_ELSEWHERE, probes=[19])
def test_each_nodes_pool_is_the_pool_of_its_requests_alone(
    rows: list[dict[str, Any]], probes: list[int]
) -> None:
    assert_each_node_alone(rows, probes)


def test_a_nodes_pool_does_not_depend_on_how_many_requests_other_nodes_leave_open() -> None:
    # GIVEN node a's half token at 19 s, beside node b's two requests still open at the end.
    # Open requests' end counts were divided by a constant in a frame of one row (node a alone:
    # exact) or of three (beside node b: Polars multiplies by the reciprocal), one bit apart,
    # and the half token rounded to 191 or 192.
    # THEN node a reads the same beside node b as alone
    assert_each_node_alone(OPEN_ELSEWHERE, [19])


def test_a_half_token_rounds_the_same_whenever_another_node_starts() -> None:
    # GIVEN node a's request growing 5 tokens over 6 s: 2.5 tokens at 23 s, a tie that the
    # last bit decides. Time used to be seconds since the first knot of ALL nodes, so node b
    # starting at 1, 12 or 16 s moved node a's sums by a bit and its figure from 2 to 3.
    a = [
        ev(20, "x", "admitted", "a", prompt_tokens=0),
        ev(26, "x", "finished", "a", output_tokens=5),
    ]
    alone = stored_tokens(a, ("a",), 23)
    # WHEN node b starts at those seconds, or with node a
    for start in (1, 12, 16, 20):
        b = [
            ev(start, "y", "admitted", "b", prompt_tokens=1),
            ev(start + 1, "y", "finished", "b", output_tokens=1),
        ]
        # THEN node a's figure is the same
        assert stored_tokens(a + b, ("a", "b"), 23) == alone, start
    assert alone in (2, 3)


def test_kv_blocks_from_bytes_round_alike_read_once_or_among_many() -> None:
    # GIVEN a pool level of exactly 504,471.5 blocks of 942,592 bytes, where bytes times the
    # reciprocal of a block (what Polars does for a column divided by a constant of more than
    # one row) and bytes over a block round to different blocks
    level, per_block = 475_510_800_128, 942_592
    assert round(level * (1 / per_block)) != round(level / per_block)
    state = pl.DataFrame(
        {
            "ts": [at(0)],
            "level_tokens": [0.0],
            "slope_tokens": [0.0],
            "level_bytes": [float(level)],
            "slope_bytes": [0.0],
            "resident": [1.0],
            "contract": [0.0],
        },
        schema_overrides={"ts": TS},
    )
    breakpoints = Breakpoints({"a": state}, has_bytes=True, bytes_per_block=per_block)
    # WHEN the pool is read at one instant, and at that instant among others
    once = pool_at(breakpoints, probe("a", 5), has_bytes=True)["kv_blocks"].to_list()
    many = pool_at(breakpoints, probe("a", 1, 5, 9), has_bytes=True)["kv_blocks"].to_list()
    # THEN the blocks are the same, rounded half to even like every other pool figure
    assert once == [504_472]
    assert many == [504_472] * 3


def test_the_pool_series_is_the_pool_read_at_its_own_breakpoints() -> None:
    tl = timeline(
        [
            ev(0, "x", "admitted", "a", prompt_tokens=100, max_tokens=50),
            ev(1, "x", "first_token", "a"),
            ev(4, "x", "finished", "a", output_tokens=31),
        ],
        ("a",),
    )
    series = pool_series(tl)
    again = pool_at(pool_breakpoints(tl), series.select("node", "ts"), has_bytes=True)
    assert_frame_equal(series, again)
    assert series["resident_requests"].to_list() == [1, 1, 0]


def test_modelled_series_are_evaluated_when_read_and_counted_up_front() -> None:
    tl = timeline(
        [ev(0, "x", "admitted", "a", prompt_tokens=16), ev(2, "x", "finished", "a")],
        ("a",),
    )
    index = modelled_index(pool_breakpoints(tl), has_bytes=True)
    name = "modelled kv bytes"
    assert index.catalog.filter(pl.col("series") == name)["n"].to_list() == [2]
    assert index.rows(name)["value"].to_list() == [16 * 1024.0, 0.0]
