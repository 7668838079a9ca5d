"""The windowed analysis of a long trace (oomtrace.analysis.windowed) against the single pass on
the same traces: the same incidents, classes, peaks and culprits, memory bounded by the windows."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Findings
from oomtrace.analysis.observed_series import BYTES_METRICS
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.prepare import tables_on_node
from oomtrace.analysis.sample_buckets import OutOfOrder, bucketed_samples
from oomtrace.analysis.samples import read_samples
from oomtrace.analysis.trace_scan import open_trace
from oomtrace.analysis.windowed import analyze_windowed
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.trace import Trace, read_trace, write_trace
from tests import scenarios

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_logs"
sys.path.insert(0, str(ROOT / "benchmarks"))
from analyze_data import generate  # noqa: E402

WINDOWED = AnalyzeOptions(windowed_above_rows=0)  # every trace takes the windowed path


def what_matters(findings: Findings) -> list[dict[str, Any]]:
    """Of every incident: what it is, when and how high it peaked, and who caused it."""
    return [
        {
            "class": i.cls,
            "anchor": i.anchor,
            "node": i.node,
            "device": i.device,
            "peak_ts": i.peak_ts,
            "peak_bytes": i.peak_bytes,
            "observed_bytes": i.observed_bytes,
            "culprits": [(c.request_id, c.bytes) for c in i.culprits],
        }
        for i in findings.incidents
    ]


def both_ways(trace: Trace | Any) -> tuple[Findings, Findings]:
    single = analyze(trace, AnalyzeOptions())
    tables = tables_on_node(trace, None)
    windowed = analyze_windowed(tables, WINDOWED)
    assert windowed is not None, "the windowed path declined the trace"
    return single, windowed


def sample(name: str) -> Trace:
    with (SAMPLES / name / "expected.toml").open("rb") as f:
        clock = tomllib.load(f).get("ingest", {})
    return load_any([SAMPLES / name], IngestOptions(year=clock.get("year"), tz=clock.get("tz")))


TIMED = [
    "sglang-retraction",
    "vllm-foreign-process",
    "vllm-kv-exhaustion",
    "vllm-leak-headroom",
    "vllm-prefill-oom",
    "vllm-saturated-plateau",
]


@pytest.mark.parametrize("name", TIMED)
def test_a_sample_incident_reads_the_same_in_windows(name: str) -> None:
    # GIVEN a sample incident, WHEN analysed in one pass and in windows
    single, windowed = both_ways(sample(name))
    # THEN the incidents are the same: class, peak, figures and culprits in order
    assert what_matters(windowed) == what_matters(single)
    assert windowed.trace.requests == single.trace.requests
    assert windowed.trace.samples == single.trace.samples


@pytest.mark.parametrize("name", sorted(scenarios.SHAPES))
def test_a_scenario_reads_the_same_in_windows(name: str) -> None:
    trace = scenarios.SHAPES[name]().trace
    if trace.samples.is_empty():
        pytest.skip("no samples: the windowed path reads them first")
    single, windowed = both_ways(trace)
    assert what_matters(windowed) == what_matters(single)


def test_a_generated_stretch_of_serving_reads_the_same_in_windows(tmp_path: Path) -> None:
    # GIVEN half an hour of serving at 100 Hz with 20,000 requests and an OOM at its end,
    # written as a trace directory and scanned
    path = generate(tmp_path / "trace", requests=20_000, hours=0.5, hz=100.0)
    scanned = open_trace(path)
    # WHEN analysed in one pass and in windows
    single, windowed = both_ways(scanned)
    # THEN the OOM, its peak and its culprits are the same
    assert what_matters(single)[0]["anchor"] == "oom"
    assert what_matters(windowed) == what_matters(single)
    # and the trace's totals are of the whole trace, though the timeline held only the window's
    assert windowed.trace.requests == single.trace.requests == 20_000
    assert windowed.trace.request_events == single.trace.request_events
    assert (windowed.trace.start, windowed.trace.end) == (single.trace.start, single.trace.end)
    # the memory series keep every bucket's peak outside the window, all rows inside it
    for findings in (single, windowed):
        device = findings.series.filter(findings.series["metric"] == "device_used_bytes")
        assert (
            device["value"].max()
            == single.series.filter(single.series["metric"] == "device_used_bytes")["value"].max()
        )


def test_a_long_trace_takes_the_windowed_path_by_its_size(tmp_path: Path) -> None:
    path = generate(tmp_path / "trace", requests=5_000, hours=0.3, hz=100.0)
    # GIVEN a threshold below the trace's rows, WHEN analysed through analyze()
    small = analyze(open_trace(path), AnalyzeOptions(windowed_above_rows=10**9))
    windowed = analyze(open_trace(path), WINDOWED)

    # THEN the modelled KV is kept only in the window read (the single pass models all of it)
    def modelled(f: Findings) -> int:
        return f.series.filter(f.series["kind"] == "modelled").height

    assert modelled(windowed) < modelled(small)
    assert what_matters(windowed) == what_matters(small)


@pytest.mark.parametrize("node", [None, "node-b"])
def test_two_nodes_read_the_same_in_windows(tmp_path: Path, node: str | None) -> None:
    # GIVEN two nodes serving the same traffic, each with an OOM, in one trace directory
    one = read_trace(generate(tmp_path / "one", requests=4_000, hours=0.2, hz=50.0))
    twin = [f.with_columns(node=pl.lit("node-b")) for f in (one.samples, one.requests, one.events)]
    one.manifest.nodes = ["node-a", "node-b"]
    both = Trace(
        pl.concat([one.samples, twin[0]]),
        pl.concat([one.requests, twin[1]]),
        pl.concat([one.events, twin[2]]),
        one.manifest,
    )
    write_trace(both, tmp_path / "both")
    # WHEN analysed in one pass and in windows, on every node and on one
    single = analyze(open_trace(tmp_path / "both"), AnalyzeOptions(node=node))
    windowed = analyze(
        open_trace(tmp_path / "both"), AnalyzeOptions(node=node, windowed_above_rows=0)
    )
    # THEN the incidents of each node are the same
    assert what_matters(windowed) == what_matters(single)
    assert {i.node for i in windowed.incidents} == (
        {"node-a", "node-b"} if node is None else {node}
    )
    assert windowed.trace.requests == single.trace.requests


def test_the_bucket_pass_keeps_every_peak_and_finds_the_same_holes() -> None:
    # GIVEN a scenario's samples, read whole and read in buckets by batches of 50 rows
    samples = scenarios.SHAPES["slow_leak"]().trace.samples
    whole = read_samples(samples.lazy(), BYTES_METRICS, lambda: None)
    bucketed = bucketed_samples(
        samples.lazy(), BYTES_METRICS, lambda: None, width_ns=10**10, chunk_rows=50
    )
    # THEN each series keeps its largest and smallest value, and its holes are the same
    assert bucketed.view.memory.names() == whole.memory.names()
    for name in whole.memory.names():
        rows, kept = whole.memory.rows(name)["value"], bucketed.view.memory.rows(name)["value"]
        assert (kept.max(), kept.min()) == (rows.max(), rows.min())
        assert kept.len() < rows.len()
    assert bucketed.holes.drop("usual_s").equals(whole.memory.holes().drop("usual_s"))
    assert bucketed.view.rows == whole.rows
    assert bucketed.view.spans.equals(whole.spans)


def test_a_series_out_of_time_order_across_batches_is_read_in_one_pass() -> None:
    samples = scenarios.SHAPES["slow_leak"]().trace.samples
    shuffled = samples.sample(fraction=1.0, shuffle=True, seed=1).lazy()
    with pytest.raises(OutOfOrder):
        bucketed_samples(shuffled, BYTES_METRICS, lambda: None, width_ns=10**9, chunk_rows=50)
