"""From the analysis' findings to :class:`~oomtrace.report.build.ReportInputs`.

Two forms of the same findings are accepted: the in-memory object ``oomtrace analyze`` builds
(full-resolution series and per-request window segments as frames) and its JSON document
(``findings_version`` 1: series as ``[iso, value]`` points already reduced by min and max per
bucket, window segments as ``requests_in_window`` rows). Only that published contract is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import is_dataclass, replace
from pathlib import Path
from typing import Any, Final, Protocol

import polars as pl

from oomtrace.analysis.findings import FINDINGS_VERSION
from oomtrace.analysis.trace_scan import TraceScan
from oomtrace.errors import InputError, special_file_error
from oomtrace.report.build import ReportInputs
from oomtrace.report.chart_data import ANALYSIS_SCHEMA
from oomtrace.report.records import parse_time
from oomtrace.schema import TS
from oomtrace.trace import Trace

# Series of the analysis drawn beside the observed memory: metric -> label in the chart.
ANALYSIS_SERIES: Final[dict[str, str]] = {
    "modelled_kv_bytes": "KV modelled",
    "kv_used": "KV observed",
}
LANES_SCHEMA: Final = pl.Schema(
    {
        "request_id": pl.String(),
        "start": TS,
        "end": TS,
        "state": pl.String(),
        "start_tokens": pl.Int64(),
        "stored_tokens": pl.Int64(),
        "kv_bytes": pl.Int64(),
    }
)


class FindingsLike(Protocol):
    """The in-memory findings: a JSON document plus full-resolution frames."""

    @property
    def series(self) -> pl.DataFrame: ...

    def to_json(self) -> dict[str, Any]: ...


def load_document(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path`` (``--findings``, ``--worksheet``), or an InputError."""
    if error := special_file_error(Path(path), what):
        raise error
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(
            f"{what} {path}: not readable JSON ({err}); pass the file written with --json"
        ) from err
    if not isinstance(document, dict):
        raise InputError(f"{what} {path}: expected a JSON object, found {type(document).__name__}")
    return document


def load_findings(path: Path) -> dict[str, Any]:
    """``--findings``: the JSON document ``oomtrace analyze --json`` wrote, or an InputError that
    says what the file is instead (a report, a worksheet, any other JSON would otherwise read as
    findings without an incident)."""
    document = load_document(path, "--findings")
    version = document.get("findings_version")
    remedy = "pass the file `oomtrace analyze TRACE --json > findings.json` wrote"
    if version is None:
        what = _what_document(document)
        raise InputError(
            f"--findings {path}: {what}, not the findings of oomtrace analyze; {remedy}"
        )
    if version != FINDINGS_VERSION or not isinstance(document.get("incidents"), list):
        raise InputError(
            f"--findings {path}: findings version {version!r}, this oomtrace reads version "
            f"{FINDINGS_VERSION}; run `oomtrace analyze` again with this version"
        )
    return document


def _what_document(document: Mapping[str, Any]) -> str:
    """What a JSON object that is not findings looks like, in words."""
    if "report_version" in document:
        return "an oomtrace report"
    if "kv_bytes_per_token" in document and "device_bytes" in document:
        return "an oomtrace budget worksheet"
    if "schema_version" in document and "sources" in document:
        return "a trace manifest"
    return "a JSON object without findings_version"


def from_findings_object(
    findings: FindingsLike, trace: Trace | TraceScan, worksheet: Mapping[str, Any] | None = None
) -> ReportInputs:
    # The document without its series: the report draws the full-resolution frame, so writing
    # every point as JSON text first would be wasted.
    bare = replace(findings, series=findings.series.clear()) if is_dataclass(findings) else findings
    doc = bare.to_json()
    incidents = getattr(findings, "incidents", ())
    segments = getattr(incidents[0], "window_segments", None) if incidents else None
    lanes = lanes_from_segments(segments) if isinstance(segments, pl.DataFrame) else None
    return ReportInputs(doc, trace, series_from_frame(findings.series), lanes, worksheet)


def from_findings_document(
    doc: Mapping[str, Any], trace: Trace | TraceScan, worksheet: Mapping[str, Any] | None = None
) -> ReportInputs:
    incidents = [i for i in doc.get("incidents") or [] if isinstance(i, Mapping)]
    rows = incidents[0].get("requests_in_window") if incidents else None
    lanes = None
    if isinstance(rows, list) and rows:
        frame = pl.DataFrame(rows, infer_schema_length=None)
        lanes = lanes_from_segments(
            frame.with_columns(
                pl.col(c).str.to_datetime(time_zone="UTC").cast(TS)
                for c in ("from_ts", "to_ts")
                if frame.schema[c] == pl.String
            )
        )
    return ReportInputs(doc, trace, series_from_points(doc.get("series")), lanes, worksheet)


def series_from_frame(series: pl.DataFrame) -> pl.DataFrame:
    """The analysis' long series frame -> the report's ``ts, series, source, value`` (bytes
    only)."""
    if series.is_empty():
        return pl.DataFrame(schema=ANALYSIS_SCHEMA)
    chosen = series.filter(
        pl.col("metric").is_in(list(ANALYSIS_SERIES)) & (pl.col("unit") == "bytes")
    )
    return chosen.select(
        pl.col("ts").cast(TS),
        pl.col("metric").replace_strict(ANALYSIS_SERIES, return_dtype=pl.String).alias("series"),
        pl.col("source").cast(pl.String).fill_null(""),
        pl.col("value").cast(pl.Float64),
    )


def series_from_points(series: Any) -> pl.DataFrame:
    """The ``series`` list of a findings document -> ``ts, series, source, value`` (bytes
    only)."""
    rows: list[tuple[Any, str, str, float]] = []
    for item in series if isinstance(series, Sequence) else []:
        if not isinstance(item, Mapping) or item.get("unit") != "bytes":
            continue
        name = ANALYSIS_SERIES.get(str(item.get("metric")))
        if name is None:
            continue
        source = str(item.get("source") or "")
        for point in item.get("points") or []:
            ts = parse_time(point[0]) if isinstance(point, Sequence) and point else None
            if ts is not None and isinstance(point[1], int | float):
                rows.append((ts, name, source, float(point[1])))
    return pl.DataFrame(rows, schema=ANALYSIS_SCHEMA, orient="row")


def lanes_from_segments(segments: pl.DataFrame) -> pl.DataFrame:
    """The analysis' window segments (clipped to the window, tokens at both ends) -> lanes:
    coloured by the tokens stored at the end of each interval, labelled by how it ended."""
    if segments.is_empty():
        return pl.DataFrame(schema=LANES_SCHEMA)
    state = (
        pl.concat_str([pl.lit("ended: "), pl.col("end_basis")])
        if "end_basis" in segments.columns
        else pl.lit("resident")
    )
    start_tokens = (
        pl.col("tokens_from").cast(pl.Int64)
        if "tokens_from" in segments.columns
        else pl.lit(None, pl.Int64)
    )
    return segments.select(
        pl.col("request_id").cast(pl.String),
        pl.col("from_ts").cast(TS).alias("start"),
        pl.col("to_ts").cast(TS).alias("end"),
        state.fill_null("resident").alias("state"),
        start_tokens.alias("start_tokens"),
        pl.col("tokens_to").cast(pl.Int64).alias("stored_tokens"),
        pl.col("bytes_to").cast(pl.Int64).alias("kv_bytes"),
    )
