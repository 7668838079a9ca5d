"""The replayed run as canonical request events."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from oomtrace.replay import ReplaySettings
from oomtrace.replay.events import replayed_requests
from tests.unit.replay.test_scenarios import at, two_requests


def test_the_replayed_lifecycle_lists_admissions_preemptions_and_resumptions() -> None:
    # GIVEN the overflowing two-request scenario (r1 preempted at 5 s, resumed at 6 s)
    settings = ReplaySettings(kv_blocks=4, block_size=4)
    # WHEN its lifecycle is requested
    frame = replayed_requests(two_requests(), settings)
    # THEN it is a canonical requests table in time order, with the tokens produced at the
    # preemption and the output length at the finish
    assert_frame_equal(
        frame.select("ts", "request_id", "event", "output_tokens"),
        pl.DataFrame(
            {
                "ts": [at(x) for x in (0, 0, 0.5, 0.5, 1, 1.5, 5, 6, 6, 9)],
                "request_id": ["r0", "r0", "r1", "r1", "r0", "r1", "r1", "r0", "r1", "r1"],
                "event": [
                    "arrived",
                    "admitted",
                    "arrived",
                    "admitted",
                    "first_token",
                    "first_token",
                    "preempted",
                    "finished",
                    "resumed",
                    "finished",
                ],
                "output_tokens": [None, None, None, None, None, None, 4, 6, None, 6],
            },
            schema_overrides={"ts": pl.Datetime("ns", "UTC"), "output_tokens": pl.Int64},
        ),
    )
    assert frame["source"].unique().to_list() == ["oomtrace-replay"]


def test_requests_turned_away_are_logged_as_rejected() -> None:
    # GIVEN a pool too small for either request
    frame = replayed_requests(two_requests(), ReplaySettings(kv_blocks=2, block_size=4))
    # THEN each arrives and is rejected at once
    assert frame["event"].to_list() == ["arrived", "rejected", "arrived", "rejected"]
