"""Year-less, zone-less vLLM times are placed in UTC: --year/--tz, file mtime anchoring the end,
New Year inside the file, full outer timestamps and collector arrival times winning."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.parser_api import ClockOptions, ParseContext
from oomtrace.ingest.text.yearless_clock import (
    combine,
    leap_calendar_day,
    printed_minus_full,
    report_disagreement,
    year_offsets,
)
from oomtrace.ingest.vllm.log_parser import NO_TIME, PARSER

DATA = Path(__file__).resolve().parents[3] / "data" / "vllm"


def _stats(stamp: str, running: int = 1) -> str:
    return (
        f"INFO {stamp} [loggers.py:118] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg "
        f"generation throughput: 2.0 tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV "
        "cache usage: 10.0%, Prefix cache hit rate: 0.0%"
    )


def _log(tmp_path: Path, stamps: list[str], mtime: datetime | None = None) -> Path:
    path = tmp_path / "server.log"
    path.write_text("".join(_stats(s, i) + "\n" for i, s in enumerate(stamps)))
    if mtime is not None:
        os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return path


def _running_times(path: Path, **options: object) -> list[datetime]:
    trace = ingest_paths([path], IngestOptions(**options))  # type: ignore[arg-type]
    running = trace.samples.filter(pl.col("metric") == "requests_running").sort("value")
    return running["ts"].to_list()


def test_the_modification_time_anchors_the_end_of_the_file_across_new_year(
    tmp_path: Path,
) -> None:
    path = _log(
        tmp_path, ["12-31 23:59:58", "01-01 00:00:03"], datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    )
    trace = ingest_paths([path], IngestOptions())
    assert _running_times(path) == [
        datetime(2025, 12, 31, 23, 59, 58, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC),
    ]
    assert trace.manifest.clock == {
        "tz": "UTC", "tz_source": "default", "year": 2025, "year_source": "mtime",
        "year_last": 2026,
    }  # fmt: skip
    notes = trace.manifest.sources[0].notes
    assert (
        "vLLM prints no year: placed the last line in 2026 from the file modification time "
        "(2026-01-01T00:05:00Z); pass --year if that is wrong"
    ) in notes
    assert "the log crosses New Year: lines run from 2025 into 2026" in notes


def test_a_december_log_copied_in_january_stays_in_the_old_year(tmp_path: Path) -> None:
    path = _log(tmp_path, ["12-30 10:00:00", "12-31 23:59:00"], datetime(2026, 1, 2, tzinfo=UTC))
    assert [t.year for t in _running_times(path)] == [2025, 2025]


def test_a_late_line_from_the_old_year_after_midnight_stays_in_the_old_year(
    tmp_path: Path,
) -> None:
    stamps = ["12-31 23:59:59", "01-01 00:00:01", "12-31 23:59:59", "01-01 00:00:02"]
    path = _log(tmp_path, stamps, datetime(2026, 1, 1, 1, 0, tzinfo=UTC))
    times = _running_times(path)
    assert [t.year for t in times] == [2025, 2026, 2025, 2026]


def test_the_year_option_is_the_year_of_the_first_line(tmp_path: Path) -> None:
    path = _log(tmp_path, ["12-31 23:59:58", "01-01 00:00:03"], datetime(2030, 6, 1, tzinfo=UTC))
    trace = ingest_paths([path], IngestOptions(year=2023))
    assert [t.year for t in _running_times(path, year=2023)] == [2023, 2024]
    assert trace.manifest.clock["year_source"] == "option"
    assert not any("modification time" in n for n in trace.manifest.sources[0].notes)


def test_the_zone_option_places_local_times_across_daylight_saving_changes(
    tmp_path: Path,
) -> None:
    # Berlin: 03-30 02:00-03:00 does not exist; 10-26 02:00-03:00 happens twice (the earlier is
    # taken).
    stamps = ["03-30 01:30:00", "03-30 02:30:00", "03-30 03:30:00", "10-26 02:30:00"]
    path = _log(tmp_path, stamps)
    trace = ingest_paths([path], IngestOptions(year=2025, tz="Europe/Berlin"))
    running = trace.samples.filter(pl.col("metric") == "requests_running").sort("value")
    assert running["ts"].to_list() == [
        datetime(2025, 3, 30, 0, 30, tzinfo=UTC),
        datetime(2025, 3, 30, 1, 30, tzinfo=UTC),
        datetime(2025, 10, 26, 0, 30, tzinfo=UTC),
    ]
    assert running["value"].to_list() == [0.0, 2.0, 3.0]
    source = trace.manifest.sources[0]
    assert source.skipped[NO_TIME].count == 1
    assert trace.manifest.clock == {
        "tz": "Europe/Berlin", "tz_source": "option", "year": 2025, "year_source": "option"
    }  # fmt: skip


def test_february_29_in_a_common_year_is_reported_not_invented(tmp_path: Path) -> None:
    path = _log(tmp_path, ["02-28 10:00:00", "02-29 10:00:00"])
    trace = ingest_paths([path], IngestOptions(year=2025))
    assert trace.samples.filter(pl.col("metric") == "requests_running").height == 1
    assert trace.manifest.sources[0].skipped[NO_TIME].count == 1


def test_outer_full_timestamps_win_and_a_steady_offset_is_reported() -> None:
    trace = ingest_paths([DATA / "kubectl.log"], IngestOptions())
    running = trace.samples.filter(pl.col("metric") == "requests_running")
    assert running["ts"].to_list() == [
        datetime(2025, 6, 2, 8, 0, 10, 500000, tzinfo=UTC),
        datetime(2025, 6, 2, 8, 0, 20, 750000, tzinfo=UTC),
    ]
    assert trace.manifest.clock == {
        "tz": "UTC",
        "tz_source": "kubectl/docker timestamps",
        "year_source": "kubectl/docker timestamps",
    }
    note = (
        "3 of 3 line(s): the printed time differs from the kubectl/docker timestamps by more than "
        "5 s (most often +7,200 s); the kubectl/docker timestamps were used; a steady +2 h usually "
        "means the server's local zone is not the one assumed: pass --tz"
    )
    assert trace.manifest.sources[0].notes == [note]


def test_printed_times_that_agree_with_outer_ones_raise_no_note() -> None:
    lines = [f"2025-06-02T10:00:0{i}.250Z {_stats(f'06-02 10:00:0{i}', i)}" for i in range(3)]
    diag = SourceDiagnostics("k", "vllm-log", "n")
    result = PARSER.parse_lines(pl.DataFrame({"line": lines}), ParseContext(), diag)
    assert result.samples is not None
    assert diag.notes == []


def test_equally_common_disagreements_name_the_smallest_offset_every_time() -> None:
    # GIVEN two offsets seen equally often (a tie that hash order used to break at random)
    diag = SourceDiagnostics("k", "vllm-log", "n")
    # WHEN they are reported
    report_disagreement({-7200: 2, 3600: 2, 1: 4}, 8, "kubectl/docker timestamps", diag)
    # THEN the smaller one is named
    note = (
        "4 of 8 line(s): the printed time differs from the kubectl/docker timestamps by more than "
        "5 s (most often +3,600 s); the kubectl/docker timestamps were used; a steady +1 h usually "
        "means the server's local zone is not the one assumed: pass --tz"
    )
    assert diag.notes == [note]


def test_collector_arrival_times_win_and_give_sub_second_resolution() -> None:
    lines = pl.DataFrame(
        {
            "line": [_stats("06-02 10:00:00", 1), _stats("06-02 10:00:00", 2)],
            "arrival_ts": [
                datetime(2025, 6, 2, 10, 0, 0, 100000, tzinfo=UTC),
                datetime(2025, 6, 2, 10, 0, 0, 900000, tzinfo=UTC),
            ],
        },
        schema_overrides={"arrival_ts": pl.Datetime("ns", "UTC")},
    )
    diag = SourceDiagnostics("tail", "vllm-log", "n")
    result = PARSER.parse_lines(lines, ParseContext(clock=ClockOptions()), diag)
    assert result.samples is not None
    running = result.samples.filter(pl.col("metric") == "requests_running")
    assert running["ts"].dt.microsecond().to_list() == [100000, 900000]
    assert result.clock["year_source"] == "collector arrival times"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=364 * 86400 - 1), min_size=1, max_size=40),
    st.integers(min_value=1, max_value=5),
)
def test_chunked_year_offsets_equal_whole_file_offsets(seconds: list[int], parts: int) -> None:
    md = [_md(s) for s in seconds]
    tod = [s % 86400 for s in seconds]
    whole, _ = year_offsets(pl.Series(md, dtype=pl.Int32), pl.Series(tod, dtype=pl.Int32))
    size = max(1, len(md) // parts)
    briefs, local = [], []
    for start in range(0, len(md), size):
        offsets, brief = year_offsets(
            pl.Series(md[start : start + size], dtype=pl.Int32),
            pl.Series(tod[start : start + size], dtype=pl.Int32),
        )
        briefs.append(brief)
        local.append(offsets)
    bases, summary = combine(briefs)
    joined = pl.concat([o + b for o, b in zip(local, bases, strict=True)])
    assert joined.to_list() == whole.to_list()
    assert summary.last is not None
    assert summary.last[2] == whole[-1]


def _md(second_of_year: int) -> int:
    day = second_of_year // 86400
    month_starts = [0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335, 366]
    month = next(m for m in range(12) if month_starts[m + 1] > day)
    return (month + 1) * 100 + day - month_starts[month] + 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([101, 228, 229, 301, 615, 1231, 1345, 0]),
            st.integers(min_value=0, max_value=86_399),
            st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(2105, 12, 31)),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_printed_minus_full_from_epoch_seconds_equals_the_calendar_reading(
    rows: list[tuple[int, int, datetime]],
) -> None:
    # GIVEN printed month-days (some impossible) and times against full timestamps, leap years
    # and dates before 1970 among them
    frame = pl.DataFrame(
        [(md, tod, ts.replace(tzinfo=UTC)) for md, tod, ts in rows],
        schema={
            "printed_month_day": pl.Int32,
            "printed_second_of_day": pl.Int32,
            "full_ts": pl.Datetime("ns", "UTC"),
        },
        orient="row",
    )
    # WHEN compared under UTC (read from epoch seconds) and under a zone that equals UTC but
    # goes through the calendar fields of each timestamp
    # THEN the seconds are the same
    assert (
        printed_minus_full(frame, "UTC").to_list() == printed_minus_full(frame, "Etc/UTC").to_list()
    )


def test_leap_calendar_days_count_from_january_first_with_a_february_29_every_year() -> None:
    days = pl.Series([(date(y, m, d) - date(1970, 1, 1)).days for y, m, d in _DATES])
    assert leap_calendar_day(days).to_list() == [0, 58, 60, 60, 365, 59, 0]


_DATES = [(2025, 1, 1), (2025, 2, 28), (2025, 3, 1), (2024, 3, 1), (2024, 12, 31), (2024, 2, 29),
          (1969, 1, 1)]  # fmt: skip


@pytest.mark.parametrize("stamp", ["", "2025-06-02T08:00:00Z "])
def test_a_header_with_no_such_month_places_nothing_in_time(tmp_path: Path, stamp: str) -> None:
    # GIVEN a log whose only header prints month 13 (a corrupt line), after a config line
    path = tmp_path / "vllm.log"
    path.write_text(
        "# GPU blocks: 12606, # CPU blocks: 4096\n"
        f"{stamp}DEBUG 13-45 25:61:61 [api_server.py:1805] Traceback (most recent call last):\n"
    )
    # WHEN it is ingested
    trace = ingest_paths([path], IngestOptions(format="vllm-log", year=2025))
    # THEN nothing is placed in time; the block counts, which need no time, are still the
    # engine's configuration (a start-up statement is kept without a time)
    source = trace.manifest.sources[0]
    assert source.lines_read == 2
    assert NO_TIME not in source.skipped
    assert trace.samples.height == 0
    assert trace.manifest.engine_config["num_gpu_blocks"] == 12606
