"""One ISO 8601 text for every instant oomtrace writes: UTC, fixed width per precision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import polars as pl
import pytest

from oomtrace.isotime import iso_time, iso_time_expr

TS = datetime(2025, 3, 14, 9, 0, 1, 250_999, tzinfo=UTC)


@pytest.mark.parametrize(
    ("precision", "text"),
    [
        (0, "2025-03-14T09:00:01Z"),
        (3, "2025-03-14T09:00:01.250Z"),
        (6, "2025-03-14T09:00:01.250999Z"),
    ],
)
def test_the_fraction_is_cut_to_the_precision_never_rounded(precision: int, text: str) -> None:
    assert iso_time(TS, precision) == text


def test_a_whole_second_keeps_its_width() -> None:
    assert iso_time(TS.replace(microsecond=0), 6) == "2025-03-14T09:00:01.000000Z"


def test_other_zones_are_written_in_utc_and_naive_times_are_read_as_utc() -> None:
    berlin = TS.astimezone(timezone(timedelta(hours=2)))
    assert iso_time(berlin) == "2025-03-14T09:00:01.250Z"
    assert iso_time(TS.replace(tzinfo=None)) == "2025-03-14T09:00:01.250Z"


def test_a_terminal_line_may_say_utc_with_a_space_for_the_t() -> None:
    assert iso_time(TS, 3, sep=" ", zone=" UTC") == "2025-03-14 09:00:01.250 UTC"


def test_none_stays_none() -> None:
    assert iso_time(None, 6) is None


@pytest.mark.parametrize("precision", [0, 3, 6])
def test_the_polars_twin_writes_the_same_text(precision: int) -> None:
    # GIVEN a nanosecond UTC column holding the instant, and one just before a second ends
    late = datetime(2025, 3, 14, 9, 0, 1, 999_999, tzinfo=UTC)
    frame = pl.DataFrame({"ts": [TS, late]}, schema={"ts": pl.Datetime("ns", "UTC")})
    # WHEN written by the expression THEN each row is what iso_time writes
    written = frame.select(iso_time_expr(pl.col("ts"), precision))["ts"].to_list()
    assert written == [iso_time(TS, precision), iso_time(late, precision)]


def test_a_precision_neither_side_can_write_is_refused() -> None:
    with pytest.raises(ValueError, match="precision 7"):
        iso_time(TS, 7)
    with pytest.raises(ValueError, match="precision 4"):
        iso_time_expr(pl.col("ts"), 4)
