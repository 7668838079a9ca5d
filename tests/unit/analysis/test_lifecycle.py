"""Lifecycles in request order without sorting strings, and the per-request summary."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.analysis.lifecycle import ENDS, INSIDE, RANK, lifecycle, summarize
from oomtrace.schema import REQUEST_EVENTS, empty
from tests.factories import at, requests


def ev(t: float, rid: str, event: str, node: str = "node-a", **counts: int) -> dict[str, Any]:
    return {"ts": at(t), "node": node, "request_id": rid, "event": event, **counts}


def test_requests_are_numbered_in_the_order_they_first_appear() -> None:
    # GIVEN requests whose ids sort the other way round from their arrival
    frame = requests(ev(0, "z", "arrived"), ev(1, "a", "arrived"), ev(2, "z", "finished"))
    # WHEN put in request order
    life = lifecycle(frame)
    # THEN z is request 1 and a request 2, each with its own events
    assert life.keys["request_id"].to_list() == ["z", "a"]
    assert life.events["rid"].to_list() == [1, 1, 2]
    assert life.events["event"].cast(pl.String).to_list() == ["arrived", "finished", "arrived"]


def test_one_request_id_on_two_nodes_is_two_requests() -> None:
    frame = requests(ev(0, "r1", "arrived", node="a"), ev(1, "r1", "arrived", node="b"))
    assert lifecycle(frame).keys.rows() == [("a", "r1"), ("b", "r1")]


def test_events_out_of_order_in_the_table_are_put_in_time_and_rank_order() -> None:
    # GIVEN a table not in time order, and two events of one instant stated close first
    frame = requests(
        ev(5, "a", "finished", output_tokens=9),
        ev(0, "a", "arrived", prompt_tokens=10),
        ev(1, "a", "first_token"),
        ev(1, "a", "admitted"),
    )
    # WHEN put in request order, THEN by time, and at one instant admission before the token
    events = lifecycle(frame).events["event"].cast(pl.String).to_list()
    assert events == ["arrived", "admitted", "first_token", "finished"]


def _plain_summary(frame: pl.DataFrame) -> pl.DataFrame:
    """The per-request summary written the obvious way: one group per request."""
    ts, event = pl.col("ts"), pl.col("event")
    ordered = frame.with_columns(rank=event.replace_strict(RANK, return_dtype=pl.Int8)).sort(
        "node", "request_id", "ts", "rank", maintain_order=True
    )
    return (
        ordered.group_by("node", "request_id", maintain_order=True)
        .agg(
            arrived_ts=ts.filter(event == "arrived").min(),
            first_seen_ts=ts.min(),
            admitted_ts=ts.filter(event == "admitted").min(),
            first_token_ts=ts.filter(event == "first_token").min(),
            end_ts=ts.filter(event.is_in(ENDS)).max(),
            end_event=event.filter(event.is_in(ENDS)).last(),
            prompt_tokens=pl.col("prompt_tokens").max(),
            max_tokens=pl.col("max_tokens").max(),
            cached_tokens=pl.col("cached_tokens").max(),
            output_tokens=pl.col("output_tokens").max(),
            preemptions=(event == "preempted").sum().cast(pl.Int64),
            token_events=event.is_in(INSIDE).sum().cast(pl.Int64),
            progress_stated=((event == "progress") & pl.col("output_tokens").is_not_null())
            .sum()
            .cast(pl.Int64),
        )
        .with_columns(contract_tokens=pl.col("prompt_tokens") + pl.col("max_tokens"))
    )


counts = st.none() | st.integers(0, 5000)


@st.composite
def tables(draw: st.DrawFn) -> pl.DataFrame:
    rows = [
        ev(
            draw(st.integers(0, 20)) / 2,
            draw(st.sampled_from(["a", "b", "c", "d"])),
            draw(st.sampled_from(REQUEST_EVENTS)),
            node=draw(st.sampled_from(["n1", "n2"])),
            prompt_tokens=draw(counts),
            max_tokens=draw(counts),
            output_tokens=draw(counts),
            cached_tokens=draw(counts),
        )
        for _ in range(draw(st.integers(0, 30)))
    ]
    return requests(*rows) if rows else empty("requests")


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(frame=tables())
def test_the_summary_equals_one_group_per_request(frame: pl.DataFrame) -> None:
    # GIVEN any lifecycle table, in any row order; WHEN summarised
    got = summarize(lifecycle(frame)).drop("rid").sort("node", "request_id")
    # THEN every figure equals the plain group-per-request definition
    expected = _plain_summary(frame).sort("node", "request_id")
    assert_frame_equal(got, expected, check_dtypes=False)
