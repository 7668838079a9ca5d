"""A trace directory scanned for analysis: the same findings and the same errors as reading it."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from oomtrace.analysis import analyze, open_trace
from oomtrace.analysis.findings import dumps
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.trace_scan import TraceScan
from oomtrace.errors import OomtraceError
from oomtrace.schema import TableName
from oomtrace.trace import Trace, read_trace, write_trace
from tests import scenarios


def written(tmp_path: Path, trace: Trace) -> Path:
    out = tmp_path / "trace"
    write_trace(trace, out)
    return out


@pytest.mark.parametrize("name", sorted(scenarios.SHAPES))
def test_a_scanned_directory_gives_the_findings_of_the_trace_read_whole(
    tmp_path: Path, name: str
) -> None:
    # GIVEN a scenario written as a trace directory
    path = written(tmp_path, scenarios.SHAPES[name]().trace)
    # WHEN it is analysed scanned and analysed read whole
    scanned = open_trace(path)
    assert isinstance(scanned, TraceScan)
    # THEN the findings documents are the same, byte for byte
    assert dumps(analyze(scanned)) == dumps(analyze(read_trace(path)))


def test_a_scanned_directory_on_one_node_gives_that_nodes_findings(tmp_path: Path) -> None:
    trace = scenarios.long_requests_growing().trace
    path = written(tmp_path, trace)
    options = AnalyzeOptions(node="node-a")
    assert dumps(analyze(open_trace(path), options)) == dumps(analyze(trace, options))


def _rewrite(path: Path, table: str, change: pl.Expr | None = None, **columns: pl.Expr) -> None:
    file = path / f"{table}.parquet"
    frame = pl.read_parquet(file)
    frame = frame.with_columns(**columns) if columns else frame
    if change is not None:
        frame = frame.with_columns(change)
    frame.write_parquet(file)


def _error(call: object) -> str:
    with pytest.raises(OomtraceError) as caught:
        call()  # type: ignore[operator]
    return str(caught.value)


BAD_VALUES = {
    "null source in a memory series": (
        "samples",
        {"source": pl.when(pl.col("metric") == "device_used_bytes").then(None).otherwise("source")},
    ),
    "a fraction in a memory series": (
        "samples",
        {
            "value": pl.when(pl.col("metric") == "torch_reserved_bytes")
            .then(pl.col("value") + 0.5)
            .otherwise("value")
        },
    ),
    "a fraction in an engine count": (
        "samples",
        {"value": pl.when(pl.col("metric") == "kv_blocks_used").then(1.5).otherwise("value")},
    ),
    "a metric outside the vocabulary": (
        "samples",
        {
            "metric": pl.when(pl.col("metric") == "kv_blocks_used")
            .then(pl.lit("kv_bogus"))
            .otherwise("metric")
        },
    ),
    "a negative prompt": ("requests", {"prompt_tokens": -pl.col("prompt_tokens")}),
    "an unknown event": (
        "requests",
        {"event": pl.when(pl.col("event") == "finished").then(pl.lit("done")).otherwise("event")},
    ),
    "a null request id": ("requests", {"request_id": pl.lit(None, pl.String)}),
    "a null source of a request": ("requests", {"source": pl.lit(None, pl.String)}),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_scanned_directory_with_a_bad_value_fails_as_reading_it_fails(
    tmp_path: Path, case: str
) -> None:
    # GIVEN a trace directory with one kind of bad value in one table
    path = written(tmp_path, scenarios.long_requests_growing().trace)
    table, columns = BAD_VALUES[case]
    _rewrite(path, table, **columns)
    # WHEN it is analysed scanned (its columns are as oomtrace writes them)
    scanned = open_trace(path)
    assert isinstance(scanned, TraceScan)
    # THEN the error is the one reading it whole gives
    assert _error(lambda: analyze(scanned)) == _error(lambda: read_trace(path))


def test_a_directory_with_other_column_types_is_read_whole_and_analysed_alike(
    tmp_path: Path,
) -> None:
    # GIVEN a trace whose device column was written as 64-bit integers (read_trace casts it)
    trace = scenarios.foreign_process().trace
    path = written(tmp_path, trace)
    _rewrite(path, "samples", pl.col("device").cast(pl.Int64))
    # WHEN opened for analysis, THEN it is read whole, and the findings are the trace's
    opened = open_trace(path)
    assert isinstance(opened, Trace)
    assert dumps(analyze(opened)) == dumps(analyze(trace))


def test_a_directory_that_is_not_a_trace_fails_as_reading_it_fails(tmp_path: Path) -> None:
    assert _error(lambda: open_trace(tmp_path)) == _error(lambda: read_trace(tmp_path))


def _drop(path: Path, table: str, *columns: str) -> None:
    file = path / f"{table}.parquet"
    pl.read_parquet(file).drop(columns).write_parquet(file)


@pytest.mark.parametrize(
    "dropped",
    [{"requests": ("kv_blocks",)}, dict.fromkeys(("samples", "requests", "events"), ("clock",))],
    ids=["before requests.kv_blocks", "before clock"],
)
def test_a_trace_written_before_a_nullable_column_is_scanned_with_it_null(
    tmp_path: Path, dropped: dict[TableName, tuple[str, ...]]
) -> None:
    # GIVEN a trace directory written before a nullable column was added to a table's schema
    path = written(tmp_path, scenarios.long_requests_growing().trace)
    for table, columns in dropped.items():
        _drop(path, table, *columns)
    # WHEN it is opened for analysis
    scanned = open_trace(path)
    # THEN it is scanned, not read whole; its tables have the schema's columns (the added ones
    # null, or stated), and the findings are those of reading it whole
    assert isinstance(scanned, TraceScan)
    whole = read_trace(path)
    for table, columns in dropped.items():
        frame = scanned.scan(table).collect()
        assert frame.schema == whole.table(table).schema
        assert frame.equals(whole.table(table))
        assert {frame[c].null_count() for c in columns if c != "clock"} <= {frame.height}
    assert dumps(analyze(scanned)) == dumps(analyze(whole))


def test_a_trace_without_a_required_column_is_read_whole_with_its_error(tmp_path: Path) -> None:
    path = written(tmp_path, scenarios.long_requests_growing().trace)
    _drop(path, "requests", "request_id")
    assert _error(lambda: open_trace(path)) == _error(lambda: read_trace(path))
    assert "missing required column(s) request_id" in _error(lambda: read_trace(path))
