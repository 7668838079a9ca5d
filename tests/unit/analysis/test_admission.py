"""Admissions inferred from the engine's running count, first come first served."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomtrace.analysis.admission import running_counts
from oomtrace.analysis.kvmodel import kv_model
from oomtrace.analysis.timeline import DecodeRate, Timeline, build_timeline
from oomtrace.schema import TS, empty
from oomtrace.trace import Manifest
from tests.factories import T0, at, requests, samples

RATE = DecodeRate(10.0, "requests", "test")
KV = kv_model(Manifest(engine_config={"block_size": 16, "num_gpu_blocks": 1000}), empty("samples"))
NO_RESETS = pl.DataFrame(schema={"node": pl.String, "ts": TS})


def ev(t: float, rid: str, event: str, node: str = "node-a", **counts: int) -> dict[str, Any]:
    return {"ts": at(t), "node": node, "request_id": rid, "event": event, **counts}


def running(t: float, value: int, node: str = "node-a", source: str = "test") -> dict[str, Any]:
    return {
        "ts": at(t),
        "node": node,
        "source": source,
        "metric": "requests_running",
        "value": value,
    }


def timeline(
    rows: list[dict[str, Any]],
    stats: list[dict[str, Any]],
    resets: pl.DataFrame = NO_RESETS,
) -> Timeline:
    nodes = {r["node"] for r in rows}
    return build_timeline(
        requests(*rows),
        KV,
        trace_end=dict.fromkeys(nodes, at(1000)),
        resets=resets,
        rate=RATE,
        samples=samples(*stats) if stats else None,
    )


def starts(tl: Timeline) -> dict[str, tuple[float, str, float | None]]:
    """Per request: its first residency's start (seconds), basis, and latest admission."""

    def s(x: datetime | None) -> float | None:
        return None if x is None else round((x - T0).total_seconds(), 6)

    first = tl.segments.filter(pl.col("seg") == 1)
    return {
        r["request_id"]: (s(r["start_ts"]), r["start_basis"], s(r["start_latest"]))
        for r in first.iter_rows(named=True)
    }


def queue() -> list[dict[str, Any]]:
    """One slot, FCFS: a runs 0-10, b waits and runs 10-20, c waits and runs 20-30 (arrivals at
    0, 1 and 2; admissions at 0, 10 and 20)."""
    return [
        ev(0, "a", "arrived", prompt_tokens=100, max_tokens=50),
        ev(1, "b", "arrived", prompt_tokens=100, max_tokens=50),
        ev(2, "c", "arrived", prompt_tokens=100, max_tokens=50),
        ev(10, "a", "finished", output_tokens=50),
        ev(20, "b", "finished", output_tokens=50),
        ev(30, "c", "finished", output_tokens=50),
    ]


def stats_every_5s(node: str = "node-a") -> list[dict[str, Any]]:
    return [running(t, 1 if t < 30 else 0, node) for t in range(0, 40, 5)]


def test_a_queue_drains_in_arrival_order_within_one_stats_interval() -> None:
    # GIVEN one slot, three requests queued behind each other, the running count every 5 s
    tl = timeline(queue(), stats_every_5s())
    # THEN each is admitted after the stats time before the one that saw it running
    assert starts(tl) == {
        "a": (0.0, "running_count", 0.0),
        "b": (5.0, "running_count", 10.0),
        "c": (15.0, "running_count", 20.0),
    }


def test_a_request_ending_before_its_inferred_admission_is_clamped() -> None:
    # GIVEN c ends at 8, but the count (under-stated at 10: one running, while a and c ran)
    # only reaches three admissions at 35
    rows = [
        ev(0, "a", "arrived"),
        ev(1, "b", "arrived"),
        ev(2, "c", "arrived"),
        ev(8, "c", "finished"),
        ev(30, "a", "finished"),
        ev(40, "b", "finished"),
    ]
    tl = timeline(rows, [running(10, 1), running(35, 1)])
    # THEN c is admitted no later than its end; b, ahead of c in the queue, no later than that
    assert starts(tl) == {
        "a": (0.0, "running_count", 8.0),
        "b": (1.0, "running_count", 8.0),
        "c": (8.0, "running_count", 8.0),
    }


def test_nodes_are_counted_separately() -> None:
    # GIVEN the same queue on two nodes, node-b's running count stated a second later
    rows = queue() + [{**r, "node": "node-b"} for r in queue()]
    stats = stats_every_5s() + [running(t, 1 if t < 31 else 0, "node-b") for t in range(1, 41, 5)]
    tl = timeline(rows, stats)
    # THEN each node's requests follow that node's count
    got = {
        node: [round((t - T0).total_seconds()) for t in frame.sort("request_id")["start_ts"]]
        for (node,), frame in tl.segments.partition_by("node", as_dict=True).items()
    }
    assert got == {"node-a": [0, 5, 15], "node-b": [0, 6, 16]}
    assert set(tl.segments["start_basis"]) == {"running_count"}


def test_without_a_running_count_the_arrival_stays_the_start() -> None:
    # GIVEN the queue and no running count
    tl = timeline(queue(), [])
    # THEN residency starts at arrival, an upper bound, as before
    assert starts(tl) == {
        "a": (0.0, "arrived", None),
        "b": (1.0, "arrived", None),
        "c": (2.0, "arrived", None),
    }


def test_a_node_stating_admissions_keeps_them() -> None:
    # GIVEN stated admissions and a running count that would say otherwise
    rows = [*queue(), ev(3, "a", "admitted"), ev(4, "b", "admitted"), ev(5, "c", "admitted")]
    tl = timeline(rows, stats_every_5s())
    # THEN the stated admissions are the starts
    assert starts(tl) == {
        "a": (3.0, "admitted", None),
        "b": (4.0, "admitted", None),
        "c": (5.0, "admitted", None),
    }


def test_a_count_that_dips_on_a_preemption_does_not_undo_admissions() -> None:
    # GIVEN a and b running from 0; at 6 b is preempted (the count dips to 1), resumed at 12; c
    # waits behind it and is admitted when a finishes at 20
    rows = [
        ev(0, "a", "arrived"),
        ev(0.5, "b", "arrived"),
        ev(1, "c", "arrived"),
        ev(20, "a", "finished"),
        ev(30, "b", "finished"),
        ev(40, "c", "finished"),
    ]
    stats = [running(5, 2), running(10, 1), running(15, 2), running(25, 2), running(35, 1)]
    tl = timeline(rows, stats)
    # THEN c is admitted between the stats at 15 and 25, not when the count came back at 15
    assert starts(tl)["c"] == (15.0, "running_count", 25.0)


def test_an_engine_restart_restarts_the_count() -> None:
    # GIVEN the engine restarts at 50; the queue repeats after it with new requests
    later = [
        {**r, "ts": r["ts"] + (at(50) - T0), "request_id": r["request_id"] + "2"} for r in queue()
    ]
    stats = stats_every_5s() + [running(t + 50, 1 if t < 30 else 0) for t in range(0, 40, 5)]
    resets = pl.DataFrame(
        {"node": ["node-a"], "ts": [at(50)]}, schema={"node": pl.String, "ts": TS}
    )
    tl = timeline(queue() + later, stats, resets)
    # THEN the second queue is admitted like the first, 50 s later
    got = starts(tl)
    assert [got[k][0] for k in ("a2", "b2", "c2")] == [50.0, 55.0, 65.0]


def test_the_densest_running_count_of_a_node_is_used() -> None:
    # GIVEN two sources stating the running count, one twice as often
    frame = samples(
        running(0, 1, source="log"),
        running(10, 1, source="log"),
        *(running(t, 2, source="prom") for t in range(0, 20, 5)),
    )
    # THEN the denser one is the node's series
    assert running_counts(frame)["value"].to_list() == [2, 2, 2, 2]


@st.composite
def fcfs_traces(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A random FCFS queue with ``slots`` slots, its requests, and its running count sampled at
    random instants (some noise allowed: the count may be off by one)."""
    slots = draw(st.integers(1, 4))
    n = draw(st.integers(1, 12))
    gaps = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    lengths = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    free = [0.0] * slots
    rows: list[dict[str, Any]] = []
    spans: list[tuple[float, float]] = []
    t = 0.0
    for i in range(n):
        t += gaps[i]
        slot = min(range(slots), key=lambda s: free[s])
        start = max(t, free[slot])
        free[slot] = start + lengths[i]
        spans.append((start, free[slot]))
        tokens = draw(st.booleans())
        rows.append(ev(t, f"r{i:02d}", "arrived", prompt_tokens=10, max_tokens=10))
        if tokens:
            rows.append(ev(start + 0.5, f"r{i:02d}", "first_token", output_tokens=1))
        rows.append(ev(free[slot], f"r{i:02d}", "finished", output_tokens=10))
    times = sorted(set(draw(st.lists(st.integers(0, 120), min_size=1, max_size=15))))
    noise = draw(st.lists(st.integers(-1, 1), min_size=len(times), max_size=len(times)))
    stats = [
        running(s, max(0, sum(1 for a, b in spans if a <= s < b) + d))
        for s, d in zip(times, noise, strict=True)
    ]
    return rows, stats


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(fcfs_traces())
def test_an_inferred_admission_is_within_arrival_and_first_token_or_end_in_arrival_order(
    trace: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    # GIVEN any FCFS trace and a (noisy) running count
    rows, stats = trace
    tl = timeline(rows, stats)
    # THEN every inferred start lies in [arrival, min(first token, end)], its latest bound after
    # it, and the starts do not decrease in arrival order
    req = tl.requests.select("rid", "arrived_ts", "first_token_ts", "end_ts")
    seg = (
        tl.segments.filter(pl.col("start_basis") == "running_count")
        .join(req, on="rid")
        .sort("arrived_ts", "rid")
    )
    cap = pl.min_horizontal("first_token_ts", "end_ts")
    assert seg.filter(pl.col("start_ts") < pl.col("arrived_ts")).is_empty()
    assert seg.filter(pl.col("start_ts") > cap).is_empty()
    assert seg.filter(pl.col("start_latest") < pl.col("start_ts")).is_empty()
    assert seg["start_ts"].is_sorted()
