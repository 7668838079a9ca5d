"""The pool sweep kept per node, read at breakpoints and at arbitrary times."""

from __future__ import annotations

from typing import Any

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.analysis.kvmodel import kv_model
from oomtrace.analysis.pool import POOL_COLUMNS, pool_at, pool_breakpoints, pool_series
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


@settings(max_examples=40, deadline=None)
@given(rows=two_nodes(), probes=st.lists(st.integers(-5, 110), min_size=1, max_size=6))
def test_each_nodes_pool_is_the_pool_of_its_requests_alone(
    rows: list[dict[str, Any]], probes: list[int]
) -> None:
    # GIVEN requests on two nodes, WHEN the pool is read on both at the same instants
    both = timeline(rows, ("a", "b"))
    times = pl.DataFrame(
        {
            "node": [n for p in probes for n in ("a", "b")],
            "ts": [at(p) for p in probes for _ in "ab"],
        },
        schema={"node": pl.String, "ts": TS},
    )
    got = pool_at(pool_breakpoints(both), times, has_bytes=True)
    # THEN each node's figures are those of a sweep over that node's requests only
    for node in ("a", "b"):
        mine = [r for r in rows if r["node"] == node]
        on_node = times.filter(pl.col("node") == node)
        alone = (
            pool_at(pool_breakpoints(timeline(mine, (node,))), on_node, has_bytes=True)
            if mine
            else on_node.with_columns(pl.lit(0, pl.Int64).alias(c) for c in POOL_COLUMNS)
        )
        assert_frame_equal(got.filter(pl.col("node") == node), alone)


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
