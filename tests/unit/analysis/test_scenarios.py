"""Ground truth: traces whose culprits and class are known by construction."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Findings
from tests import scenarios
from tests.factories import at
from tests.scenarios import Req, Scenario, ScenarioBuilder

FINDINGS: dict[str, tuple[Scenario, Findings]] = {}


def analysed(name: str) -> tuple[Scenario, Findings]:
    if name not in FINDINGS:
        scenario = scenarios.SHAPES[name]()
        FINDINGS[name] = (scenario, analyze(scenario.trace))
    return FINDINGS[name]


@pytest.mark.parametrize("name", sorted(scenarios.SHAPES))
def test_every_shape_is_classified_as_built(name: str) -> None:
    scenario, findings = analysed(name)
    assert findings.primary is not None
    assert findings.primary.cls == scenario.cls, findings.primary.reason


@pytest.mark.parametrize("name", sorted(scenarios.SHAPES))
def test_every_shape_names_its_culprits_first(name: str) -> None:
    scenario, findings = analysed(name)
    assert findings.primary is not None
    named = [c.request_id for c in findings.primary.culprits]
    if name == "admission_burst":
        # thirty equal requests: any ten of the burst, and nothing else
        assert set(named) <= set(scenario.culprits)
        assert len(named) == 10
    else:
        assert named[: len(scenario.culprits)] == list(scenario.culprits)
    if not scenario.culprits:
        assert named == []


EVENT_ANCHORED = ("prefill_peak", "foreign_process", "slow_leak", "fragmentation", "startup_misfit")


@pytest.mark.parametrize("name", EVENT_ANCHORED)
def test_every_event_anchored_shape_peaks_at_its_event(name: str) -> None:
    scenario, findings = analysed(name)
    assert scenario.peak_ts is not None
    assert findings.primary is not None
    assert findings.primary.peak_ts == at(scenario.peak_ts)


def test_long_requests_peak_when_the_pool_fills_and_hold_almost_all_of_it() -> None:
    scenario, findings = analysed("long_requests_growing")
    incident = findings.primary
    assert incident is not None
    assert scenario.peak_ts is not None
    # the moment the pool filled and ran dry: it entered the full level (95 %) at that sample,
    # the last entry before the first preemption (the scenario's full second), not a later maximum
    ratio = scenario.trace.samples.filter(pl.col("metric") == "kv_usage_ratio").sort("ts")
    entered = ratio.filter((pl.col("value") >= 0.95) & (pl.col("value").shift(1) < 0.95))
    assert incident.peak_ts == at(scenario.peak_ts)
    assert incident.peak_ts in entered["ts"].to_list()
    assert incident.coverage_basis == "observed KV in use"
    assert sum(c.share for c in incident.culprits[:3]) > 0.9
    # the storm that followed the fill is part of the incident
    assert "preemption storm" in incident.reason
    assert "a window after it filled" in incident.reason


def test_the_prefill_culprit_is_shown_with_its_prompt() -> None:
    _, findings = analysed("prefill_peak")
    top = findings.primary.culprits[0] if findings.primary else None
    assert top is not None
    assert (top.prompt_tokens, top.in_prefill) == (24000, True)
    assert "in prefill at the peak with a 24,000-token prompt" in top.reason


def test_the_foreign_process_is_named_with_what_it_took() -> None:
    scenario, findings = analysed("foreign_process")
    incident = findings.primary
    assert incident is not None
    assert [p.pid for p in incident.processes] == [scenario.foreign_pid]
    assert incident.processes[0].growth_bytes is not None
    assert incident.processes[0].growth_bytes > 5 * 2**30
    assert any(e.table == "samples" for e in incident.evidence)


@pytest.mark.parametrize("name", sorted(scenarios.SHAPES))
def test_every_class_cites_evidence_rows(name: str) -> None:
    _, findings = analysed(name)
    incident = findings.primary
    assert incident is not None
    assert incident.evidence
    for row in incident.evidence:
        assert row.table in ("samples", "events", "requests", "manifest")
        assert row.values


def test_the_burst_shows_in_the_ledger_as_admissions_inside_the_window() -> None:
    _, findings = analysed("admission_burst")
    incident = findings.primary
    assert incident is not None
    assert all(c.admitted_in_window for c in incident.culprits)
    assert incident.ledger.resident_requests >= 30


@st.composite
def random_scenarios(draw: st.DrawFn) -> Scenario:
    builder = ScenarioBuilder(duration=90.0, pool_blocks=draw(st.integers(200, 3000)))
    for i in range(draw(st.integers(1, 25))):
        arrive = draw(st.floats(0, 80))
        builder.add(
            Req(
                f"r{i}",
                arrive,
                arrive + draw(st.floats(0, 2)),
                draw(st.integers(1, 4000)),
                draw(st.integers(1, 1500)),
                2000,
                finishes=draw(st.booleans()),
            )
        )
    if draw(st.booleans()):
        builder.oom(draw(st.floats(10, 90)), 2**30)
    return Scenario("random", builder.build(), "any", ())


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=random_scenarios())
def test_attribution_shares_sum_to_what_the_model_explains(scenario: Scenario) -> None:
    findings = analyze(scenario.trace)
    for incident in findings.incidents:
        shares = [row.share for row in incident.ledger.rows]
        assert all(0.0 <= s <= 1.0 for s in shares)
        if incident.coverage is None:
            continue
        # the ledger's shares sum to the coverage: what named requests explain of the peak
        assert sum(shares) == pytest.approx(incident.coverage, abs=1e-9)
        assert 0.0 <= incident.coverage <= 1.0
        explained = incident.explained_bytes or 0
        assert incident.unexplained_bytes == max((incident.observed_bytes or 0) - explained, 0)
        assert sum(c.share for c in incident.culprits) <= incident.coverage + 1e-9
