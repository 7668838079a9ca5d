"""The request table's whole-file steps on rows built directly: which repeated endings and
which "Added request" rows go (``oomtrace/ingest/vllm/request_table.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from oomtrace.ingest.vllm.request_table import _one_arrival, _one_ending, drop_told_additions

T0 = datetime(2025, 6, 2, 8, 0, tzinfo=UTC)


def _endings(rows: list[tuple[int, str, str, int]]) -> pl.DataFrame:
    """(record_seq, request_id, event, seconds after T0) per row, in file order."""
    return pl.DataFrame(
        {
            "record_seq": [seq for seq, *_ in rows],
            "request_id": [rid for _, rid, _, _ in rows],
            "event": [event for *_, event, _ in rows],
            "ts": [T0 + timedelta(seconds=s) for *_, s in rows],
        },
        schema_overrides={"ts": pl.Datetime("ns", "UTC")},
    ).with_row_index("_row")


def test_a_repeated_ending_within_the_window_goes_a_later_one_and_others_stay() -> None:
    rows = _endings([
        (256, "a", "aborted", 0),
        (512, "b", "aborted", 1),
        (768, "a", "aborted", 30),  # "Request a failed" right after "Aborted request a": one
        (1024, "b", "rejected", 2),  # another kind of ending: kept
        (1280, "a", "aborted", 200),  # the id reused after a restart: kept
        (1536, "c", "arrived", 3),
    ])  # fmt: skip
    kept = _one_ending(rows)
    assert kept.get_column("record_seq").to_list() == [256, 512, 1024, 1280, 1536]


def test_a_window_counts_from_the_ending_before_not_from_the_first() -> None:
    # the endings of one id come out of file order in the rows' order (sorted by id first)
    rows = _endings([(256, "x", "aborted", 0), (300, "y", "aborted", 0),
                     (512, "x", "aborted", 50), (768, "x", "aborted", 100)])  # fmt: skip
    assert _one_ending(rows).get_column("record_seq").to_list() == [256, 300]


def _requests(rows: list[tuple[str, str, int | None]]) -> pl.DataFrame:
    """(request_id, event, prompt_tokens) per row, every row with a full time."""
    return pl.DataFrame(
        {
            "record_seq": [256 * (k + 1) for k in range(len(rows))],
            "request_id": [rid for rid, _, _ in rows],
            "event": [event for _, event, _ in rows],
            "prompt_tokens": [tokens for *_, tokens in rows],
            "max_tokens": [None] * len(rows),
            "output_tokens": [None] * len(rows),
            "outer_ts": [T0] * len(rows),
            "arrival_ts": [None] * len(rows),
        },
        schema_overrides={
            "prompt_tokens": pl.Int64, "max_tokens": pl.Int64, "output_tokens": pl.Int64,
            "outer_ts": pl.Datetime("ns", "UTC"), "arrival_ts": pl.Datetime("ns", "UTC"),
        },
    )  # fmt: skip


def test_additions_told_by_an_arrival_go_and_the_others_stay() -> None:
    rows = _requests([
        ("r1", "arrived", 10),
        ("r1", "admitted", None),  # told by r1's arrival
        ("r2", "admitted", None),  # no arrival of its own: the engine side's arrival
        ("r3", "arrived", 5),
    ])  # fmt: skip
    kept = drop_told_additions(rows)
    assert kept.select("request_id", "event").rows() == [
        ("r1", "arrived"), ("r2", "admitted"), ("r3", "arrived"),
    ]  # fmt: skip
    # with a count of its own an addition stays, and is an arrival
    rows = _requests([("r1", "arrived", 10), ("r1", "admitted", 12), ("r2", "admitted", None)])
    assert _one_arrival(rows).select("request_id", "event").rows() == [
        ("r1", "arrived"), ("r1", "arrived"), ("r2", "arrived"),
    ]  # fmt: skip
