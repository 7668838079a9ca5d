"""Every entry of the vLLM pattern table yields what its sample line promises, through the
parser (header, prefixes and all)."""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import pytest

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ClockOptions, ParseContext, ParseResult
from oomtrace.ingest.vllm.line_patterns import (
    EVENT_LINES,
    FAMILY_ORDER,
    STATS_FORMS,
    EventLine,
    StatsForm,
)
from oomtrace.ingest.vllm.log_parser import PARSER
from oomtrace.ingest.vllm.request_patterns import REQUEST_LINES, RequestLine
from oomtrace.ingest.vllm.startup_patterns import CONFIG_LINES, ConfigLine

HEADER = "INFO 03-04 05:06:07 [x.py:1] "


def _parse(body: str, header: str = HEADER) -> tuple[ParseResult, SourceDiagnostics]:
    diag = SourceDiagnostics("t", "vllm-log", "n")
    lines = pl.DataFrame({"line": [header + body]})
    ctx = ParseContext(clock=ClockOptions(year=2025))
    return PARSER.parse_lines(lines, ctx, diag), diag


@pytest.mark.parametrize("form", STATS_FORMS, ids=lambda f: f.name)
def test_every_stats_form_gives_its_samples(form: StatsForm) -> None:
    result, diag = _parse(form.sample)
    assert result.samples is not None
    got = dict(result.samples.select("metric", "value").iter_rows())
    for metric, value in form.expect.items():
        assert got[metric] == pytest.approx(value), metric
    assert diag.lines_recognised == 1
    if form.family is not None:
        assert result.engine["version_family"] == form.family


@pytest.mark.parametrize("entry", CONFIG_LINES, ids=lambda e: e.name)
def test_every_startup_line_gives_its_engine_config(entry: ConfigLine) -> None:
    assert re.search(entry.pattern, entry.sample), "the sample must match its own pattern"
    result, diag = _parse(entry.sample)
    stated: dict[str, Any] = {**result.engine_config}
    if "version" in result.engine:
        stated["version"] = result.engine["version"]
    for key, value in entry.expect.items():
        assert stated[key] == (pytest.approx(value) if isinstance(value, float) else value), key
    assert diag.lines_recognised == 1
    if entry.family is not None:
        assert result.engine["version_family"] == entry.family


@pytest.mark.parametrize("entry", EVENT_LINES, ids=lambda e: e.name)
def test_every_event_line_gives_its_event(entry: EventLine) -> None:
    result, _ = _parse(entry.sample)
    assert result.events is not None
    kinds = result.events["kind"].to_list()
    assert entry.kind in kinds
    detail = result.events.filter(pl.col("kind") == entry.kind)["detail"][0]
    assert "{" not in detail, "every placeholder of the detail is filled"


@pytest.mark.parametrize("entry", REQUEST_LINES, ids=lambda e: e.name)
def test_every_request_line_gives_its_request_event(entry: RequestLine) -> None:
    result, diag = _parse(entry.sample)
    assert result.requests is not None
    row = result.requests.row(0, named=True)
    for key, value in entry.expect.items():
        assert row[key] == value, key
    assert diag.lines_recognised == 1


def test_stats_forms_cover_every_version_family() -> None:
    assert {f.family for f in STATS_FORMS} >= set(FAMILY_ORDER)


def test_every_request_line_of_a_v0_sample_keeps_the_v0_family() -> None:
    v0 = [e for e in REQUEST_LINES if e.family == "v0"]
    assert v0
    for entry in v0:
        result, _ = _parse(entry.sample, header="WARNING 03-04 05:06:07 scheduler.py:1141] ")
        assert result.engine["version_family"] == "v0"


def test_the_v1_refusal_printing_gib_as_gb_is_read_as_gib() -> None:
    # vllm-project/vllm#15617 (0.8.2): kv_cache_utils divided by 1024**3 and printed "GB"; the
    # figures are GiB (the same refusal of later versions prints "GiB")
    line = (
        "ValueError: To serve at least one request with the models's max seq len (116160), (4.43 "
        "GB KV cache is needed, which is larger than the available KV cache memory (3.48 GB). Try "
        "increasing gpu_memory_utilization or decreasing max_model_len when initializing the "
        "engine."
    )
    result, _ = _parse(line, header="ERROR 03-27 16:43:19 [core.py:343] ")
    assert result.events is not None
    (event,) = result.events.filter(pl.col("kind") == "startup_kv_insufficient").to_dicts()
    assert event["requested_bytes"] == round(4.43 * 1024**3)
    assert event["free_bytes"] == round(3.48 * 1024**3)
    assert result.engine_config["max_model_len"] == 116160
