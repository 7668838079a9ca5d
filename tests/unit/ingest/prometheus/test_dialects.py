"""Every row of the dialect table, through the parser, with the sample that exercises it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.prometheus.dialects import (
    BY_NAME,
    CACHE_CONFIG_SAMPLE,
    FAMILIES,
    SERIES,
    WANTED_NAMES,
    Series,
)
from oomtrace.ingest.prometheus.text_parser import parse_scrapes
from oomtrace.schema import METRICS

T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)


def _parse(text: str) -> tuple[object, SourceDiagnostics]:
    diag = SourceDiagnostics("sample", "prometheus", "n")
    return parse_scrapes([(T0, text + "\n")], diag), diag


@pytest.mark.parametrize("series", SERIES, ids=lambda s: f"{s.name}{s.reason or ''}")
def test_every_sample_maps_as_its_row_says(series: Series) -> None:
    # GIVEN the exposition line the table gives for this name
    assert series.sample.startswith(series.name)
    result, diag = _parse(series.sample)
    samples = result.samples  # type: ignore[attr-defined]
    exposed = float(series.sample.rsplit(" ", 1)[1])
    if series.metric is None:
        # THEN a deliberately unmapped family gives no sample and says why
        assert samples is None or samples.height == 0
        assert series.why
        if series.name != "DCGM_FI_DEV_XID_ERRORS":
            assert f"{series.name}: {series.why}; not mapped" in diag.notes
        return
    # THEN it gives one sample of its metric, in the canonical unit, at the scrape time
    assert series.metric in METRICS
    assert samples is not None
    assert samples.select("ts", "metric", "value").rows() == [
        (T0, series.metric, exposed * series.scale)
    ]
    assert diag.lines_recognised == 1


def test_the_cache_config_sample_fills_engine_config() -> None:
    result, _ = _parse(CACHE_CONFIG_SAMPLE)
    assert result.engine_config == {  # type: ignore[attr-defined]
        "block_size": 16,
        "cache_dtype": "auto",
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.9,
        "kv_cache_tokens": 432000,
        "max_concurrency": 7.81,
        "num_gpu_blocks": 27000,
    }


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f"{f.engine}: {f.label}")
def test_each_version_family_is_recognised_from_its_names(family: object) -> None:
    names = family.present  # type: ignore[attr-defined]
    text = "\n".join(BY_NAME[n][0].sample for n in names)
    result, _ = _parse(text)
    assert result.engine == {  # type: ignore[attr-defined]
        "name": family.engine,  # type: ignore[attr-defined]
        "metrics_family": family.label,  # type: ignore[attr-defined]
    }


def test_wanted_names_cover_the_table_for_collectors() -> None:
    assert {s.name for s in SERIES} | {"vllm:cache_config_info"} == WANTED_NAMES


def test_an_infinite_block_count_in_the_cache_config_labels_is_left_out_with_a_note() -> None:
    # found by tests/integration/test_fuzz.py (a number damaged to "inf"): int(float("inf"))
    # raised OverflowError instead of the note a label no integer holds gets
    from oomtrace.ingest.prometheus.canonical_map import _convert

    diag = SourceDiagnostics("sample", "prometheus", "n")
    assert _convert({"num_gpu_blocks": "inf", "block_size": "16"}, diag) == {"block_size": 16}
    assert any("num_gpu_blocks='inf'" in note for note in diag.notes)
