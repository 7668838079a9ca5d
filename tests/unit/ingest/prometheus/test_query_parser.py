"""Prometheus HTTP API JSON (query_range matrix, query vector), as teams export it."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.cli import cli
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.parser_api import ClockOptions, ParseContext
from oomtrace.ingest.prometheus.query_parser import PARSER
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.trace import Trace

PROM = Path(__file__).resolve().parents[3] / "data" / "prometheus"
MiB = 1 << 20
T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)


def _ingest(path: Path) -> Trace:
    return ingest_paths([path], IngestOptions())


def _response(*series: dict[str, Any], kind: str = "matrix") -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": kind, "result": list(series)}}


def _series(name: str | None, values: list[tuple[float, str]], **labels: str) -> dict[str, Any]:
    metric = dict(labels) if name is None else {"__name__": name, **labels}
    return {"metric": metric, "values": [[t, v] for t, v in values]}


def _write(tmp_path: Path, doc: object, name: str = "export.json", lines: bool = False) -> Path:
    path = tmp_path / name
    if lines:
        path.write_text("\n".join(json.dumps(d) for d in doc) + "\n")  # type: ignore[attr-defined]
    else:
        path.write_text(json.dumps(doc))
    return path


def test_query_range_export_maps_every_dialect_and_names_the_host(tmp_path: Path) -> None:
    # GIVEN a query_range export holding vLLM, DCGM and cache_config_info series
    shutil.copy(PROM / "query_range.json", tmp_path / "q.json")
    trace = _ingest(tmp_path / "q.json")
    # THEN every point becomes a canonical sample at its own time
    step = [T0, T0 + timedelta(seconds=15), T0 + timedelta(seconds=30)]
    expected = pl.DataFrame(
        {
            "ts": step * 3,
            "device": [0] * 3 + [None] * 6,
            "metric": ["device_used_bytes"] * 3
            + ["kv_usage_ratio"] * 3
            + ["preemptions_total"] * 3,
            "value": [74210.0 * MiB, 81034.0 * MiB, 81034.0 * MiB, 0.5, 0.97, 1.0, 0.0, 0.0, 12.0],
        },
        schema={
            "ts": pl.Datetime("ns", "UTC"),
            "device": pl.Int32,
            "metric": pl.String,
            "value": pl.Float64,
        },
    )
    assert_frame_equal(
        trace.samples.select("ts", "device", "metric", "value").sort("metric", "ts"), expected
    )
    assert trace.manifest.nodes == ["gpu-node-7"]
    assert trace.manifest.engine_config["num_gpu_blocks"] == 27000
    diag = trace.manifest.sources[0]
    assert diag.lines_read == diag.lines_recognised == 12


def test_vector_results_and_json_lines_of_several_queries(tmp_path: Path) -> None:
    # GIVEN one /api/v1/query response per line, the second a vector
    first = _response(_series("vllm:num_requests_running", [(1741942800, "48")]))
    second = _response(
        {"metric": {"__name__": "vllm:num_requests_waiting"}, "value": [1741942800.5, "17"]},
        kind="vector",
    )
    trace = _ingest(_write(tmp_path, [first, second], lines=True))
    assert trace.samples.select("ts", "metric", "value").sort("metric").rows() == [
        (T0, "requests_running", 48.0),
        (T0 + timedelta(milliseconds=500), "requests_waiting", 17.0),
    ]


def test_an_array_of_responses_with_one_error_is_read_and_the_error_noted(tmp_path: Path) -> None:
    ok = _response(_series("sglang:token_usage", [(1741942800, "0.5")]))
    error = {"status": "error", "errorType": "bad_data", "error": "1:5: parse error"}
    trace = _ingest(_write(tmp_path, [ok, error]))
    assert trace.samples["value"].to_list() == [0.5]
    assert (
        "a response in this file is an error: bad_data: 1:5: parse error"
        in trace.manifest.sources[0].notes
    )


def test_an_error_response_alone_is_refused_with_its_text(tmp_path: Path) -> None:
    error = {
        "status": "error",
        "errorType": "execution",
        "error": "query processing would load too many samples into memory",
    }
    with pytest.raises(InputError) as err:
        _ingest(_write(tmp_path, error))
    assert str(err.value) == (
        "export.json: the Prometheus server answered with an error (execution: query "
        "processing would load too many samples into memory); fix the query and export its "
        "response again"
    )


def test_expression_results_without_a_name_are_counted_with_the_remedy(tmp_path: Path) -> None:
    doc = _response(
        _series(None, [(1741942800, "3"), (1741942815, "4")], engine="0"),
        _series("vllm:num_requests_running", [(1741942800, "3")]),
    )
    trace = _ingest(_write(tmp_path, doc))
    diag = trace.manifest.sources[0]
    assert diag.skipped["series without __name__ (an expression's result)"].count == 2
    assert any("query the raw metric names" in n for n in diag.notes)


def test_targets_are_kept_apart_and_nan_points_counted(tmp_path: Path) -> None:
    doc = _response(
        _series(
            "vllm:kv_cache_usage_perc",
            [(1741942800, "0.9"), (1741942815, "NaN")],
            instance="a:8000",
        ),
        _series("vllm:kv_cache_usage_perc", [(1741942800, "0.1")], instance="b:8000"),
    )
    trace = _ingest(_write(tmp_path, doc))
    assert trace.samples.select("value", "source").sort("source").rows() == [
        (0.9, "prometheus-query-json:export.json#instance=a:8000"),
        (0.1, "prometheus-query-json:export.json#instance=b:8000"),
    ]
    skipped = trace.manifest.sources[0].skipped
    assert skipped["NaN or infinite value (nothing measured yet)"].count == 1


def test_warnings_and_scalar_results_are_reported(tmp_path: Path) -> None:
    doc = [
        {**_response(_series("tgi_queue_size", [(1741942800, "2")])), "warnings": ["partial"]},
        {"status": "success", "data": {"resultType": "scalar", "result": [1741942800, "1"]}},
    ]
    trace = _ingest(_write(tmp_path, doc))
    diag = trace.manifest.sources[0]
    assert "the Prometheus server warned: partial" in diag.notes
    assert diag.skipped["response that is not a matrix or vector"].count == 1


def test_not_json_is_refused_and_bad_json_lines_counted(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"status": "success", "data": {"resultType": "matrix", "resu')
    with pytest.raises(InputError, match=r"^broken.json: not valid JSON \("):
        _ingest(path)
    good = json.dumps(_response(_series("tgi_queue_size", [(1741942800, "2")])))
    mixed = tmp_path / "mixed.json"
    mixed.write_text(good + "\n{oops\n")
    trace = _ingest(mixed)
    assert trace.manifest.sources[0].skipped["line that is not JSON"].count == 1


def test_a_bare_data_object_is_accepted(tmp_path: Path) -> None:
    doc = _response(_series("llamacpp:requests_processing", [(1741942800, "4")]))["data"]
    assert _ingest(_write(tmp_path, doc)).samples["value"].to_list() == [4.0]


@pytest.mark.parametrize(
    ("head", "score"),
    [
        ('{"status":"success","data":{"resultType":"matrix","result":[]}}', 0.95),
        ('[{"status":"error","errorType":"bad_data","error":"x"}]', 0.9),
        ('{"model_type": "llama"}', 0.0),
        ("# HELP vllm:x y\n", 0.0),
    ],
)
def test_sniffing(head: str, score: float) -> None:
    assert PARSER.sniff(head, "x.json") == score


def test_cli_refusal_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, {"status": "error", "errorType": "timeout", "error": "took too long"})
    result = CliRunner().invoke(cli, ["ingest", str(path), "--out", str(tmp_path / "t")])
    assert result.exit_code == 2
    assert result.stderr == (
        "oomtrace: error: export.json: the Prometheus server answered with an error (timeout: "
        "took too long); fix the query and export its response again\n"
    )


@settings(max_examples=80, deadline=None)
@given(data=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_arbitrary_input_only_ever_raises_a_refusal(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("j") / "x.json"
    path.write_bytes(data)
    ctx = ParseContext(clock=ClockOptions(), mtime=T0)
    try:
        PARSER.parse(InputFile(path, "x.json"), ctx, SourceDiagnostics("x", "p", "n"))
    except InputError as err:
        assert "not valid JSON" in str(err) or "answered with an error" in str(err)  # noqa: PT017


@settings(max_examples=60, deadline=None)
@given(
    points=st.lists(
        st.tuples(
            st.one_of(st.floats(allow_nan=False, width=64), st.text(max_size=5), st.none()),
            st.one_of(st.text(max_size=8), st.floats(), st.none()),
        ),
        max_size=8,
    )
)
def test_arbitrary_points_in_a_valid_shape_never_raise(
    tmp_path_factory: pytest.TempPathFactory, points: list[tuple[object, object]]
) -> None:
    doc = _response({"metric": {"__name__": "vllm:num_requests_running"}, "values": points})
    path = tmp_path_factory.mktemp("q") / "q.json"
    path.write_text(json.dumps(doc))
    ctx = ParseContext(clock=ClockOptions(), mtime=T0)
    PARSER.parse(InputFile(path, "q.json"), ctx, SourceDiagnostics("q", "p", "n"))
