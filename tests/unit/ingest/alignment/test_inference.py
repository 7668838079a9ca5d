"""Choosing a year and a zone offset among the candidates by what two inputs both saw, and
saying how strongly they agree."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from oomtrace.ingest.alignment.inference import Candidate, candidates, infer
from oomtrace.ingest.alignment.moments import POINTS_SCHEMA, SERIES_SCHEMA, Moments

T0 = datetime(2025, 8, 1, 12, 0, tzinfo=UTC)


def _points(*rows: tuple[float, str, str], source: str) -> pl.DataFrame:
    times = [T0 + timedelta(seconds=s) for s, _, _ in rows]
    return pl.DataFrame(
        {
            "t": times,
            "before": times,
            "kind": [k for _, k, _ in rows],
            "what": [w for _, _, w in rows],
            "source": [source] * len(rows),
        },
        schema=POINTS_SCHEMA,
    )


def _series(values: list[float], shift_s: float, source: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "t": [T0 + timedelta(seconds=10 * i + shift_s) for i in range(len(values))],
            "metric": ["kv_usage_ratio"] * len(values),
            "value": values,
            "source": [source] * len(values),
        },
        schema=SERIES_SCHEMA,
    )


def _moments(points: pl.DataFrame, series: pl.DataFrame, first: float, last: float) -> Moments:
    return Moments(points, series, T0 + timedelta(seconds=first), T0 + timedelta(seconds=last))


NO_POINTS = pl.DataFrame(schema=POINTS_SCHEMA)
NO_SERIES = pl.DataFrame(schema=SERIES_SCHEMA)
WALK = [0.1, 0.3, 0.2, 0.6, 0.55, 0.9, 0.4, 0.35, 0.8, 0.7, 0.2, 0.25, 0.95, 0.5, 0.1, 0.6]


def test_the_candidates_are_whole_years_and_quarter_hours() -> None:
    both = candidates(year_free=True, zone_free=True)
    assert both.height == 5 * 113
    zone = candidates(year_free=False, zone_free=True)["offset_min"].to_list()
    assert (zone[0], zone[-1], 330 in zone, 345 in zone, 20 in zone) == (-840, 840, 1, 1, 0)


def test_one_matched_moment_is_weak_and_a_series_and_moments_together_are_strong() -> None:
    # GIVEN a log printed at UTC+03:00 (its times read three hours late) and a reference
    late = 3 * 3600
    log_points = _points((late + 100, "oom", "the OOM"), source="vllm.log")
    ref_points = _points((103, "release", "the memory drop"), source="gpu.csv")
    ref = _moments(ref_points, _series(WALK, 2, "metrics"), 0, 400)
    # WHEN only the OOM can be compared
    alone = infer(
        _moments(log_points, NO_SERIES, late, late + 150), ref, year_free=False, zone_free=True
    )
    # THEN the offset is chosen, with one moment: weak
    assert (alone.chosen, alone.strength, alone.score) == (Candidate(0, 180), "weak", 1.0)
    (said,) = alone.evidence
    assert said == (
        "the OOM at 2025-08-01T12:01:40.0Z and the memory drop in gpu.csv at 2025-08-01T12:01:43.0Z"
    )
    # WHEN the log's KV usage can be compared as well
    both = infer(
        _moments(log_points, _series(WALK, late, "vllm.log"), late, late + 150),
        ref,
        year_free=False,
        zone_free=True,
    )
    # THEN the same offset, strongly, and the evidence names both
    assert (both.chosen, both.strength) == (Candidate(0, 180), "strong")
    assert both.sources == frozenset({"gpu.csv", "metrics"})
    assert both.evidence[-1] == "kv_usage_ratio agrees with metrics (r = 1.00 over 16 pairs)"


def test_inputs_that_meet_nowhere_and_inputs_that_share_nothing_are_not_aligned() -> None:
    ref = _moments(_points((100, "release", "drop"), source="gpu.csv"), NO_SERIES, 0, 400)
    far = _moments(NO_POINTS, NO_SERIES, 86_400 * 3, 86_400 * 3 + 300)
    assert infer(far, ref, year_free=True, zone_free=True).reason == "no_overlap"
    near = _moments(NO_POINTS, _series(WALK, 0, "log"), 0, 300)
    silent = infer(near, ref, year_free=False, zone_free=True)
    assert (silent.chosen, silent.reason) == (None, "no_evidence")
