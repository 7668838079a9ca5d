"""Trace directories round-trip, are plain Parquet, and refuse to be overwritten silently."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError, SchemaError
from oomtrace.trace import Manifest, Trace, read_trace, write_trace
from tests.factories import at, events, requests, samples


def _trace() -> Trace:
    diag = SourceDiagnostics(name="server.log", parser="vllm-log", node="node-a", lines_read=3)
    diag.skip("unrecognised", 1, "prompt: 'secret text' and more")
    return Trace(
        samples=samples({"ts": at(0), "metric": "device_used_bytes", "value": 2.0**33}),
        requests=requests(
            {"ts": at(1), "request_id": "<b>r1</b>", "event": "admitted", "prompt_tokens": 4096}
        ),
        events=events({"ts": at(2), "kind": "oom", "requested_bytes": None}),
        manifest=Manifest(nodes=["node-a"], engine_config={"block_size": 16}, sources=[diag]),
    )


def test_a_trace_round_trips_through_its_directory(tmp_path: Path) -> None:
    trace = _trace()
    write_trace(trace, tmp_path / "t")
    back = read_trace(tmp_path / "t")
    assert_frame_equal(back.samples, trace.samples)
    assert_frame_equal(back.requests, trace.requests)
    assert_frame_equal(back.events, trace.events)
    assert back.manifest.to_json() == trace.manifest.to_json()


def test_diagnostic_examples_never_keep_prompt_text(tmp_path: Path) -> None:
    write_trace(_trace(), tmp_path / "t")
    text = (tmp_path / "t" / "manifest.json").read_text()
    assert "secret" not in text
    assert '"example": "<withheld: the line may hold prompt or output text>"' in text


def test_duckdb_and_pandas_read_the_files_without_oomtrace(tmp_path: Path) -> None:
    write_trace(_trace(), tmp_path / "t")
    con = duckdb.connect()
    row = con.execute(
        f"select request_id, prompt_tokens, event from '{tmp_path / 't' / 'requests.parquet'}'"
    ).fetchone()
    assert row == ("<b>r1</b>", 4096, "admitted")
    frame = pd.read_parquet(tmp_path / "t" / "samples.parquet")
    assert frame["value"].tolist() == [2.0**33]
    assert str(frame["ts"].dtype).startswith("datetime64[ns, UTC]")


def test_existing_traces_are_not_replaced_without_force(tmp_path: Path) -> None:
    write_trace(_trace(), tmp_path / "t")
    with pytest.raises(InputError, match="already holds a trace; pass --force"):
        write_trace(_trace(), tmp_path / "t")
    write_trace(_trace(), tmp_path / "t", overwrite=True)


def test_reading_a_directory_without_a_manifest_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"not a trace directory .*`oomtrace ingest"):
        read_trace(tmp_path)


def _written_as(version: int, folder: Path) -> Path:
    """A trace whose manifest says it was written with schema ``version``."""
    write_trace(_trace(), folder)
    manifest = folder / "manifest.json"
    data = json.loads(manifest.read_text())
    data["schema_version"] = version
    manifest.write_text(json.dumps(data))
    return folder


def test_a_manifest_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"schema version 99 is not one this oomtrace reads"):
        read_trace(_written_as(99, tmp_path / "t"))


def test_a_version_1_trace_is_read_with_every_row_stated(tmp_path: Path) -> None:
    # GIVEN a trace written before the clock column (schema version 1)
    folder = _written_as(1, tmp_path / "t")
    for name in ("samples", "requests", "events"):
        file = folder / f"{name}.parquet"
        pl.read_parquet(file).drop("clock").write_parquet(file)
    # WHEN it is read THEN every row is on the stated clock, and it is written as the current one
    back = read_trace(folder)
    assert back.events["clock"].to_list() == ["stated"]
    assert back.manifest.schema_version == 3


def test_a_version_2_trace_is_a_valid_version_3_trace(tmp_path: Path) -> None:
    # version 3 only added words to the vocabularies (event kind process, state_usage_ratio)
    back = read_trace(_written_as(2, tmp_path / "t"))
    assert back.manifest.schema_version == 3
    assert back.samples.height == _trace().samples.height


def test_rows_set_apart_are_kept_but_not_in_time(tmp_path: Path) -> None:
    # GIVEN a trace one of whose inputs could not be aligned
    trace = _trace()
    moved = events(
        {"ts": at(2), "kind": "oom", "clock": "stated"},
        {"ts": at(9), "kind": "engine_dead", "clock": "unaligned"},
    )
    diag = SourceDiagnostics("old.log", "vllm-log", "node-a", clock={"status": "unaligned"})
    trace = Trace(trace.samples, trace.requests, moved, Manifest(sources=[diag]))
    # THEN the trace keeps both rows, and in_time() only the one on the shared clock
    write_trace(trace, tmp_path / "t")
    assert read_trace(tmp_path / "t").events.height == 2
    assert trace.in_time().events["kind"].to_list() == ["oom"]


def test_manifest_is_deterministic(tmp_path: Path) -> None:
    write_trace(_trace(), tmp_path / "a")
    write_trace(_trace(), tmp_path / "b")
    assert (tmp_path / "a" / "manifest.json").read_bytes() == (
        tmp_path / "b" / "manifest.json"
    ).read_bytes()


def test_reading_some_request_columns_leaves_the_others_null(tmp_path: Path) -> None:
    # GIVEN a trace whose request row states its prompt and its sampling parameters
    trace = _trace()
    trace.requests = trace.requests.with_columns(n=pl.lit(2, dtype=pl.Int64))
    write_trace(trace, tmp_path / "t")
    # WHEN it is read for the prompt only
    back = read_trace(tmp_path / "t", request_columns=["prompt_tokens"])
    # THEN the prompt and the required columns are read, the rest is null, the schema is whole
    assert back.requests.columns == trace.requests.columns
    assert back.requests.row(0, named=True) | {"n": 2} == trace.requests.row(0, named=True)
    assert back.requests["n"].to_list() == [None]
