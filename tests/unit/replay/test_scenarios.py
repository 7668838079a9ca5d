"""Tiny scenarios computed by hand, one per policy and limit.

Shared traffic unless stated: block size 4 tokens, prefill 1 s, one output token per second.
``r0`` arrives at 0 s and ``r1`` at 0.5 s, each with a 4-token prompt and 6 output tokens, so
each stores 4 tokens (1 block) at admission, a 5th token at its first token (2 blocks), and at
its 5th output token 9 tokens (3 blocks); it finishes at its 6th token, 6 s after admission.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from polars.testing import assert_frame_equal

from oomtrace.replay import ReplaySettings, replay, search, workload_from_arrays
from oomtrace.replay.workload import EPOCH, Workload


def two_requests(max_tokens: list[int] | None = None) -> Workload:
    return workload_from_arrays(
        [0.0, 0.5], [4, 4], [6, 6], prefill_s=1.0, decode_s_per_token=1.0, max_tokens=max_tokens
    )


def at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def outcome_table(workload: Workload, settings: ReplaySettings) -> pl.DataFrame:
    result = replay(workload, settings, series_points=0)
    return result.outcomes.select("request_id", "admitted", "finished", "preemptions", "outcome")


def expected(rows: list[tuple[str, float | None, float | None, int, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "request_id": rid,
                "admitted": None if adm is None else at(adm),
                "finished": None if fin is None else at(fin),
                "preemptions": pre,
                "outcome": outcome,
            }
            for rid, adm, fin, pre, outcome in rows
        ],
        schema={
            "request_id": pl.String,
            "admitted": pl.Datetime("ns", "UTC"),
            "finished": pl.Datetime("ns", "UTC"),
            "preemptions": pl.Int64,
            "outcome": pl.String,
        },
    )


def test_on_demand_preempts_the_newest_request_when_the_pool_runs_dry() -> None:
    # GIVEN a 4-block pool: at 1.5 s both hold 2 blocks; at 5 s r0 needs its 3rd block
    settings = ReplaySettings(kv_blocks=4, block_size=4, policy="on-demand")
    # WHEN replayed
    result = replay(two_requests(), settings, series_points=0)
    # THEN r1 (newest) is preempted at 5 s with 4 tokens produced; it resumes when r0 finishes
    # at 6 s, recomputes 8 tokens in 2 s, produces its 5th token at 8 s and finishes at 9 s
    assert result.summary.overflow is True
    assert result.summary.overflow_ts == datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert result.summary.preemptions == 1
    assert result.summary.peak_blocks == 4
    assert_frame_equal(
        outcome_table(two_requests(), settings),
        expected([("r0", 0.0, 6.0, 0, "finished"), ("r1", 0.5, 9.0, 1, "finished")]),
    )


def test_on_demand_with_room_never_overflows_and_peaks_at_both_final_lengths() -> None:
    # GIVEN a 6-block pool: both reach 3 blocks (at 5 s and 5.5 s) and 6 fit
    settings = ReplaySettings(kv_blocks=6, block_size=4)
    # WHEN replayed
    result = replay(two_requests(), settings, series_points=0)
    # THEN nothing is preempted and the peak is 6 blocks, held from 5.5 s to r0's finish at 6 s
    assert result.summary.overflow is False
    assert result.summary.overflow_ts is None
    assert result.summary.preemptions == 0
    assert result.summary.peak_blocks == 6
    assert result.summary.queue_delay_p99_s == 0.0


def test_reserve_holds_the_whole_contract_and_queues_the_second_request() -> None:
    # GIVEN max_tokens 6: each contract is ceil((4 + 6) / 4) = 3 blocks, in a 4-block pool
    workload = two_requests(max_tokens=[6, 6])
    settings = ReplaySettings(kv_blocks=4, block_size=4, policy="reserve")
    # WHEN replayed
    result = replay(workload, settings, series_points=0)
    # THEN r1 waits from 0.5 s until r0 finishes at 6 s (5.5 s) and nothing ever runs dry
    assert_frame_equal(
        outcome_table(workload, settings),
        expected([("r0", 0.0, 6.0, 0, "finished"), ("r1", 6.0, 12.0, 0, "finished")]),
    )
    assert result.summary.overflow is False
    assert result.summary.peak_blocks == 3
    # linear interpolation between the two delays 0 and 5.5 s
    assert result.summary.queue_delay_p50_s == 2.75
    assert result.summary.queue_delay_p99_s == 5.445


def test_max_num_seqs_queues_beyond_the_limit() -> None:
    # GIVEN one sequence at a time
    settings = ReplaySettings(kv_blocks=100, block_size=4, max_num_seqs=1)
    # WHEN replayed
    # THEN r1 starts when r0 finishes at 6 s
    assert_frame_equal(
        outcome_table(two_requests(), settings),
        expected([("r0", 0.0, 6.0, 0, "finished"), ("r1", 6.0, 12.0, 0, "finished")]),
    )


def test_a_full_queue_rejects_the_arrival() -> None:
    # GIVEN one sequence at a time and no waiting room
    settings = ReplaySettings(kv_blocks=100, block_size=4, max_num_seqs=1, max_waiting=0)
    # WHEN replayed
    result = replay(two_requests(), settings, series_points=0)
    # THEN r1 is turned away on arrival
    assert_frame_equal(
        outcome_table(two_requests(), settings),
        expected([("r0", 0.0, 6.0, 0, "finished"), ("r1", None, None, 0, "rejected_queue_full")]),
    )
    assert result.summary.rejections == 1
    assert result.summary.rejected_too_large == 0
    assert result.summary.passes is True


def test_a_request_larger_than_the_pool_is_rejected_on_arrival() -> None:
    # GIVEN a 2-block pool: each request needs 3 blocks at its final length
    settings = ReplaySettings(kv_blocks=2, block_size=4)
    # WHEN replayed
    result = replay(two_requests(), settings, series_points=0)
    # THEN both are rejected, and such a pool does not pass a search
    assert result.summary.rejected_too_large == 2
    assert result.summary.finished == 0
    assert result.summary.passes is False


def test_the_prefill_budget_delays_a_prefill_until_the_previous_one_ends() -> None:
    # GIVEN a budget of 6 prefill tokens and two 4-token prompts
    settings = ReplaySettings(kv_blocks=100, block_size=4, max_num_batched_tokens=6)
    # WHEN replayed
    # THEN r1 starts its prefill when r0's ends at 1 s
    assert_frame_equal(
        outcome_table(two_requests(), settings),
        expected([("r0", 0.0, 6.0, 0, "finished"), ("r1", 1.0, 7.0, 0, "finished")]),
    )


def test_a_larger_pool_can_preempt_more_first_come_first_served_anomaly() -> None:
    # GIVEN block size 1, prompts of 4 and 3 output tokens (final 6 tokens each)
    workload = workload_from_arrays([0.0, 0.5], [4, 4], [3, 3], prefill_s=1.0)
    # WHEN replayed in a 7-block and in an 8-block pool
    small = replay(workload, ReplaySettings(kv_blocks=7, block_size=1), series_points=0)
    large = replay(workload, ReplaySettings(kv_blocks=8, block_size=1), series_points=0)
    # THEN the 7-block pool runs them one after the other, while the 8-block pool admits both
    # (4 + 4 blocks) and runs dry at r0's first token: more blocks, more preemptions
    assert (small.summary.preemptions, large.summary.preemptions) == (0, 1)
    assert large.summary.overflow_ts == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)


def test_the_series_reads_the_level_before_each_point_and_the_peak_since_the_last() -> None:
    # GIVEN the overflowing scenario read every 3 s
    settings = ReplaySettings(kv_blocks=4, block_size=4)
    result = replay(two_requests(), settings, series_points=3)
    # THEN the points are 3, 6 and 9 s after the first arrival (the last finish is at 9 s);
    # at 3 s both hold 2 blocks, just before 6 s r0 holds 3 and r1 waits, at 9 s r1 holds 3
    # blocks (its 5th token at 8 s) and finishes at that instant
    assert_frame_equal(
        result.series.select(
            "ts", "kv_blocks_used", "kv_blocks_peak", "requests_running", "requests_waiting"
        ),
        pl.DataFrame(
            {
                "ts": [at(3.0), at(6.0), at(9.0)],
                "kv_blocks_used": [4, 3, 3],
                "kv_blocks_peak": [4, 4, 3],
                "requests_running": [2, 1, 1],
                "requests_waiting": [0, 1, 0],
            },
            schema_overrides={"ts": pl.Datetime("ns", "UTC")},
        ),
    )


def test_the_kv_blocks_search_finds_the_smallest_pool_that_never_runs_dry() -> None:
    # GIVEN the shared traffic: each request needs 3 blocks at its final length, together 6
    settings = ReplaySettings(kv_blocks=4, block_size=4)
    # WHEN searching the pool size
    found = search(two_requests(), settings, "kv-blocks", series_points=0)
    # THEN the range is 3 (the largest request) to 6 (the unlimited peak); 3, 4 and 5 run dry
    # (both are admitted and outgrow the pool) and 6 is the smallest that does not
    assert (found.goal, found.low, found.high, found.best_value) == ("smallest", 3, 6, 6)
    assert found.unbinding is True
    assert sorted((v, s.passes) for v, s in found.tried) == [
        (3, False), (4, False), (5, False), (6, True),
    ]  # fmt: skip
    assert found.best is not None
    assert found.best.settings.kv_blocks == 6


def test_a_search_where_nothing_passes_has_no_best() -> None:
    # GIVEN a pool too small for either request at any max_num_seqs
    settings = ReplaySettings(kv_blocks=2, block_size=4)
    # WHEN searching THEN there is no best setting, and the JSON says so
    found = search(two_requests(), settings, "max-num-seqs", series_points=0)
    assert found.best_value is None
    assert found.to_json()["best"] is None


def test_a_search_without_a_series_reports_its_best_run_as_a_fresh_replay_does() -> None:
    # GIVEN the shared traffic and a pool search that settles on 6 blocks
    settings = ReplaySettings(kv_blocks=4, block_size=4)
    # WHEN searching without a series (the best value's run is the bisection's own)
    found = search(two_requests(), settings, "kv-blocks", series_points=0)
    # THEN its summary and outcomes are those of replaying the best setting afresh
    assert found.best is not None
    fresh = replay(two_requests(), found.best.settings, series_points=0)
    assert found.best.summary == fresh.summary
    assert_frame_equal(found.best.outcomes, fresh.outcomes)
