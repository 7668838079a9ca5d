"""Canonical tables: conform fails in one place with a column-level message."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomtrace.errors import SchemaError
from oomtrace.schema import (
    CLOCK_STATES,
    EVENTS,
    LIMITS,
    METRICS,
    REQUESTS,
    SAMPLES,
    TS,
    conform,
    empty,
)
from tests.factories import T0, at, events, requests, samples


def test_conform_adds_missing_nullable_columns_and_orders_them() -> None:
    frame = pl.DataFrame(
        {
            "metric": ["device_used_bytes"],
            "value": [1.0],
            "ts": [T0],
            "node": ["n"],
            "source": ["s"],
        }
    )
    out = conform("samples", frame)
    assert out.schema == SAMPLES
    assert out["device"].to_list() == [None]


def test_conform_converts_other_zones_to_utc_nanoseconds() -> None:
    local = pl.Series([datetime(2025, 1, 1, 1, 0)]).dt.replace_time_zone("Europe/Berlin")
    out = samples({"ts": local[0], "metric": "kv_usage_ratio", "value": 0.5})
    assert out.schema["ts"] == TS
    assert out["ts"][0] == datetime(2025, 1, 1, 0, 0, tzinfo=T0.tzinfo)


@pytest.mark.parametrize(
    ("table", "frame", "message"),
    [
        (
            "samples",
            {"ts": [T0], "node": ["n"], "source": ["s"], "metric": ["gpu_mem"], "value": [1.0]},
            "column metric has value(s) outside the vocabulary: gpu_mem",
        ),
        (
            "samples",
            {
                "ts": [T0],
                "node": ["n"],
                "source": ["s"],
                "metric": ["device_used_bytes"],
                "value": [1.5],
            },
            "holds a fraction (1.5) for whole-number metric",
        ),
        (
            "samples",
            {
                "ts": [T0],
                "node": ["n"],
                "source": ["s"],
                "metric": ["kv_usage_ratio"],
                "valu": [1.0],
            },
            "unknown column(s) valu",
        ),
        (
            "requests",
            {"ts": [T0], "node": ["n"], "source": ["s"], "request_id": ["r"], "event": ["started"]},
            "column event has value(s) outside",
        ),
        (
            "requests",
            {
                "ts": [T0],
                "node": ["n"],
                "source": ["s"],
                "request_id": [None],
                "event": ["admitted"],
            },
            "column request_id has 1 null value(s)",
        ),
        (
            "requests",
            {
                "ts": [T0],
                "node": ["n"],
                "source": ["s"],
                "request_id": ["r"],
                "event": ["admitted"],
                "prompt_tokens": ["many"],
            },
            "requests table",
        ),
        (
            "events",
            {"ts": [T0], "node": ["n"], "source": ["s"], "kind": ["oom"], "requested_bytes": [-1]},
            "column requested_bytes has negative values",
        ),
    ],
)
def test_conform_names_the_column_that_is_wrong(
    table: str, frame: dict[str, list[object]], message: str
) -> None:
    with pytest.raises(SchemaError) as err:
        conform(table, pl.DataFrame(frame), what="x.log")  # type: ignore[arg-type]
    assert message in str(err.value)
    assert "from x.log" in str(err.value)


def test_naive_timestamps_are_refused_rather_than_guessed() -> None:
    frame = pl.DataFrame(
        {"ts": [datetime(2025, 1, 1)], "node": ["n"], "source": ["s"], "kind": ["oom"]}
    )
    with pytest.raises(SchemaError, match="has no time zone"):
        conform("events", frame)


def test_factories_produce_conformed_tables() -> None:
    assert requests({"ts": at(1), "request_id": "r1", "event": "admitted"}).schema == REQUESTS
    assert events({"ts": at(2), "kind": "oom", "requested_bytes": 1 << 30}).schema == EVENTS
    assert empty("events").schema == EVENTS


@given(st.sampled_from(sorted(METRICS)), st.data())
def test_whole_numbers_pass_for_every_metric(metric: str, data: st.DataObject) -> None:
    # up to the limit of the metric's kind (schema.LIMITS): beyond it a value is out of range
    value = data.draw(st.integers(min_value=0, max_value=int(LIMITS[METRICS[metric][0]])))
    assert samples({"ts": T0, "metric": metric, "value": float(value)}).height == 1


def test_every_row_has_a_clock_stated_unless_said_otherwise() -> None:
    # GIVEN rows built without a clock (a parser that never aligns, a test factory)
    out = samples({"ts": at(0), "metric": "kv_usage_ratio", "value": 0.5})
    # THEN they are on the stated clock, in the closed vocabulary
    assert out["clock"].to_list() == ["stated"]
    assert out.schema["clock"] == pl.Enum(list(CLOCK_STATES))
    with pytest.raises(SchemaError, match="clock"):
        events({"ts": at(0), "kind": "oom", "clock": "guessed"})


def test_only_an_untimed_row_may_lack_a_time_and_an_untimed_row_has_none() -> None:
    kept = events({"ts": None, "kind": "oom", "clock": "untimed"})
    assert kept["ts"].to_list() == [None]
    with pytest.raises(SchemaError, match="column ts has 1 null value"):
        events({"ts": None, "kind": "oom", "clock": "unaligned"})
    with pytest.raises(SchemaError, match="clock 'untimed' and a time"):
        events({"ts": at(0), "kind": "oom", "clock": "untimed"})


def test_an_event_without_a_phase_reads_as_not_stated_and_a_phase_is_from_the_vocabulary() -> None:
    # GIVEN an events frame written before the phase column existed
    frame = pl.DataFrame({"ts": [T0], "node": ["n"], "source": ["s"], "kind": ["oom"]})
    # THEN it reads with the phase null ("not stated")
    assert conform("events", frame)["phase"].to_list() == [None]
    # AND a phase is one of the vocabulary's, or refused with the column named
    assert conform("events", frame.with_columns(phase=pl.lit("graph_capture")))["phase"][0] == (
        "graph_capture"
    )
    with pytest.raises(SchemaError, match="column phase has value"):
        conform("events", frame.with_columns(phase=pl.lit("lunch")))
