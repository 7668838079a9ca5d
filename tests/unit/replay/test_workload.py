"""From the canonical requests table to the replay workload, with the source of every number."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from oomtrace.errors import InputError, UsageError
from oomtrace.replay import TimeOptions, build_workload
from tests import factories
from tests.factories import at
from tests.unit.replay.helpers import lifecycle, trace_of


def test_arrival_lengths_and_times_come_from_each_requests_own_events() -> None:
    # GIVEN a request admitted 2 s after arriving, first token 0.5 s later, 9 tokens in 4 s
    trace = trace_of(
        lifecycle("a", 1.0, admitted=3.0, prompt=100, output=9, prefill_s=0.5, decode_s=4.0)
    )
    # WHEN the workload is built
    workload = build_workload(trace)
    # THEN arrival is the first event, output is recorded, prefill is first token - admitted
    # and decode is (end - first token) / (output - 1) = 0.5 s per token
    assert_frame_equal(
        workload.requests.select(
            "request_id",
            "arrival",
            "prompt_tokens",
            "output_tokens",
            "prefill_ns",
            "decode_ns_per_token",
            "output_source",
            "prefill_source",
            "decode_source",
        ),
        pl.DataFrame(
            {
                "request_id": ["a"],
                "arrival": [at(1.0)],
                "prompt_tokens": [100],
                "output_tokens": [9],
                "prefill_ns": [500_000_000],
                "decode_ns_per_token": [500_000_000],
                "output_source": ["recorded"],
                "prefill_source": ["recorded"],
                "decode_source": ["recorded"],
            },
            schema_overrides={"arrival": pl.Datetime("ns", "UTC")},
        ),
    )


def test_an_unstated_output_length_is_bounded_by_max_tokens_and_timed_by_the_median() -> None:
    # GIVEN one request with recorded times and one with only arrival and an unstated output
    trace = trace_of(
        lifecycle("a", 0.0, prompt=10, output=5, decode_s=2.0),  # 0.5 s per token
        lifecycle("b", 1.0, prompt=10, output=None, max_tokens=40, prefill_s=None),
    )
    # WHEN the workload is built
    workload = build_workload(trace)
    b = workload.requests.filter(pl.col("request_id") == "b").row(0, named=True)
    # THEN b is replayed at its bound with the trace's median speeds, and says so
    assert b["output_tokens"] == 40
    assert b["output_source"] == "max_tokens_bound"
    assert b["decode_ns_per_token"] == 500_000_000
    assert b["decode_source"] == "trace_median"
    assert b["prefill_source"] == "trace_median"
    assert workload.source_counts("output_source") == {"max_tokens_bound": 1, "recorded": 1}


def test_requests_that_cannot_be_sized_or_were_rejected_are_left_out_with_a_note() -> None:
    # GIVEN a sized request, one without a prompt length and one the server rejected
    unsized = [{"ts": at(0.5), "request_id": "x", "event": "arrived"}]
    rejected = [
        {"ts": at(0.6), "request_id": "y", "event": "arrived", "prompt_tokens": 9},
        {"ts": at(0.6), "request_id": "y", "event": "rejected"},
    ]
    trace = trace_of(lifecycle("a", 0.0), unsized, rejected)
    # WHEN the workload is built
    workload = build_workload(trace)
    # THEN only the sized request remains and both omissions are stated
    assert workload.requests["request_id"].to_list() == ["a"]
    assert workload.notes == (
        "1 request(s) the server rejected are left out",
        (
            "1 request(s) without a stated prompt length or output bound (no output_tokens at "
            "finish and no max_tokens) are left out"
        ),
    )


def test_without_first_token_times_the_option_wins_else_whole_requests_bound_the_speed() -> None:
    # GIVEN a request without a first-token time: admitted at 0 s, finished at 8 s, 8 tokens out
    trace = trace_of(lifecycle("a", 0.0, prefill_s=None))
    # WHEN built with --decode-tokens-per-s
    workload = build_workload(trace, options=TimeOptions(decode_tokens_per_s=50.0))
    # THEN the option gives 20 ms per token and is named as the source
    assert workload.requests["decode_ns_per_token"].to_list() == [20_000_000]
    assert workload.requests["decode_source"].to_list() == ["option"]
    assert workload.requests["prefill_source"].to_list() == ["option"]
    # AND without it, the whole request bounds the speed: (8 s - 32 tokens at the default
    # 10,000 tokens/s prefill) / (8 - 1) tokens = 7.9968 s / 7 = 1.1424 s per token, with a note
    bounded = build_workload(trace)
    assert bounded.requests["decode_ns_per_token"].to_list() == [1_142_400_000]
    assert bounded.requests["decode_source"].to_list() == ["end_to_end_bound"]
    assert any("queueing is included, so residency is overstated" in n for n in bounded.notes)


def test_a_trace_with_no_usable_duration_needs_a_decode_speed() -> None:
    # GIVEN a request that produced one token (no per-token time can be derived)
    trace = trace_of(lifecycle("a", 0.0, prefill_s=None, output=1))
    # WHEN built without --decode-tokens-per-s THEN it is refused with the remedy
    with pytest.raises(InputError, match="pass --decode-tokens-per-s"):
        build_workload(trace)


def test_a_trace_of_several_nodes_is_replayed_one_node_at_a_time() -> None:
    # GIVEN requests from two nodes
    rows = [
        {"ts": at(0), "request_id": "a", "event": "arrived", "prompt_tokens": 4,
         "max_tokens": 4, "node": "n1"},
        {"ts": at(0), "request_id": "b", "event": "arrived", "prompt_tokens": 4,
         "max_tokens": 4, "node": "n2"},
    ]  # fmt: skip
    trace = trace_of()
    trace.requests = factories.requests(*rows)
    # WHEN built without a node, and for n2
    with pytest.raises(UsageError, match=r"from 2 nodes \(n1, n2\); replay one engine at a time"):
        build_workload(trace, options=TimeOptions(decode_tokens_per_s=10.0))
    workload = build_workload(trace, options=TimeOptions(decode_tokens_per_s=10.0), node="n2")
    # THEN only n2's request is replayed
    assert workload.requests["request_id"].to_list() == ["b"]
