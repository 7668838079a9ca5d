"""Values no measurement can hold: left out and counted where rows enter a trace, refused in a
trace read back, and never a crash in the byte conversion every parser shares."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

from oomtrace.errors import SchemaError
from oomtrace.schema import MAX_COUNT, conform, conform_within_range
from oomtrace.units import MAX_BYTES, bytes_beyond_range, bytes_expr

T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)


def samples(values: list[float], ts: list[datetime] | None = None) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": ts or [T0] * len(values),
            "node": "n",
            "source": "s",
            "metric": "requests_running",
            "value": values,
        }
    )


def test_a_sample_beyond_its_kind_leaves_its_row_and_is_counted() -> None:
    frame = samples([3.0, 1e29, float("inf"), 5.0])
    out, left_out = conform_within_range("samples", frame, what="metrics.prom")
    assert out["value"].to_list() == [3.0, 5.0]
    assert left_out.count == 2
    assert left_out.example == f"samples row at {T0}: value = 1e+29"


def test_a_time_outside_what_a_trace_holds_leaves_its_row() -> None:
    frame = samples([1.0, 2.0], ts=[T0, datetime(2262, 1, 1, tzinfo=UTC)])
    out, left_out = conform_within_range("samples", frame)
    assert (out.height, left_out.count) == (1, 1)


def test_an_optional_value_out_of_range_becomes_null_and_the_row_stays() -> None:
    requests = pl.DataFrame(
        {
            "ts": [T0, T0],
            "node": "n",
            "source": "s",
            "request_id": ["a", "b"],
            "event": "arrived",
            "prompt_tokens": [10**28 // 10**10, -1],  # 10^18 tokens, and a negative count
            "max_tokens": [64, 64],
        }
    )
    out, left_out = conform_within_range("requests", requests)
    assert out["prompt_tokens"].to_list() == [None, None]
    assert out["max_tokens"].to_list() == [64, 64]
    assert left_out.count == 2
    events = pl.DataFrame(
        {"ts": [T0], "node": "n", "source": "s", "kind": "oom", "requested_bytes": [2**62]}
    )
    out, left_out = conform_within_range("events", events)
    assert (out.height, out["requested_bytes"][0], left_out.count) == (1, None, 1)


def test_a_trace_holding_a_value_out_of_range_is_refused_with_the_column() -> None:
    with pytest.raises(SchemaError, match=r"samples table from t: column value holds 1 value"):
        conform("samples", samples([1e29]), what="t")


def test_values_at_the_limits_are_kept() -> None:
    out, left_out = conform_within_range("samples", samples([0.0, float(MAX_COUNT)]))
    assert (out.height, left_out.count) == (2, 0)


def test_a_size_beyond_any_device_is_null_not_a_crash() -> None:
    frame = pl.DataFrame({"n": ["1", "1" + "0" * 29, "1024"], "u": ["GiB", "GiB", "TiB"]})
    out = frame.select(
        bytes=bytes_expr(pl.col("n"), pl.col("u")),
        beyond=bytes_beyond_range(pl.col("n"), pl.col("u")),
    )
    assert out["bytes"].to_list() == [2**30, None, MAX_BYTES]
    assert out["beyond"].to_list() == [False, True, False]
