"""Every chart of every kind of report is valid Vega-Lite: the report builds its specs without
Altair's validation (a third of its run time), so this test validates them against the schema
Altair ships, for the KV scenario and one incident of each class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from altair.utils.schemapi import validate_jsonschema
from altair.vegalite.v6.schema import core

from oomtrace.report import ReportInputs, build_report, static_spec
from oomtrace.report.document import Report
from oomtrace.trace import Trace
from tests.unit.report.class_scenarios import foreign, leak, misfit, transient_findings
from tests.unit.report.scenario import (
    incident_findings,
    incident_lanes,
    incident_trace,
    modelled_series,
)

SCHEMA = core.load_schema()


def kv() -> Report:
    return build_report(
        ReportInputs(incident_findings(), incident_trace(), modelled_series(), incident_lanes())
    )


def transient() -> Report:
    return build_report(ReportInputs(transient_findings([3_900_000_000, None]), Trace()))


def of(make: Callable[[], tuple[dict[str, Any], Trace]]) -> Callable[[], Report]:
    def build() -> Report:
        findings, trace = make()
        return build_report(ReportInputs(findings, trace))

    return build


REPORTS = {
    "kv_exhaustion": kv,
    "transient_peak": transient,
    "foreign_memory": of(foreign),
    "leak": of(leak),
    "startup_misfit": of(misfit),
}


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_every_chart_is_valid_vega_lite_on_the_page_and_in_a_file(name: str) -> None:
    report = REPORTS[name]()
    assert report.section("cause").charts, f"{name}: no cause chart"
    for chart in report.charts:
        for spec in (chart.spec, static_spec(chart.spec)):
            errors = validate_jsonschema(spec, SCHEMA, raise_error=False)
            assert errors is None, f"{name}/{chart.key}: {errors}"
        # on the page a chart fits its container; in a file it has a width of its own
        assert chart.spec["width"] == "container"
        assert isinstance(static_spec(chart.spec)["width"], int)
