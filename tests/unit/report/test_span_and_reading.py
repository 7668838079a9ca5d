"""The charts cover the incident, not the hours around it, and the report reads only what it
draws: a trace directory is scanned inside the charts' span, as analyze scans it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl

from oomtrace.analysis import open_trace
from oomtrace.report import ReportInputs, build_report
from oomtrace.report.chart_data import observed_samples
from oomtrace.report.span import chart_span
from oomtrace.report.trace_view import view_of
from oomtrace.trace import Manifest, Trace, write_trace
from oomtrace.units import GiB
from tests import factories
from tests.factories import at


def iso(seconds: float) -> str:
    return at(seconds).isoformat().replace("+00:00", "Z")


def day_of_samples(every_s: int = 10) -> Trace:
    """Six hours of device memory every ``every_s`` seconds, with an OOM at 4 h."""
    rows = [
        {"ts": at(s), "metric": "device_used_bytes", "value": float(10 * GiB + (s % 600) * 1000)}
        for s in range(0, 6 * 3600, every_s)
    ]
    return Trace(
        factories.samples(*rows),
        events=factories.events({"ts": at(4 * 3600), "kind": "oom", "requested_bytes": GiB}),
        manifest=Manifest(nodes=["node-a"], engine={"name": "vllm", "version": "0.13.0"}),
    )


INCIDENT = {
    "id": "I1",
    "class": "transient_peak",
    "start": iso(4 * 3600 - 30),
    "window_start": iso(4 * 3600 - 60),
    "peak_ts": iso(4 * 3600),
}


def test_the_span_covers_the_incident_not_the_hours_around_it() -> None:
    # GIVEN a six-hour trace and an incident whose window is the last minute before 4 h
    span = chart_span(INCIDENT, (at(0), at(6 * 3600)))
    assert span is not None
    # THEN the span is minutes long, and the peak is inside it, away from both edges
    assert span.end - span.start < timedelta(minutes=3)
    assert span.start < at(4 * 3600 - 60) < at(4 * 3600) < span.end
    assert span.end - at(4 * 3600) >= timedelta(seconds=5)


def test_the_span_reaches_back_to_when_the_culprits_became_resident() -> None:
    span = chart_span(INCIDENT, (at(0), at(6 * 3600)), also=[at(4 * 3600 - 600)])
    assert span is not None
    assert span.start <= at(4 * 3600 - 600)


def test_the_span_never_reaches_outside_the_data_and_never_puts_the_peak_on_an_edge() -> None:
    # GIVEN data that starts 2 s before the peak (an engine refusing to start, say)
    incident = {**INCIDENT, "class": "transient_peak"}
    span = chart_span(incident, (at(4 * 3600 - 2), at(4 * 3600 + 1)))
    assert span is not None
    # THEN the span starts where the data does, and still ends after the peak
    assert span.start == at(4 * 3600 - 2)
    assert span.end > at(4 * 3600)


def test_without_an_incident_the_span_is_the_whole_trace() -> None:
    span = chart_span(None, (at(0), at(60)))
    assert span is not None
    assert span.start <= at(0)
    assert span.end >= at(60)


def test_a_trace_directory_is_read_only_inside_the_span(tmp_path: Path) -> None:
    # GIVEN six hours of samples written as a trace directory
    trace = day_of_samples()
    write_trace(trace, tmp_path / "trace")
    scan = open_trace(tmp_path / "trace")
    span = chart_span(INCIDENT, (at(0), at(6 * 3600)))
    assert span is not None
    # WHEN the charts' samples are read
    points, read = observed_samples(view_of(scan).samples, span, buckets=50)
    # THEN only the samples of the span were read, and every point lies inside it
    inside = trace.samples.filter(pl.col("ts").is_between(span.start, span.end)).height
    assert int(read["read"].sum()) == inside
    assert inside < trace.samples.height / 100
    assert points["ts"].is_between(span.start, span.end).all()


def test_a_scanned_directory_and_the_trace_in_memory_give_the_same_report(tmp_path: Path) -> None:
    trace = day_of_samples()
    write_trace(trace, tmp_path / "trace")
    findings = {"findings_version": 1, "incidents": [INCIDENT]}
    in_memory = build_report(ReportInputs(findings, trace))
    scanned = build_report(ReportInputs(findings, open_trace(tmp_path / "trace")))
    assert (
        in_memory.section("memory").charts[0].data.equals(scanned.section("memory").charts[0].data)
    )
    assert in_memory.subtitle == scanned.subtitle


def test_a_constant_line_above_the_series_does_not_set_the_height() -> None:
    # GIVEN 15 GiB of weights and memory series that never pass 4 GiB
    rows = [
        {"ts": at(s), "metric": "torch_allocated_bytes", "value": float(3 * GiB + s * 1000)}
        for s in range(60)
    ]
    manifest = Manifest(nodes=["n"], engine_config={"model_weights_bytes": 15 * GiB})
    report = build_report(ReportInputs({}, Trace(factories.samples(*rows), manifest=manifest)))
    chart = report.section("memory").charts[0]
    # THEN the y axis ends a little above the series, and the weights are left out, as said
    top = chart.spec["layer"][0]["encoding"]["y"]["scale"]["domain"][1]
    assert 3 < top < 4
    assert "memory_levels" not in chart.spec["datasets"]
    assert "The model weights (15.00 GiB) lie above every series drawn" in chart.caption
