"""The JSON a Prometheus server returns for ``/api/v1/query_range`` (matrix) and ``/api/v1/query``
(vector): how most teams recover metrics after an outage.

A file may hold one response, a JSON array of responses (several queries), or one response per
line (JSON lines); a bare ``data`` object (``{"resultType": ..., "result": [...]}``) is accepted
too. A response with ``"status": "error"`` is reported with its error text: the file is refused
if nothing else in it is usable, otherwise noted. Warnings the server sent are noted.

A response printed by Python (``print(requests.get(...).json())``, pasted into an issue:
``{'status': 'success', 'data': {'resultType': 'vector', ...}}``, behind whatever text the line
began with, e.g. GoogleCloudPlatform/ai-on-gke PR 937) is the same data in Python's literal
syntax: it is read with :func:`ast.literal_eval`, which evaluates literals only, never code.

Series are mapped by their ``__name__`` through the same dialect table and mapping code as
exposition text (:func:`oomtrace.ingest.prometheus.canonical_map.to_result`); a series without a
name is the result of an expression (``rate(...)``, ``sum by``) and cannot be mapped: counted, with
the remedy. JSON has no lines: the diagnostics count data points as lines.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.prometheus import dialects as d
from oomtrace.ingest.prometheus.canonical_map import (
    ConfigInfo,
    note_unmapped,
    raw_frame,
    seconds_to_ts,
    to_result,
)
from oomtrace.ingest.text.input_file import InputFile

log = logging.getLogger(__name__)

_SERIES_TYPES: Final = ("matrix", "vector")
# Python's parser builds a syntax tree many times the text's size: a printed response larger
# than this is no paste.
_LITERAL_MAX: Final = 64 << 20
# Where a response starts on a line that holds text before it, in JSON's or Python's quotes.
_RESPONSE_START: Final = re.compile(r"""\{\s*(['"])(?:status|data|resultType)\1\s*:""")


class PrometheusQueryJsonParser:
    """The ``prometheus-query-json`` format."""

    name = "prometheus-query-json"
    description = "Prometheus HTTP API JSON: query_range (matrix) and query (vector) responses"

    def sniff(self, head: str, name: str) -> float:
        start = head.lstrip()[:1]
        if start not in {"{", "["}:
            # a response Python printed, pasted behind other text on its line
            return 0.85 if "'resultType'" in head and _RESPONSE_START.search(head) else 0.0
        if '"resultType"' in head:
            return 0.95
        if "'resultType'" in head:
            return 0.9
        return 0.9 if '"status"' in head and '"errorType"' in head else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        text = source.read_bytes(diag).decode("utf-8", errors="replace")
        series: list[dict[str, Any]] = []
        errors: list[str] = []
        for response in _responses(text, source.name, diag):
            series.extend(_series_of(response, errors, diag))
        if errors and not series:
            raise InputError(
                f"{source.name}: the Prometheus server answered with an error ({errors[0]}); "
                "fix the query and export its response again"
            )
        for error in errors:
            diag.note(f"a response in this file is an error: {error}", lost=True)
        return _to_result(series, diag)


def _document(text: str) -> Any:
    """``text`` as JSON or, failing that, as a Python literal; raises ``ValueError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if len(text) > _LITERAL_MAX:
            raise
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise err from None


def _line_document(line: str) -> Any:
    """A line's response: the whole line, or from where a response starts after other text."""
    try:
        return _document(line)
    except ValueError:
        start = _RESPONSE_START.search(line)
        if start is None or start.start() == 0:
            raise
        return _document(line[start.start() :])


def _responses(text: str, name: str, diag: SourceDiagnostics) -> Iterator[dict[str, Any]]:
    try:
        docs: list[Any] = [_document(text)]
    except json.JSONDecodeError as whole:
        docs = []
        bad = 0
        example = None
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                docs.append(_line_document(line))
            except ValueError:
                bad += 1
                example = example or line
        if not docs:
            raise InputError(
                f"{name}: not valid JSON ({whole.msg} at line {whole.lineno}); save the server's "
                "response to /api/v1/query_range as it is (e.g. curl -o)"
            ) from whole
        diag.lines_read += bad
        diag.skip("line that is not JSON", bad, example)
    for doc in docs:
        items = doc if isinstance(doc, list) else [doc]
        for item in items:
            if isinstance(item, dict):
                yield item
            else:
                diag.skip("JSON value that is not a query response", 1, str(item)[:80])


def _series_of(
    response: dict[str, Any], errors: list[str], diag: SourceDiagnostics
) -> list[dict[str, Any]]:
    if response.get("status") == "error":
        errors.append(f"{response.get('errorType', 'error')}: {response.get('error', '')}")
        return []
    for warning in response.get("warnings") or []:
        diag.note(f"the Prometheus server warned: {warning}")
    data = response.get("data", response)
    kind = data.get("resultType") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if kind not in _SERIES_TYPES or not isinstance(result, list):
        diag.skip("response that is not a matrix or vector", 1, f"resultType={kind!r}")
        return []
    return [s for s in result if isinstance(s, dict) and isinstance(s.get("metric"), dict)]


def _to_result(series: list[dict[str, Any]], diag: SourceDiagnostics) -> ParseResult:
    wanted: list[dict[str, Any]] = []
    unmapped: Counter[str] = Counter()
    nameless = 0
    configs: list[ConfigInfo] = []
    for item in series:
        points = _points(item)
        diag.lines_read += len(points)
        name = item["metric"].get("__name__")
        if name is None:
            nameless += len(points)
        elif name == d.CACHE_CONFIG_INFO and points:
            stamp = seconds_to_ts(pl.Series([points[0][0]], dtype=pl.Float64))[0]
            configs.append(ConfigInfo(stamp, item["metric"]))
            diag.lines_recognised += len(points)
        elif name in d.WANTED_NAMES:
            wanted.append({"metric": item["metric"], "points": points})
        else:
            unmapped[name] += len(points)
    diag.skip("series without __name__ (an expression's result)", nameless, None)
    if nameless:
        diag.note(
            "some series have no __name__ (the query was an expression such as rate() or "
            "sum by()); query the raw metric names over the window instead",
            lost=True,
        )
    note_unmapped(unmapped, next(iter(unmapped), None), diag)
    return to_result(_raw(wanted, diag), configs, diag)


def _points(item: dict[str, Any]) -> list[Any]:
    if isinstance(item.get("values"), list):
        return [p for p in item["values"] if isinstance(p, list) and len(p) == 2]
    value = item.get("value")
    return [value] if isinstance(value, list) and len(value) == 2 else []


def _raw(wanted: list[dict[str, Any]], diag: SourceDiagnostics) -> pl.DataFrame:
    """One raw row per point. Lists of timestamps and value strings are collected with two
    comprehensions and converted by Polars in one go (measured faster than one frame per series:
    benchmarks/prometheus_parse_bench.py)."""
    stamps = pl.Series([p[0] for s in wanted for p in s["points"]], dtype=pl.Float64, strict=False)
    texts = pl.Series([p[1] for s in wanted for p in s["points"]], dtype=pl.String, strict=False)
    lengths = [len(s["points"]) for s in wanted]
    index = pl.Series(range(len(wanted)), dtype=pl.UInt32).repeat_by(
        pl.Series(lengths, dtype=pl.UInt32)
    )
    index = index.explode() if index.len() else pl.Series([], dtype=pl.UInt32)
    values = texts.str.strip_chars().cast(pl.Float64, strict=False)
    ts = seconds_to_ts(stamps)
    labels = [{k: str(v) for k, v in s["metric"].items()} for s in wanted]
    per_series = raw_frame(
        pl.Series([None] * len(wanted), dtype=ts.dtype),
        [lab["__name__"] for lab in labels],
        [0.0] * len(wanted),
        labels,
    ).drop("ts", "value")
    raw = per_series.with_row_index("i").join(
        pl.DataFrame({"i": index, "ts": ts, "value": values}), on="i"
    )
    unreadable = raw.filter(pl.col("value").is_null() | pl.col("ts").is_null())
    diag.skip("point whose time or value is not a number", unreadable.height, None)
    raw = raw.filter(pl.col("value").is_not_null() & pl.col("ts").is_not_null())
    diag.lines_recognised += raw.height
    return raw.select("ts", "name", "value", *d.LABELS)


PARSER = PrometheusQueryJsonParser()
