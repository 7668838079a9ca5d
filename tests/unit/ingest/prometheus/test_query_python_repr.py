"""Prometheus HTTP API responses as Python printed them (``print(resp.json())``) and people paste
them into issues: the same data in Python's literal syntax, read with ``ast.literal_eval``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths, sniff
from oomtrace.ingest.text.input_file import InputFile
from tests.factories import file_at

PROM = Path(__file__).resolve().parents[3] / "data" / "prometheus"
MTIME = datetime(2025, 1, 18, 12, 0, tzinfo=UTC)
# As Python prints such a response (a dict's repr); the figures are illustrative.
MATRIX = (
    "{'status': 'success', 'data': {'resultType': 'matrix', 'result': [{'metric': "
    "{'__name__': 'vllm:num_requests_running', 'model_name': 'm'}, 'values': "
    "[[1737152879.498, '3'], [1737152884.498, '5']]}, {'metric': {'__name__': "
    "'vllm:gpu_cache_usage_perc', 'model_name': 'm'}, 'values': [[1737152879.498, "
    "'0.004531619501132209']]}]}}\n"
)


def test_a_printed_matrix_is_read_like_its_json(tmp_path: Path) -> None:
    path = file_at(tmp_path / "resp.txt", MTIME, text=MATRIX)
    parser = sniff(InputFile(path, path.name), explicit=False).parser
    assert parser is not None
    assert parser.name == "prometheus-query-json"
    trace = ingest_paths([path], IngestOptions())
    rows = trace.samples.sort("metric", "ts").select("metric", "value").rows()
    assert rows == [
        ("kv_usage_ratio", 0.004531619501132209),
        ("requests_running", 3.0),
        ("requests_running", 5.0),
    ]
    assert trace.samples["ts"].min() == datetime(2025, 1, 17, 22, 27, 59, 498000, tzinfo=UTC)


def test_a_response_behind_other_text_on_its_line(tmp_path: Path) -> None:
    path = file_at(tmp_path / "log.txt", MTIME, text="Got response from metrics server: " + MATRIX)
    trace = ingest_paths([path], IngestOptions())
    assert trace.samples.filter(pl.col("metric") == "requests_running").height == 2


def test_a_pasted_instant_query_of_an_expression_is_read_and_said_so(tmp_path: Path) -> None:
    # GoogleCloudPlatform/ai-on-gke PR 937: the series have no __name__ (a stddev query)
    path = file_at(tmp_path / "p.txt", MTIME, copy_of=PROM / "python-repr-instant-query.txt")
    trace = ingest_paths([path], IngestOptions())
    assert trace.samples.height == 0
    (diag,) = trace.manifest.sources
    assert diag.parser == "prometheus-query-json"
    assert diag.skipped["series without __name__ (an expression's result)"].count == 2
    assert diag.skipped["line that is not JSON"].count == 2
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped
    assert any("no __name__" in note for note in diag.lost)


def test_a_literal_that_would_run_code_is_not_evaluated(tmp_path: Path) -> None:
    text = "{'status': 'success', 'data': {'resultType': 'vector', 'result': __import__('os')}}\n"
    path = file_at(tmp_path / "evil.txt", MTIME, text=text)
    with pytest.raises(InputError, match=r"^evil\.txt: not valid JSON"):
        ingest_paths([path], IngestOptions())
