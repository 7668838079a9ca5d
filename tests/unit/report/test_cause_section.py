"""The section after the verdict: for each incident class, one chart that shows the cause, drawn
from the figures the findings state (the check's figures, the OOM event, the culprits' step
estimates, the remedies) and the samples of the incident's span."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from oomtrace.report import ReportInputs, build_report
from oomtrace.report.document import Report
from oomtrace.trace import Trace
from oomtrace.units import GiB, MiB
from tests import factories
from tests.factories import at
from tests.unit.report.class_scenarios import foreign, iso, leak, misfit, transient_findings
from tests.unit.report.scenario import (
    incident_findings,
    incident_lanes,
    incident_trace,
    modelled_series,
)


def dataset(report: Report, name: str) -> list[dict[str, Any]]:
    spec = report.section("cause").charts[0].spec
    rows: list[dict[str, Any]] = spec["datasets"][f"cause_{name}"]
    return rows


def test_kv_exhaustion_draws_the_pool_capacity_and_splits_the_use_by_culprits() -> None:
    # GIVEN a KV pool of 4 GiB filling up, three culprits resident all window
    inputs = ReportInputs(
        incident_findings(), incident_trace(), modelled_series(), incident_lanes()
    )
    # WHEN the report is built
    report = build_report(inputs)
    section = report.section("cause")
    # THEN the chart has the capacity as a rule, named with its size
    (capacity,) = dataset(report, "capacity")
    assert capacity["value"] == 4 * GiB
    assert capacity["label"] == "KV pool capacity 4.00 GiB"
    # AND the use is split in two parts that add up to what was observed, the culprits' part
    # never above it
    use = section.charts[0].data
    assert set(use["part"]) == {"held by the culprits", "the rest in use"}
    total = use.group_by("ts").agg(pl.col("value").sum()).sort("ts")
    observed = (
        modelled_series()
        .filter(pl.col("series") == "KV observed")
        .join(total, on="ts")
        .select((pl.col("value") - pl.col("value_right")).abs().max())
        .item()
    )
    assert observed < 1.0
    assert use.filter(pl.col("value") < 0).is_empty()
    # AND the text reads the figures aloud
    assert section.paragraphs[0].startswith("The pool holds 4.00 GiB.")


def test_a_transient_peak_sets_the_failed_allocation_against_the_headroom() -> None:
    # GIVEN an OOM asking 4.64 GiB with 797.79 MiB free, and two requests of that step
    report = build_report(ReportInputs(transient_findings([3_900_000_000, 200_000_000]), Trace()))
    bars = report.section("cause").charts[0].data
    rows = {(r["row"], r["part"]): r["value"] for r in bars.to_dicts()}
    # THEN the failed allocation, the headroom (free, and the allocator's slack) and each
    # request's estimated step bytes are bars, the requests labelled by rank and whole id
    assert rows[("allocation that failed", "allocation that failed")] == 4_982_833_152
    assert rows[("headroom at the failure", "free on the device")] == 836_543_079
    assert rows[("headroom at the failure", "reserved but unallocated (allocator slack)")] == (
        65_011_712
    )
    first = f"#1 cmpl-{0:032x}-0"
    assert rows[(first, "estimated for this request's step")] == 3_900_000_000
    # AND the basis of each estimate is kept for its tooltip
    notes = bars.filter(pl.col("row") == first)["note"].to_list()
    assert notes == ["prompt_logprobs, 14,210 tokens in the step"]
    (headroom,) = dataset(report, "headroom")
    assert headroom["value"] == 836_543_079
    text = report.section("cause").paragraphs[0]
    assert text.startswith("An allocation of 4.64 GiB failed with 797.79 MiB free")


def test_without_step_estimates_the_transient_chart_says_so() -> None:
    report = build_report(ReportInputs(transient_findings([None]), Trace()))
    section = report.section("cause")
    assert "estimated no per-request step bytes" in section.paragraphs[0]
    assert set(section.charts[0].data["row"]) == {
        "allocation that failed",
        "headroom at the failure",
    }


def test_foreign_memory_stacks_memory_per_process_with_names() -> None:
    # GIVEN the engine (pid 100) and another process (pid 51377, a training job) that grows
    findings, trace = foreign()
    report = build_report(ReportInputs(findings, trace))
    section = report.section("cause")
    # THEN each process is a band, the engine first, the other named
    frame = section.charts[0].data
    assert list(dict.fromkeys(frame["process"])) == [
        "engine: pid 100",
        "other: pid 51377 (python train.py)",
    ]
    (total,) = dataset(report, "total")
    assert total["value"] == 40 * GiB
    assert section.paragraphs[0].startswith("Process 51377 (python train.py) held 5.00 GiB")
    # AND the table of other processes names it beside its pid
    (name, table), *_ = section.tables
    assert name == "other processes"
    assert [c.key for c in table.columns][:3] == ["pid", "name", "held_bytes"]
    assert table.rows[0][:3] == (51377, "python train.py", 5 * GiB)
    # AND the span reaches back before the analysis window, to the other process's growth
    assert frame["ts"].min() < at(60)


def test_process_names_come_from_the_traces_process_events_by_pid() -> None:
    # GIVEN an analysis that names no process, and nvidia-smi's process rows in the trace: the
    # engine's and the other's, the other's pid once reused (the later name holds)
    findings, trace = foreign()
    incident = findings["incidents"][0]
    incident["processes"][0].pop("name")
    incident["evidence"] = [
        {
            "table": "samples",
            "ts": iso(120),
            "source": "gpu.csv",
            "values": {"metric": "process_used_bytes", "pid": 51377, "value": 5 * GiB},
        }
    ]
    events = factories.events(
        {"ts": at(0), "kind": "process", "pid": 100, "device": 0, "detail": "VLLM::EngineCore"},
        {"ts": at(1), "kind": "process", "pid": 51377, "device": 0, "detail": "old job"},
        {"ts": at(5), "kind": "process", "pid": 51377, "device": 0, "detail": " /opt/bin/python "},
        {"ts": at(6), "kind": "process", "pid": 7, "device": 0, "detail": ""},
    )
    trace = Trace(trace.samples, events=events)
    # WHEN the report is built
    report = build_report(ReportInputs(findings, trace))
    section = report.section("cause")
    # THEN the chart's bands, the paragraph, the table and the evidence name each pid
    frame = section.charts[0].data
    assert list(dict.fromkeys(frame["process"])) == [
        "engine: pid 100 (VLLM::EngineCore)",
        "other: pid 51377 (/opt/bin/python)",
    ]
    assert section.paragraphs[0].startswith("Process 51377 (/opt/bin/python) held")
    assert section.tables[0][1].rows[0][:2] == (51377, "/opt/bin/python")
    (evidence,) = report.verdict.evidence
    assert "pid=51377 (/opt/bin/python)" in evidence
    assert "value=5368709120 (5.00 GiB)" in evidence


def test_processes_stated_once_are_one_stacked_bar_at_that_moment() -> None:
    # GIVEN the processes as PyTorch's OOM message states them: once each, at the OOM, by pid
    # alone (no input names them)
    findings, _ = foreign()
    findings["incidents"][0]["processes"][0].pop("name")
    trace = Trace(
        factories.samples(
            {"ts": at(120), "metric": "process_used_bytes", "pid": 100, "value": float(33 * GiB)},
            {"ts": at(120), "metric": "process_used_bytes", "pid": 51377, "value": float(7 * GiB)},
        )
    )
    # WHEN the report is built
    section = build_report(ReportInputs(findings, trace)).section("cause")
    spec = section.charts[0].spec
    # THEN the chart is one bar at that moment, the engine first, against the device's total
    (bars,) = [rows for name, rows in spec["datasets"].items() if name.endswith("bars")]
    assert [(b["bar"], b["part"], b["value"]) for b in bars] == [
        ("at 2025-03-14T09:02:00.000Z", "engine: pid 100", 33 * GiB),
        ("at 2025-03-14T09:02:00.000Z", "other: pid 51377", 7 * GiB),
    ]
    (limit,) = next(rows for name, rows in spec["datasets"].items() if name.endswith("limits"))
    assert (limit["label"], limit["value"]) == ("device total 40.00 GiB", 40 * GiB)
    assert "The bar stacks each process's device memory at that moment" in section.paragraphs[0]
    # AND the table leaves out the name column, saying which input would have named them
    table = section.tables[0][1]
    assert "name" not in [c.key for c in table.columns]
    assert "nvidia-smi" in table.note


def test_a_leak_draws_idle_levels_their_trend_and_the_device() -> None:
    # GIVEN memory that rises 100 MiB per idle period over an hour, busy in between
    findings, trace = leak()
    report = build_report(ReportInputs(findings, trace))
    section = report.section("cause")
    # THEN the idle moments (every tenth minute) are drawn with a rising trend
    idle = dataset(report, "at_idle_moments")
    assert len(idle) == 7
    trend = dataset(report, "trend_at_idle")
    assert trend[1]["value"] > trend[0]["value"]
    (limit,) = dataset(report, "limit")
    assert limit["value"] == 24 * GiB
    assert (
        "rise of 600.00 MiB per hour at idle against 5.00 GiB of headroom"
        in (section.paragraphs[0])
    )
    # AND the y axis runs from a little below the idle levels (18 GiB at the first) to the
    # device, not from zero: the rise and the headroom fill the chart
    spec = section.charts[0].spec
    domains = [
        layer["encoding"]["y"]["scale"]["domain"]
        for layer in spec["layer"]
        if "scale" in layer.get("encoding", {}).get("y", {})
    ]
    assert len(domains) >= 4
    assert all(d == domains[0] for d in domains)
    low, high = domains[0]
    assert 14.9 < low < 15.0  # half the distance from the lowest idle point (17.97) to 24 GiB
    assert high == pytest.approx(24 * 1.01)


def test_a_leaks_idle_moments_start_once_the_engine_loaded_and_end_at_the_peak() -> None:
    # GIVEN the leak scenario as the analysis measured it on device memory (first idle level
    # 18 GiB), with a loading ramp before and the engine dead after the peak, both idle
    findings, trace = leak()
    check = findings["incidents"][0]["checks"][0]
    check["figures"].update(metric="device_used_bytes", first_level_bytes=18 * GiB)
    extra = [
        {"ts": at(-120), "metric": "device_used_bytes", "value": float(2 * GiB)},
        {"ts": at(-120), "metric": "requests_running", "value": 0.0},
        {"ts": at(3660), "metric": "device_used_bytes", "value": 0.0},
        {"ts": at(3660), "metric": "requests_running", "value": 0.0},
    ]
    trace = Trace(pl.concat([trace.samples, factories.samples(*extra)]).sort("ts"))
    # WHEN the report is built
    report = build_report(ReportInputs(findings, trace))
    # THEN neither the ramp nor the dead engine counts as an idle moment
    idle = dataset(report, "at_idle_moments")
    assert len(idle) == 7
    assert min(p["value"] for p in idle) >= 18 * GiB


def test_a_startup_misfit_sets_weights_reserve_and_kv_against_the_device() -> None:
    # GIVEN vLLM's refusal: max_model_len 131,072 needs 16 GiB of KV, 3.42 GiB were available
    findings, trace = misfit()
    report = build_report(ReportInputs(findings, trace))
    bars = report.section("cause").charts[0].data
    # THEN the configured bar needs the whole 16 GiB of KV; the fitted one what the setting
    # that fits needs; both carry the weights and the reserve the engine's share leaves
    configured = bars.filter(pl.col("bar") == "as configured (max_model_len 131,072)")
    fitted = bars.filter(pl.col("bar") == "with --max-model-len 28,016")
    parts = dict(zip(configured["part"], configured["value"], strict=True))
    assert parts["KV cache"] == 16 * GiB
    assert parts["model weights"] == 16_093_886_703
    budget = int(23_034 * MiB * 0.9)
    assert parts["runtime reserve"] == budget - 16_093_886_703 - 3_672_197_038
    kv = dict(zip(fitted["part"], fitted["value"], strict=True))["KV cache"]
    assert kv == 16 * GiB * 28_016 // 131_072
    # AND the device and the engine's share are the limits
    limits = {r["label"]: r["value"] for r in dataset(report, "limits")}
    assert limits == {"device 22.49 GiB": 23_034 * MiB, "engine's share (90%) 20.24 GiB": budget}
    # AND the verdict's fix is the remedy
    assert report.verdict.lines[2] == "Fix (budget): set --max-model-len 28016"


def test_an_undetermined_cause_says_so_instead_of_drawing() -> None:
    incident = {"id": "I1", "class": "unknown", "peak_ts": iso(10)}
    report = build_report(ReportInputs({"incidents": [incident]}, Trace()))
    section = report.section("cause")
    assert section.charts == ()
    assert section.empty.startswith("The analysis did not decide the cause")


def test_without_model_widths_the_step_is_estimated_from_the_checks_bytes_per_token() -> None:
    # GIVEN the analysis' account of a prefill OOM without --config: the request whose
    # prompt_logprobs made the step large, its 8,192 tokens in the step, and the bytes per token
    # the transient check measured (no step_bytes of its own)
    findings = transient_findings([None, None])
    incident = findings["incidents"][0]
    incident["culprits"][0].update(step_parameter="prompt_logprobs", step_tokens=8192)
    incident["culprits"][1].update(step_parameter=None, step_tokens=5547)
    incident["checks"][0]["figures"] = {"step_bytes_per_token": 608_256, "room_bytes": 836_543_079}
    # WHEN the report is built
    section = build_report(ReportInputs(findings, Trace())).section("cause")
    steps = section.charts[0].data.filter(pl.col("part") == "estimated for this request's step")
    # THEN only the request with the parameter gets a bar, of its tokens times that figure
    assert steps["row"].to_list() == [f"#1 cmpl-{0:032x}-0"]
    assert steps["value"].to_list() == [8192 * 608_256]
    # AND the text names the parameter that caused it
    assert (
        "prompt_logprobs: 8,192 tokens in the step x 594.00 KiB per token"
        in (section.paragraphs[0])
    )


def test_a_reading_nanoseconds_after_an_intervals_stated_end_is_inside_it() -> None:
    # GIVEN a culprit resident until the fill, stated to the microsecond as findings are, and
    # the pool's reading at the fill, sampled to the nanosecond (133 ns later)
    from oomtrace.report.cause_data import culprits_kv

    end = at(60)
    lanes = pl.DataFrame(
        {
            "start": [at(0)],
            "end": [end],
            "start_tokens": [100],
            "stored_tokens": [1000],
            "kv_bytes": [1000 * 131072],
            "culprit_rank": [1],
        },
        schema_overrides={"start": pl.Datetime("ns", "UTC"), "end": pl.Datetime("ns", "UTC")},
    )
    reading = pl.Series([end], dtype=pl.Datetime("ns", "UTC")).dt.offset_by("133ns")
    # WHEN the culprits' KV is taken at that reading
    held = culprits_kv(lanes, reading)
    # THEN they hold all they stored, not nothing
    assert held["value"].to_list() == [pytest.approx(1000 * 131072)]
