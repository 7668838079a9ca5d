"""The report document: built once, from whatever the inputs hold, with every gap said."""

from __future__ import annotations

import json
from datetime import datetime

import polars as pl
from polars.testing import assert_frame_equal

from oomtrace.report import ReportInputs, ReportOptions, build_report
from oomtrace.terminal import render_report
from oomtrace.trace import Trace
from oomtrace.units import GiB
from tests import factories
from tests.factories import at
from tests.unit.report.scenario import (
    incident_findings,
    incident_lanes,
    incident_trace,
    modelled_series,
)


def test_an_empty_trace_without_incidents_still_reports_what_is_missing() -> None:
    # GIVEN nothing but an empty trace and findings with no incident
    report = build_report(ReportInputs({"incidents": []}, Trace()))
    # WHEN it is rendered
    text = render_report(report)
    # THEN the verdict says so and every section says why it is empty
    assert report.verdict.incident_class == "none"
    assert report.verdict.lines == (
        "No incident found: no out-of-memory event and no memory spike.",
    )
    assert "No incident found" in text
    assert "The trace has no memory samples: memory cannot be charted." in text
    assert "No per-request resident intervals are known for the incident window" in text
    assert report.charts == ()


def test_a_spike_between_flat_samples_reaches_the_chart_and_its_summary() -> None:
    # GIVEN a day-like series of 20,000 samples with one sample 10 GiB above the rest
    rows = [
        {"ts": at(i * 0.01), "metric": "device_used_bytes", "value": float(10 * GiB)}
        for i in range(20_000)
    ]
    rows[12_345]["value"] = float(20 * GiB)
    trace = Trace(samples=factories.samples(*rows))
    # WHEN the report draws it with 100 slices
    report = build_report(ReportInputs({}, trace), ReportOptions(buckets=100))
    chart = report.section("memory").charts[0]
    # THEN the chart holds the spike at its own time, and far fewer points than samples
    spike = chart.data.filter(pl.col("value") == 20 * GiB)
    assert spike["ts"].to_list() == [at(12_345 * 0.01)]
    assert chart.data.height <= 200
    assert "drawn from 20,000 samples" in chart.caption
    summary = dict(report.section("memory").tables)["series"]
    assert summary.records()[0]["highest_bytes"] == 20 * GiB


def test_swimlanes_keep_culprits_first_and_say_how_many_are_left_out() -> None:
    # GIVEN 13 requests in the window, three of them culprits
    inputs = ReportInputs(incident_findings(), incident_trace(), lanes=incident_lanes())
    # WHEN at most two other requests may be drawn beside the culprits
    report = build_report(inputs, ReportOptions(context_lanes=2))
    section = report.section("lanes")
    shown = section.charts[0].data
    # THEN the three culprits are among them, with their ranks
    ranks = dict(zip(shown["request_id"], shown["culprit_rank"], strict=True))
    assert {k: v for k, v in ranks.items() if v is not None} == {
        "req-long-1": 1,
        "req-long-2": 2,
        "req-long-3": 3,
    }
    assert shown["request_id"].n_unique() == 5
    assert "then 2 of the other 10 requests" in section.paragraphs[0]
    # AND the lanes are labelled with the rank and the whole id, culprits first in rank order
    spec = section.charts[0].spec
    order = spec["layer"][0]["encoding"]["y"]["sort"]
    assert order[:3] == ["#1 req-long-1", "#2 req-long-2", "#3 req-long-3"]
    assert len(order) == 5


def test_swimlanes_are_clipped_to_the_incident_window() -> None:
    inputs = ReportInputs(incident_findings(), incident_trace(), lanes=incident_lanes())
    lanes = build_report(inputs).section("lanes").charts[0].data
    # the window runs from 60 s before the OOM to a tenth of it after
    assert lanes["start"].min() == at(60)
    assert lanes["end"].max() <= at(126)
    assert lanes.filter(pl.col("end") < at(60)).is_empty()


def test_a_request_resident_only_at_an_instant_is_drawn_as_a_tick() -> None:
    # GIVEN a culprit whose resident interval starts and ends at the OOM
    lanes = incident_lanes().with_columns(
        pl.when(pl.col("request_id") == pl.col("request_id").first())
        .then(pl.lit(at(120)))
        .otherwise(pl.col("start"))
        .alias("start")
    )
    inputs = ReportInputs(incident_findings(), incident_trace(), lanes=lanes)
    # WHEN the report is built
    spec = build_report(inputs).section("lanes").charts[0].spec
    # THEN that interval, and only that one, is also drawn as a tick, so its lane is not empty
    (instants,) = [rows for name, rows in spec["datasets"].items() if name.endswith("instants")]
    assert [row["request_id"] for row in instants] == [lanes["request_id"][0]]
    assert any(layer.get("mark", {}).get("type") == "tick" for layer in spec["layer"])


def test_swimlanes_are_drawn_over_the_part_of_the_window_their_requests_cover() -> None:
    # GIVEN a minute-long window (60 s to the OOM at 120 s) in which the drawn requests were
    # resident only for its last two seconds
    lanes = incident_lanes().with_columns(
        pl.col("start").clip(lower_bound=at(118)), pl.col("end").clip(upper_bound=at(120))
    )
    inputs = ReportInputs(incident_findings(), incident_trace(), lanes=lanes)
    # WHEN the report is built
    section = build_report(inputs).section("lanes")
    # THEN the chart's time axis covers those seconds with a tenth on either side, not the minute
    spec = section.charts[0].spec
    (span,) = [rows for name, rows in spec["datasets"].items() if name.endswith("span")]
    assert [row["t"] for row in span] == [
        int(at(117.8).timestamp() * 1000),
        int(at(120.2).timestamp() * 1000),
    ]
    # AND the text says where it is drawn, beside the whole window
    assert "from 2025-03-14T09:01:00.000Z to 2025-03-14T09:02:06.000Z" in section.paragraphs[0]
    assert section.paragraphs[0].endswith(
        "The chart is drawn from 2025-03-14T09:01:57.800Z to 2025-03-14T09:02:00.200Z, where "
        "these requests were resident."
    )


def test_modelled_series_are_drawn_beside_the_observed_ones() -> None:
    # GIVEN the analysis' modelled KV series beside the trace
    inputs = ReportInputs(incident_findings(), incident_trace(), series=modelled_series())
    report = build_report(inputs)
    data = report.section("memory").charts[0].data
    # THEN every modelled point inside the charts' span is drawn as the analysis gave it
    start, end = (datetime.fromisoformat(t) for t in report.meta["span"])
    modelled = data.filter(pl.col("series") == "KV modelled").sort("ts")
    expected = (
        modelled_series()
        .filter((pl.col("series") == "KV modelled") & pl.col("ts").is_between(start, end))
        .select("ts", "series", "value")
        .sort("ts")
    )
    assert modelled.height > 10
    assert_frame_equal(modelled, expected)


def test_the_budget_section_sets_the_measured_peak_against_the_plan() -> None:
    # GIVEN the engine's plan (weights 15 GiB, KV 4 GiB, 90% of 24 GiB) and a 23.88 GiB peak
    report = build_report(ReportInputs(incident_findings(), incident_trace()))
    section = report.section("budget")
    table = dict(section.tables)["planned_vs_observed"]
    rows = {r["item"]: r for r in table.records()}
    # THEN the reserve planned is the budget less weights and cache, and the observed one is the
    # peak less weights and cache
    planned_reserve = int(24 * GiB * 0.9) - 19 * GiB
    assert rows["runtime reserve (activations, graphs, workspace)"]["planned_bytes"] == (
        planned_reserve
    )
    peak = rows["total at peak"]["observed_bytes"]
    assert rows["runtime reserve (activations, graphs, workspace)"]["observed_bytes"] == (
        peak - 19 * GiB  # type: ignore[operator]
    )
    assert "more than the" in section.paragraphs[0]


def test_a_peak_below_weights_and_pool_leaves_the_reserve_unmeasured() -> None:
    # GIVEN an engine that stated 15 GiB of weights and a 4 GiB pool but died during start-up:
    # the highest device memory sampled is 16 GiB
    trace = Trace(
        factories.samples(
            {"ts": at(0), "metric": "device_total_bytes", "value": float(24 * GiB)},
            {"ts": at(1), "metric": "device_used_bytes", "value": float(16 * GiB)},
        ),
        manifest=incident_trace().manifest,
    )
    # WHEN the report is built
    section = build_report(ReportInputs({"incidents": []}, trace)).section("budget")
    # THEN no negative reserve is shown: the reserve could not be measured, and the text says why
    rows = {r["item"]: r for r in dict(section.tables)["planned_vs_observed"].records()}
    assert rows["runtime reserve (activations, graphs, workspace)"]["observed_bytes"] is None
    assert "the pool was never allocated in full" in section.paragraphs[0]
    assert section.charts == ()


def test_a_worksheet_document_is_the_plan_when_given() -> None:
    worksheet = {
        "device_bytes": 24 * GiB,
        "weights_bytes": 15 * GiB,
        "reserve_bytes": 3 * GiB,
        "available_cache_bytes": 6 * GiB,
        "kv_bytes_per_token": 131072,
        "assumptions": ["reserve is your estimate"],
    }
    report = build_report(ReportInputs(incident_findings(), incident_trace(), worksheet=worksheet))
    section = report.section("budget")
    tables = dict(section.tables)
    rows = {r["item"]: r for r in tables["planned_vs_observed"].records()}
    assert rows["runtime reserve (activations, graphs, workspace)"]["planned_bytes"] == 3 * GiB
    assert rows["KV cache pool"]["planned_bytes"] == 6 * GiB
    assert tables["assumptions"].records() == [{"assumption": "reserve is your estimate"}]
    values = {r["item"]: r["value"] for r in tables["worksheet"].records()}
    assert values["kv bytes per token"] == "128.00 KiB"
    assert section.paragraphs[0].startswith("The plan (worksheet)")


def test_admissions_are_counted_per_slice_from_the_request_log() -> None:
    trace = Trace(
        requests=factories.requests(
            *({"ts": at(float(i)), "request_id": f"r{i}", "event": "admitted"} for i in range(10))
        )
    )
    chart = build_report(ReportInputs({}, trace), ReportOptions(buckets=5)).section("activity")
    spec = chart.charts[0].spec
    counts = [row["admissions"] for row in spec["datasets"]["activity_admissions"]]
    assert sum(counts) == 10
    assert len(counts) <= 5


def test_without_stated_admissions_the_bars_count_each_request_arriving_once() -> None:
    # GIVEN a vLLM-like request log: each request arrives (told twice, API server and engine)
    # and finishes; no admission is stated
    rows = [
        {"ts": at(float(i) + dt), "request_id": f"r{i}", "event": event}
        for i in range(6)
        for dt, event in ((0.0, "arrived"), (0.001, "arrived"), (3.0, "finished"))
    ]
    trace = Trace(requests=factories.requests(*rows))
    # WHEN the activity section is built
    section = build_report(ReportInputs({}, trace), ReportOptions(buckets=4)).section("activity")
    spec = section.charts[0].spec
    # THEN the bars count arrivals, one per request, and say so
    counts = [row["admissions"] for row in spec["datasets"]["activity_admissions"]]
    assert sum(counts) == 6
    assert "requests arriving" in section.paragraphs[0]
    assert "arrived per slice" in json.dumps(spec)


def _ledger_findings(stored: int, pool: int) -> dict[str, object]:
    row = {"request_id": "r1", "stored_tokens": 9_406, "stored_low": 2_388, "stored_high": 11_262}
    ledger = {"rows": [row], "stored_bytes": stored, "pool_bytes": pool, "waiting_requests": 49}
    return {"incidents": [{"class": "kv_exhaustion", "ledger": ledger}]}


def test_a_ledger_above_the_pool_says_its_residency_is_an_upper_bound() -> None:
    # GIVEN a ledger whose requests add up to more than the pool (queued requests counted)
    report = build_report(ReportInputs(_ledger_findings(7 * GiB, 4 * GiB), Trace()))
    # WHEN its section is read, THEN it says why, with the engine's own waiting count
    section = report.section("ledger")
    assert "more than the 4.00 GiB pool, so some of them were not resident" in section.paragraphs[1]
    assert "reported 49 request(s) waiting" in section.paragraphs[1]
    # AND a ledger within the pool says nothing more
    within = build_report(ReportInputs(_ledger_findings(3 * GiB, 4 * GiB), Trace()))
    assert len(within.section("ledger").paragraphs) == 1


def test_the_bounds_of_a_stored_figure_read_as_tokens_low_then_high() -> None:
    # GIVEN a ledger row with the bounds of its stored tokens
    report = build_report(ReportInputs(_ledger_findings(GiB, 4 * GiB), Trace()))
    # WHEN the requests table is rendered as text
    text = render_report(report)
    # THEN the bounds come low then high, with thousands separators
    header = next(line for line in text.splitlines() if "stored low" in line)
    assert header.index("stored low") < header.index("stored high")
    assert "2,388" in text
    assert "11,262" in text


def test_the_verdict_says_when_requests_counted_resident_exceed_what_was_observed() -> None:
    # GIVEN an incident whose resident requests model more KV than was observed
    incident = {"class": "kv_exhaustion", "explained_bytes": 7 * GiB, "observed_bytes": 4 * GiB}
    report = build_report(ReportInputs({"incidents": [incident]}, Trace()))
    # THEN the verdict paragraph says the residency is an upper bound
    assert "add up to 7.00 GiB, more than the 4.00 GiB observed" in report.verdict.paragraph


def test_memory_another_process_held_is_not_counted_as_the_engines_runtime_reserve() -> None:
    # GIVEN the engine's plan (weights 15 GiB, KV 4 GiB, 90% of 24 GiB) and a 23.88 GiB device peak
    # of which another process held 3 GiB at the incident's peak
    findings = incident_findings()
    findings["incidents"][0]["processes"] = [{"pid": 4242, "bytes": 3 * GiB, "basis": "samples"}]
    section = build_report(ReportInputs(findings, incident_trace())).section("budget")
    rows = {r["item"]: r for r in dict(section.tables)["planned_vs_observed"].records()}
    # THEN the engine's observed total and reserve leave the other process out, and say so
    total = rows["total at peak"]
    assert "less 3.00 GiB other processes held" in str(total["basis"])
    reserve = rows["runtime reserve (activations, graphs, workspace)"]["observed_bytes"]
    assert reserve == total["observed_bytes"] - 19 * GiB  # type: ignore[operator]


def test_the_ledger_says_where_its_bytes_per_token_came_from() -> None:
    # GIVEN findings whose KV model came from the engine's start-up statements
    findings = _ledger_findings(GiB, 4 * GiB)
    findings["kv_model"] = {
        "statement": "engine statements: available KV cache 3.85 GiB ÷ 1,971 blocks",
        "bytes_per_token": 131_085,
    }
    # WHEN the report is built
    section = build_report(ReportInputs(findings, Trace())).section("ledger")
    # THEN the ledger states the basis and the per-token figure, so a row can be checked by hand
    assert section.paragraphs[1] == (
        "Bytes are whole blocks of stored tokens. KV model: engine statements: available KV cache "
        "3.85 GiB ÷ 1,971 blocks (128.01 KiB per token)."
    )


def test_terminal_text_never_wraps_between_a_figure_and_its_unit() -> None:
    # GIVEN a ledger paragraph long enough to wrap, with figures and units throughout
    findings = _ledger_findings(GiB, 4 * GiB)
    statement = "engine statements: " + ", ".join(f"{i}.85 GiB of {i} blocks" for i in range(12))
    findings["kv_model"] = {"statement": statement, "bytes_per_token": 131_085}
    # WHEN it is rendered for the terminal
    lines = render_report(build_report(ReportInputs(findings, Trace()))).splitlines()
    # THEN no line ends on a bare figure whose unit went to the next line
    wrapped = [ln for ln in lines if "KV model" in ln or "GiB of" in ln]
    assert len(wrapped) > 1
    assert not any(
        ln.rstrip()[-1:].isdigit() and ln.rstrip()[-2:-1] in ".0123456789" for ln in wrapped
    )
    assert "\x00" not in "".join(lines)


def test_evidence_rows_show_byte_counts_with_their_unit_beside_the_raw_value() -> None:
    # GIVEN an incident whose evidence is an OOM event row with byte counts
    row = {
        "table": "events",
        "ts": "2025-03-21T16:43:27.142000Z",
        "source": "capture#collector.torch",
        "values": {"kind": "oom", "requested_bytes": 4_982_833_152, "device": 0, "free_bytes": 0},
    }
    report = build_report(
        ReportInputs({"incidents": [{"class": "transient_peak", "evidence": [row]}]}, Trace())
    )
    # THEN the row reads as stored, each byte count also in binary units; small values stay bare
    line = (
        "2025-03-21T16:43:27.142Z events from capture#collector.torch: device=0, free_bytes=0, "
        "kind=oom, requested_bytes=4982833152 (4.64 GiB)"
    )
    assert report.verdict.evidence == (line,)


def test_the_verdict_shows_the_first_evidence_rows_and_counts_the_rest() -> None:
    # GIVEN an incident with twenty evidence rows (a leak's idle levels)
    findings = incident_findings()
    findings["incidents"][0]["evidence"] = [
        {
            "table": "samples",
            "ts": f"2025-03-14T09:{m:02d}:00Z",
            "source": "gpu.csv",
            "values": {"metric": "device_used_bytes", "value": 70 * GiB + m * (1 << 20)},
        }
        for m in range(20)
    ]
    # WHEN the report is built
    evidence = build_report(ReportInputs(findings, incident_trace())).verdict.evidence
    # THEN eight rows are shown, each with its value in bytes and its unit, and the rest counted
    assert len(evidence) == 9
    assert evidence[0] == (
        "2025-03-14T09:00:00.000Z samples from gpu.csv: metric=device_used_bytes, "
        "value=75161927680 (70.00 GiB)"
    )
    assert evidence[-1].startswith("and 12 more rows of the same evidence")
