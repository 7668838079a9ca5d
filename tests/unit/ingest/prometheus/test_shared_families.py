"""One table of Prometheus families for the collector and for ingest: what ingest maps, a live
capture keeps (or the table says why not), and a scrape filtered by the collector still holds
every mapped family."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from collectors.prometheus import filter_exposition
from collectors.prometheus_families import FAMILIES, INFO, KEEP, PrometheusFamily
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.prometheus.dialects import CACHE_CONFIG_INFO, SERIES, WANTED_NAMES
from oomtrace.ingest.prometheus.text_parser import parse_scrapes
from oomtrace.schema import METRICS

T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)
BY_NAME = {f.name: f for f in FAMILIES}


def test_every_family_ingest_maps_is_kept_by_the_collector_or_dropped_with_a_reason() -> None:
    for name in sorted(WANTED_NAMES):
        family = BY_NAME[name]
        if name in KEEP | INFO:
            continue
        assert family.use == "dropped", f"{name}: ingest reads it, the collector drops it"
        assert family.why, f"{name}: dropped without saying why"


def test_the_llama_cpp_throughput_gauges_are_kept_by_a_live_capture() -> None:
    assert {"llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds"} <= KEEP


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f"{f.name}{f.reason or ''}")
def test_each_row_says_what_becomes_of_its_family(family: PrometheusFamily) -> None:
    if family.use == "mapped":
        assert family.metric in METRICS
        assert family.sample.startswith(family.name)
    else:
        assert family.metric is None
        assert family.why, f"{family.name}: {family.use} without saying why"
    assert (family.name in KEEP) == (family.use in {"mapped", "event", "known", "raw"})


def test_one_row_per_family_and_label_filter() -> None:
    rows = Counter((f.name, f.reason) for f in FAMILIES)
    assert [key for key, count in rows.items() if count > 1] == []


def test_ingest_reads_exactly_the_mapped_event_and_known_rows_and_the_config_family() -> None:
    assert {s.name for s in SERIES} == {
        f.name for f in FAMILIES if f.use in {"mapped", "event", "known"}
    }
    assert {CACHE_CONFIG_INFO} == INFO
    assert {s.name for s in SERIES} | INFO == WANTED_NAMES


def test_a_scrape_filtered_by_the_collector_still_gives_every_mapped_metric() -> None:
    # GIVEN one exposition holding every mapped family, as its engine would type it
    blocks = [
        f"# TYPE {f.name} gauge\n{f.sample}\n" for f in FAMILIES if f.use == "mapped" and f.sample
    ]
    # WHEN the live collector filters it and ingest reads what the collector kept
    kept = filter_exposition("".join(blocks))
    diag = SourceDiagnostics("live", "prometheus", "n")
    result = parse_scrapes([(T0, kept.text)], diag)
    # THEN every mapped family's sample survived the filter and became its metric
    assert kept.kept == len(blocks)
    assert result.samples is not None
    assert set(result.samples["metric"]) == {f.metric for f in FAMILIES if f.use == "mapped"}
