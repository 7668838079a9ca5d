"""A trace directory that lacks one of its tables (ingest always writes all three) is analysed
with the gap said: which table is missing, never a silent "0 events"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomtrace.cli import cli

SAMPLES = Path(__file__).resolve().parents[3] / "sample_logs"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize("table", ["events", "samples", "requests"])
def test_a_missing_table_is_named_in_the_gaps(tmp_path: Path, table: str) -> None:
    trace = tmp_path / "trace"
    assert run("ingest", str(SAMPLES / "vllm-foreign-process"), "-o", str(trace))[0] == 0
    (trace / f"{table}.parquet").unlink()
    expected = f"{table}.parquet is missing from the trace directory"
    code, out = run("analyze", str(trace))
    assert code in (0, 1)
    assert expected in out
    gaps = json.loads(run("analyze", str(trace), "--json")[1])["gaps"]
    (gap,) = [g for g in gaps if g["kind"] == "missing_table"]
    assert gap["category"] == "gap"
    assert expected in gap["detail"]
    report = tmp_path / "report.json"
    assert run("report", str(trace), "-o", str(report))[0] in (0, 1)
    assert expected in report.read_text(encoding="utf-8")
