"""Per-request residency and stored tokens, and the pool sweep built on them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.analysis.kvmodel import kv_model
from oomtrace.analysis.pool import pool_at, pool_breakpoints
from oomtrace.analysis.timeline import (
    DecodeRate,
    Timeline,
    build_timeline,
    decode_rate,
    summarize_requests,
)
from oomtrace.analysis.window import resident_at
from oomtrace.schema import TS, empty
from oomtrace.trace import Manifest
from tests.factories import T0, at, requests, samples

RATE = DecodeRate(10.0, "requests", "test")
NO_RATE = DecodeRate(None, "none", "test")
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


def timeline(
    *rows: dict[str, Any],
    rate: DecodeRate = RATE,
    end: float = 100.0,
    resets: pl.DataFrame = NO_RESETS,
) -> Timeline:
    return build_timeline(
        requests(*rows), KV, trace_end={"node-a": at(end)}, resets=resets, rate=rate
    )


def ev(t: float, rid: str, event: str, **counts: int) -> dict[str, Any]:
    return {"ts": at(t), "request_id": rid, "event": event, **counts}


def spans(tl: Timeline) -> list[tuple[str, float, float, str, str]]:
    def s(x: datetime) -> float:
        return round((x - T0).total_seconds(), 6)

    return [
        (r["request_id"], s(r["start_ts"]), s(r["end_ts"]), r["start_basis"], r["end_basis"])
        for r in tl.segments.sort("request_id", "seg").iter_rows(named=True)
    ]


def test_a_preemption_splits_residency_into_two_segments() -> None:
    # GIVEN a request admitted, preempted, resumed and finished
    tl = timeline(
        ev(0, "a", "arrived", prompt_tokens=100, max_tokens=500),
        ev(1, "a", "admitted"),
        ev(2, "a", "first_token", output_tokens=1),
        ev(5, "a", "preempted"),
        ev(7, "a", "resumed"),
        ev(12, "a", "finished", output_tokens=101),
    )
    # THEN it is resident twice, and not while preempted
    assert spans(tl) == [
        ("a", 1.0, 5.0, "admitted", "preempted"),
        ("a", 7.0, 12.0, "resumed", "finished"),
    ]
    assert resident_at(tl, "node-a", at(6)).is_empty()


def test_without_a_stated_admission_residency_starts_at_the_first_token() -> None:
    # GIVEN a source that states tokens but never admissions
    tl = timeline(
        ev(0, "a", "arrived", prompt_tokens=100, max_tokens=500),
        ev(3, "a", "first_token"),
        ev(8, "a", "finished", output_tokens=50),
    )
    # THEN residency is counted from the first token (a lower bound)
    assert spans(tl) == [("a", 3.0, 8.0, "first_token", "finished")]


def test_an_arrival_opens_residency_when_the_source_never_states_admissions() -> None:
    # GIVEN vLLM V1 logs: the request enters the engine, nothing else is stated
    tl = timeline(ev(10, "a", "arrived", prompt_tokens=100, max_tokens=50), end=100)
    # THEN it may have been resident from its arrival until its contract was spent (50 / 10 s)
    assert spans(tl) == [("a", 10.0, 15.0, "arrived", "contract")]


def test_an_arrival_without_admission_is_waiting_when_the_source_states_admissions() -> None:
    # GIVEN one request admitted and another that only arrived
    tl = timeline(
        ev(0, "a", "arrived", prompt_tokens=100, max_tokens=50),
        ev(1, "a", "admitted"),
        ev(2, "b", "arrived", prompt_tokens=100, max_tokens=50),
    )
    # THEN only the admitted one is ever resident
    assert [s[0] for s in spans(tl)] == ["a"]


def test_a_finish_without_any_earlier_residency_starts_at_the_arrival() -> None:
    tl = timeline(
        ev(0, "a", "arrived", prompt_tokens=10, max_tokens=50),
        ev(1, "b", "arrived", prompt_tokens=10, max_tokens=50),
        ev(1.5, "b", "admitted"),
        ev(4, "a", "finished", output_tokens=30),
    )
    assert ("a", 0.0, 4.0, "arrived", "finished") in spans(tl)


def test_an_open_request_ends_at_the_next_engine_reset() -> None:
    resets = pl.DataFrame(
        {"node": ["node-a"], "ts": [at(20)]}, schema={"node": pl.String, "ts": TS}
    )
    tl = timeline(
        ev(0, "a", "arrived", prompt_tokens=100, max_tokens=5000),
        ev(1, "a", "admitted"),
        resets=resets,
    )
    assert spans(tl) == [("a", 1.0, 20.0, "admitted", "reset")]


def test_an_open_request_at_the_trace_end_is_still_resident_at_its_last_instant() -> None:
    tl = timeline(
        ev(0, "a", "arrived", prompt_tokens=100, max_tokens=5000),
        ev(1, "a", "admitted"),
        end=30,
    )
    assert resident_at(tl, "node-a", at(30))["request_id"].to_list() == ["a"]


def test_a_request_aborted_at_the_instant_read_was_resident_but_a_finished_one_was_not() -> None:
    # GIVEN an engine that died at t=30 s: one request aborted at that very second (the log's
    # resolution), another that finished at it
    tl = timeline(
        ev(0, "a", "arrived", prompt_tokens=100, max_tokens=500),
        ev(1, "a", "admitted"),
        ev(30, "a", "aborted"),
        ev(2, "b", "arrived", prompt_tokens=100, max_tokens=50),
        ev(3, "b", "admitted"),
        ev(30, "b", "finished", output_tokens=50),
    )
    # WHEN the residents at that instant are read, THEN the aborted one was still there
    assert resident_at(tl, "node-a", at(30))["request_id"].to_list() == ["a"]


def test_figures_say_whether_they_are_exact_modelled_or_bounded() -> None:
    # GIVEN one request with stated progress, one with only its end count, one still open
    tl = timeline(
        ev(0, "p", "admitted", prompt_tokens=100, max_tokens=1000),
        ev(1, "p", "first_token"),
        ev(5, "p", "progress", output_tokens=41),
        ev(9, "p", "progress", output_tokens=81),
        ev(0, "m", "admitted", prompt_tokens=100, max_tokens=1000),
        ev(10, "m", "finished", output_tokens=100),
        ev(0, "b", "admitted", prompt_tokens=100, max_tokens=1000),
        ev(1, "b", "first_token"),
        end=20,
    )
    # WHEN read at t = 7
    got = resident_at(tl, "node-a", at(7)).sort("request_id")
    rows = {r["request_id"]: r for r in got.iter_rows(named=True)}
    # THEN stated progress brackets p exactly; m grows linearly to its stated end; b is bounded
    assert (rows["p"]["basis"], rows["p"]["tokens"]) == ("exact", 161)
    assert (rows["p"]["tokens_low"], rows["p"]["tokens_high"]) == (141, 181)
    assert (rows["m"]["basis"], rows["m"]["tokens"]) == ("modelled", 170)
    assert (rows["b"]["basis"], rows["b"]["tokens"]) == ("bounded", 161)
    assert (rows["b"]["tokens_low"], rows["b"]["tokens_high"]) == (101, 1100)
    # AND bytes are whole blocks: 161 tokens are 11 blocks of 16 KiB
    assert (rows["b"]["blocks"], rows["b"]["bytes"]) == (11, 11 * 16 * 1024)


def test_a_request_still_in_prefill_does_not_grow() -> None:
    tl = timeline(
        ev(0, "a", "admitted", prompt_tokens=100, max_tokens=1000),
        ev(1, "a", "first_token"),
        ev(2, "big", "admitted", prompt_tokens=20000, max_tokens=10),
        end=50,
    )
    big = resident_at(tl, "node-a", at(40)).filter(pl.col("request_id") == "big")
    assert big["tokens"].to_list() == [20000]


def test_the_decode_rate_is_the_median_over_finished_requests() -> None:
    frame = requests(
        *[
            row
            for i, seconds in enumerate((10.0, 20.0, 40.0))
            for row in (
                ev(0, f"r{i}", "admitted", prompt_tokens=10),
                ev(1, f"r{i}", "first_token"),
                ev(1 + seconds, f"r{i}", "finished", output_tokens=201),
            )
        ]
    )
    rate = decode_rate(summarize_requests(frame), empty("samples"))
    assert (rate.basis, rate.tokens_per_s) == ("requests", 10.0)


def test_without_finished_requests_the_decode_rate_comes_from_engine_throughput() -> None:
    stats = samples(
        {"ts": at(0), "metric": "generation_throughput_tokens_per_s", "value": 300.0},
        {"ts": at(0), "metric": "requests_running", "value": 10.0},
        {"ts": at(10), "metric": "generation_throughput_tokens_per_s", "value": 0.0},
        {"ts": at(10), "metric": "requests_running", "value": 0.0},
    )
    rate = decode_rate(summarize_requests(empty("requests")), stats)
    assert (rate.basis, rate.tokens_per_s) == ("engine_throughput", 30.0)


def test_the_pool_is_the_sum_of_resident_requests_at_any_time() -> None:
    tl = timeline(
        ev(0, "a", "admitted", prompt_tokens=100, max_tokens=1000),
        ev(1, "a", "first_token"),
        ev(11, "a", "finished", output_tokens=101),
        ev(5, "b", "admitted", prompt_tokens=50, max_tokens=10),
        ev(6, "b", "finished", output_tokens=10),
    )
    times = pl.DataFrame(
        {"node": ["node-a"] * 4, "ts": [at(-1), at(5.5), at(6), at(20)]},
        schema={"node": pl.String, "ts": TS},
    )
    got = pool_at(pool_breakpoints(tl), times, has_bytes=True)
    # at 5.5: a holds 100 + 1 + 45 = 146, b holds 50 + 5 = 55; b left at 6; nothing after 11
    assert got["stored_tokens"].to_list() == [0, 201, 151, 0]
    assert got["resident_requests"].to_list() == [0, 2, 1, 0]
    assert got["contract_bytes"].to_list()[1] == (69 + 4) * 16 * 1024


@st.composite
def lifecycles(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 12))):
        rid = f"r{i}"
        start = draw(st.floats(0, 50))
        prompt = draw(st.integers(0, 3000))
        rows.append(ev(start, rid, "admitted", prompt_tokens=prompt, max_tokens=2000))
        t = start
        for _ in range(draw(st.integers(0, 3))):
            t += draw(st.floats(0, 10))
            rows.append(ev(t, rid, "progress", output_tokens=draw(st.integers(1, 2000))))
        if draw(st.booleans()):
            t += draw(st.floats(0, 10))
            rows.append(ev(t, rid, "preempted"))
            t += draw(st.floats(0, 10))
            rows.append(ev(t, rid, "resumed"))
        if draw(st.booleans()):
            t += draw(st.floats(0, 10))
            rows.append(ev(t, rid, "finished", output_tokens=draw(st.integers(1, 2000))))
    return rows


def _brute_force(tl: Timeline, when: datetime) -> float:
    """Per segment, interpolate its knots in plain Python: the slow, obvious definition."""
    total = 0.0
    for seg in tl.segments.iter_rows(named=True):
        if not seg["start_ts"] <= when < seg["end_ts"]:
            continue
        knots = tl.knots.filter(
            (pl.col("request_id") == seg["request_id"]) & (pl.col("seg") == seg["seg"])
        ).rows(named=True)
        before = [k for k in knots if k["ts"] <= when]
        after = [k for k in knots if k["ts"] > when]
        prev = before[-1]
        if after:
            nxt = after[0]
            span = (nxt["ts"] - prev["ts"]).total_seconds()
            into = (when - prev["ts"]).total_seconds()
            total += prev["tokens"] + (nxt["tokens"] - prev["tokens"]) * into / span
        else:
            total += prev["tokens"]
    return total


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(rows=lifecycles(), probes=st.lists(st.floats(0, 120), min_size=1, max_size=8))
def test_the_sweep_equals_summing_every_request_one_by_one(
    rows: list[dict[str, Any]], probes: list[float]
) -> None:
    # GIVEN arbitrary lifecycles, WHEN the pool is read by the sweep at arbitrary times
    tl = timeline(*rows, end=120)
    times = pl.DataFrame(
        {"node": ["node-a"] * len(probes), "ts": [at(p) for p in probes]},
        schema={"node": pl.String, "ts": TS},
    )
    got = pool_at(pool_breakpoints(tl), times, has_bytes=True)["stored_tokens"].to_list()
    # THEN it equals the brute-force sum over requests (to rounding)
    expected = [_brute_force(tl, at(p)) for p in probes]
    assert got == pytest.approx([round(e) for e in expected], abs=1)


def test_reading_the_pool_keeps_the_callers_row_order() -> None:
    tl = timeline(ev(0, "a", "admitted", prompt_tokens=16, max_tokens=5000))
    times = pl.DataFrame(
        {"node": ["node-a", "node-a"], "ts": [at(50), at(-5)]}, schema={"node": pl.String, "ts": TS}
    )
    got = pool_at(pool_breakpoints(tl), times, has_bytes=True)
    assert_frame_equal(got.select("node", "ts"), times)
    assert got["resident_requests"].to_list() == [1, 0]


def test_no_decode_rate_leaves_open_requests_at_their_last_statement() -> None:
    tl = timeline(
        ev(0, "a", "admitted", prompt_tokens=100, max_tokens=1000),
        ev(1, "a", "progress", output_tokens=10),
        rate=NO_RATE,
        end=60,
    )
    row = resident_at(tl, "node-a", T0 + timedelta(seconds=30)).row(0, named=True)
    assert (row["tokens"], row["basis"]) == (110, "bounded")
