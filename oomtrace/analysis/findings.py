"""Findings: what ``oomtrace analyze`` concluded, as frozen values and a stable JSON document.

The JSON document (``findings_version`` 1) is deterministic: sorted keys, timestamps in ISO 8601
UTC with microseconds, bytes/tokens/blocks as integers, shares and ratios rounded to 6 decimals,
no run timestamps and no paths (source names are reduced to their file names). Series are
downsampled for the document (first minimum and maximum per time bucket, so peaks survive); the
in-memory :class:`Findings` keeps them at full resolution for the report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, get_args

import polars as pl

from oomtrace.analysis.evidence import Evidence, Scalar, scalar
from oomtrace.analysis.jsonfmt import TIME_DIGITS, WHOLE_UNITS, number, share
from oomtrace.analysis.observed_series import downsample
from oomtrace.analysis.spikes import Spike
from oomtrace.diagnostics import Category, kind_category
from oomtrace.isotime import iso_time, iso_time_expr

FINDINGS_VERSION: Final = 1

IncidentClass = Literal[
    "kv_exhaustion",
    "transient_peak",
    "startup_misfit",
    "fragmentation",
    "foreign_memory",
    "leak",
    "gpu_fault",
    "workspace_overflow",
    "unknown",
]
CLASSES: Final[tuple[IncidentClass, ...]] = get_args(IncidentClass)
# Classes whose cause is not a request: they name no culprits (the class names the cause).
NOT_REQUESTS: Final[frozenset[IncidentClass]] = frozenset(
    {"startup_misfit", "foreign_memory", "fragmentation", "leak", "gpu_fault"}
)
Anchor = Literal["oom", "startup", "spike", "preemption", "xid"]


@dataclass(frozen=True)
class Culprit:
    """A request ranked among those that caused an incident, with the numbers behind the rank."""

    rank: int
    request_id: str
    share: float
    tokens: int | None
    tokens_low: int | None
    tokens_high: int | None
    basis: str | None
    blocks: int | None
    bytes: int | None
    prompt_tokens: int | None
    max_tokens: int | None
    growth_tokens: int | None
    arrived: datetime | None
    resident_since: datetime | None
    resident_since_basis: str | None  # the segment's start_basis (see oomtrace.analysis.timeline)
    admitted_in_window: bool
    in_prefill: bool | None
    reason: str
    # times the engine preempted it in the trace (null: no source states preemptions by request)
    preemptions: int | None = None
    # "engine": blocks as the engine itself stated them (the vLLM plugin); "modelled": from
    # tokens where the engine states blocks for other requests; null where no source states any
    blocks_basis: str | None = None
    # At a transient peak: the request's share of the step (oomtrace.analysis.step_bytes).
    step_tokens: int | None = None
    step_parameter: str | None = None
    step_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "preemptions": self.preemptions,
            "blocks_basis": self.blocks_basis,
            "request_id": self.request_id,
            "share": share(self.share),
            "tokens": self.tokens,
            "tokens_low": self.tokens_low,
            "tokens_high": self.tokens_high,
            "basis": self.basis,
            "blocks": self.blocks,
            "bytes": self.bytes,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "growth_tokens": self.growth_tokens,
            "arrived": iso_time(self.arrived, TIME_DIGITS),
            "resident_since": iso_time(self.resident_since, TIME_DIGITS),
            "resident_since_basis": self.resident_since_basis,
            "admitted_in_window": self.admitted_in_window,
            "in_prefill": self.in_prefill,
            "reason": self.reason,
            "step_tokens": self.step_tokens,
            "step_parameter": self.step_parameter,
            "step_bytes": self.step_bytes,
        }


@dataclass(frozen=True)
class LedgerRow:
    request_id: str
    prompt_tokens: int | None
    max_tokens: int | None
    reserved_tokens: int | None
    reserved_bytes: int | None
    stored_tokens: int | None
    stored_low: int | None
    stored_high: int | None
    basis: str | None
    blocks: int | None
    stored_bytes: int | None
    share: float
    resident_since: datetime | None
    resident_since_basis: str | None
    preemptions: int | None = None
    blocks_basis: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["share"] = share(self.share)
        out["resident_since"] = iso_time(self.resident_since, TIME_DIGITS)
        return out


@dataclass(frozen=True)
class Ledger:
    """The admission ledger at the spike: every resident request and the totals against the pool.
    ``reserved`` is each request's contract (``prompt + max_tokens``); ``stored`` what it held.
    Remainders are never negative: what the pool had left is the pool less what it held, the
    model's count capped at the pool."""

    ts: datetime | None  # None: the input prints no time (oomtrace.analysis.untimed)
    rows: tuple[LedgerRow, ...]
    resident_requests: int
    stored_tokens: int
    stored_bytes: int | None
    reserved_tokens: int | None
    reserved_bytes: int | None
    unknown_contracts: int
    pool_tokens: int | None
    pool_bytes: int | None
    remaining_bytes: int | None
    observed_used_bytes: int | None
    remaining_observed_bytes: int | None
    waiting_requests: int | None
    # The engine's own running count at the moment, beside the model's resident count.
    engine_running: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["ts"] = iso_time(self.ts, TIME_DIGITS)
        out["rows"] = [r.to_json() for r in self.rows]
        return out


@dataclass(frozen=True)
class Component:
    """A named part of the observed peak (weights, other processes, allocator slack, ...)."""

    name: str
    bytes: int
    basis: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "basis": self.basis}


@dataclass(frozen=True)
class ClassCheck:
    """One class tested against the incident: whether it matched, why, the rows it read and the
    figures it computed."""

    cls: IncidentClass
    matched: bool
    reason: str
    evidence: tuple[Evidence, ...] = ()
    # The numbers the check computed (bytes as integers, seconds, shares), by name: what the
    # remedies and the report's charts read, so that none of them is worked out twice.
    figures: tuple[tuple[str, Scalar], ...] = ()

    def figure(self, name: str) -> Scalar:
        return dict(self.figures).get(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.cls,
            "matched": self.matched,
            "reason": self.reason,
            "evidence": [e.to_json() for e in self.evidence],
            "figures": {k: scalar(v) for k, v in self.figures},
        }


@dataclass(frozen=True)
class ProcessUse:
    """Device memory held by a process other than the engine at the peak; ``name`` where a
    source names it (nvidia-smi's process name)."""

    pid: int | None
    bytes: int
    growth_bytes: int | None
    share: float
    basis: str
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "name": self.name,
            "bytes": self.bytes,
            "growth_bytes": self.growth_bytes,
            "share": share(self.share),
            "basis": self.basis,
        }


@dataclass(frozen=True)
class Reconciliation:
    """Two figures that should agree, compared where both exist. ``gap = a - b``."""

    name: str
    a: str
    b: str
    unit: str
    points: int
    median_gap: float | None
    max_gap: float | None
    max_gap_ts: datetime | None
    interpretation: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "a": self.a,
            "b": self.b,
            "unit": self.unit,
            "points": self.points,
            "median_gap": number(self.median_gap, self.unit),
            "max_gap": number(self.max_gap, self.unit),
            "max_gap_ts": iso_time(self.max_gap_ts, TIME_DIGITS),
            "interpretation": self.interpretation,
        }


@dataclass(frozen=True)
class Gap:
    """Something the analysis could not see, and how much of it; or, with ``category``
    ``assumption``, how something was read (:mod:`oomtrace.diagnostics`)."""

    kind: str
    source: str | None
    detail: str
    count: int | None = None
    start: datetime | None = None
    end: datetime | None = None

    @property
    def category(self) -> Category:
        return kind_category(self.kind)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "category": self.category,
            "source": self.source,
            "detail": self.detail,
            "count": self.count,
            "start": iso_time(self.start, TIME_DIGITS),
            "end": iso_time(self.end, TIME_DIGITS),
        }


@dataclass(frozen=True)
class Incident:
    """One incident: its moment, its class with evidence, its culprits and its coverage.

    ``coverage`` is ``explained_bytes / observed_bytes``: the share of the observed peak
    (``coverage_basis`` names which observation) that named requests explain, null when nothing
    was observed at the peak. ``explained_bytes`` is what the model counts the resident requests
    holding (``modelled_bytes``), capped at what the engine itself stated of its KV in use (the
    observed KV, else the pool): where the model counts more, ``model_note`` says by how much and
    why, so that explained never exceeds observed and no remainder is negative. Culprit and ledger
    shares are of ``max(observed, modelled)``.
    """

    id: str
    primary: bool
    cls: IncidentClass
    reason: str
    anchor: Anchor
    anchor_series: str | None
    node: str
    device: int | None
    # None only where no input of the trace prints a time (oomtrace.analysis.untimed): then
    # ``time_note`` says so and where the failure stands in the log's order.
    start: datetime | None
    peak_ts: datetime | None
    window_start: datetime | None
    peak_bytes: int | None
    capacity_bytes: int | None
    coverage: float | None
    coverage_basis: str
    observed_bytes: int | None
    explained_bytes: int | None
    unexplained_bytes: int | None
    # What the model counted before it was capped at the engine's own figure, and why it was.
    modelled_bytes: int | None
    model_note: str | None
    breakdown: tuple[Component, ...]
    culprits: tuple[Culprit, ...]
    processes: tuple[ProcessUse, ...]
    checks: tuple[ClassCheck, ...]
    ledger: Ledger
    spikes: tuple[Spike, ...]
    window_segments: pl.DataFrame = field(compare=False, repr=False)
    time_note: str | None = None

    @property
    def evidence(self) -> tuple[Evidence, ...]:
        """The rows behind the class: the matched check's evidence."""
        for check in self.checks:
            if check.cls == self.cls:
                return check.evidence
        return ()

    def to_json(self) -> dict[str, Any]:
        return {
            **({"time_note": self.time_note} if self.time_note else {}),
            "id": self.id,
            "primary": self.primary,
            "class": self.cls,
            "reason": self.reason,
            "anchor": self.anchor,
            "anchor_series": self.anchor_series,
            "node": self.node,
            "device": self.device,
            "start": iso_time(self.start, TIME_DIGITS),
            "peak_ts": iso_time(self.peak_ts, TIME_DIGITS),
            "window_start": iso_time(self.window_start, TIME_DIGITS),
            "peak_bytes": self.peak_bytes,
            "capacity_bytes": self.capacity_bytes,
            "coverage": share(self.coverage),
            "coverage_basis": self.coverage_basis,
            "observed_bytes": self.observed_bytes,
            "explained_bytes": self.explained_bytes,
            "unexplained_bytes": self.unexplained_bytes,
            "modelled_bytes": self.modelled_bytes,
            "model_note": self.model_note,
            "breakdown": [c.to_json() for c in self.breakdown],
            "culprits": [c.to_json() for c in self.culprits],
            "processes": [p.to_json() for p in self.processes],
            "checks": [c.to_json() for c in self.checks],
            "evidence": [e.to_json() for e in self.evidence],
            "ledger": self.ledger.to_json(),
            "spikes": [s.to_json() for s in self.spikes],
            "requests_in_window": _frame_rows(self.window_segments),
        }


@dataclass(frozen=True)
class Remedy:
    """The limit or setting that would have prevented an incident, computed from the trace.

    ``action`` is one short imperative line a person can apply ("set --max-num-seqs 12");
    ``setting`` the flag or variable it changes (None when the remedy is not a setting, e.g.
    moving a process) and ``value`` its value as written on the command line; ``basis`` how it
    was computed (``replay``: the recorded traffic replayed under it passed; ``budget``: the
    engine's own start-up figures; ``allocator``: PyTorch's allocator statistics at the OOM;
    ``process``: per-process memory; ``parameters``: the request parameters of the step that
    failed); ``detail`` the numbers behind it and what it costs (queueing delay, refused
    requests), and ``figures`` the same numbers as values. Remedies are listed in priority order
    (:attr:`Findings.remedies`): the primary incident's first, the one that costs least first.
    """

    incident: str
    cls: IncidentClass
    action: str
    setting: str | None
    value: str | None
    basis: str
    detail: str
    figures: tuple[tuple[str, Scalar], ...] = ()
    evidence: tuple[Evidence, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "incident": self.incident,
            "class": self.cls,
            "action": self.action,
            "setting": self.setting,
            "value": self.value,
            "basis": self.basis,
            "detail": self.detail,
            "figures": {k: scalar(v) for k, v in self.figures},
            "evidence": [e.to_json() for e in self.evidence],
        }


@dataclass(frozen=True)
class TraceSummary:
    nodes: tuple[str, ...]
    start: datetime | None
    end: datetime | None
    engine: str | None
    samples: int
    request_events: int
    requests: int
    events: int
    # Why start and end are null where no input prints a time (oomtrace.analysis.untimed).
    time_note: str | None = None
    # Engine deaths the trace shows, each a line: when (or where in the log's order) and that
    # the log does not say why, where no incident explains them (oomtrace.analysis.deaths).
    deaths: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        # Both keys only where they say something: a trace with times and no unexplained death
        # reads as it did before they existed.
        if not self.time_note:
            del out["time_note"]
        if self.deaths:
            out["deaths"] = list(self.deaths)
        else:
            del out["deaths"]
        out.update(
            nodes=list(self.nodes),
            start=iso_time(self.start, TIME_DIGITS),
            end=iso_time(self.end, TIME_DIGITS),
        )
        return out


@dataclass(frozen=True)
class Findings:
    """Everything ``oomtrace analyze`` found. ``incidents`` are primary first; ``remedies`` what
    would have prevented them, in priority order; ``series`` is the long series frame (observed,
    modelled and derived) at full resolution."""

    trace: TraceSummary
    kv_model: dict[str, Any]
    decode_rate: dict[str, Any]
    incidents: tuple[Incident, ...]
    spikes: tuple[Spike, ...]
    reconciliation: tuple[Reconciliation, ...]
    gaps: tuple[Gap, ...]
    options: dict[str, Any]
    series: pl.DataFrame = field(compare=False, repr=False)
    remedies: tuple[Remedy, ...] = ()
    findings_version: int = FINDINGS_VERSION

    @property
    def primary(self) -> Incident | None:
        return self.incidents[0] if self.incidents else None

    def to_json(self, *, series_buckets: int | None = None) -> dict[str, Any]:
        buckets = series_buckets or int(self.options.get("json_series_buckets", 1000))
        return {
            "findings_version": self.findings_version,
            "trace": self.trace.to_json(),
            "kv_model": self.kv_model,
            "decode_rate": self.decode_rate,
            "remedies": [r.to_json() for r in self.remedies],
            "incidents": [i.to_json() for i in self.incidents],
            "spikes": [s.to_json() for s in self.spikes],
            "reconciliation": [r.to_json() for r in self.reconciliation],
            "gaps": [g.to_json() for g in self.gaps],
            "options": self.options,
            "series": _series_json(downsample(self.series, buckets)),
        }


def dumps(findings: Findings) -> str:
    """The findings as the stable, versioned JSON document (ends with a newline)."""
    text = json.dumps(findings.to_json(), indent=2, sort_keys=True, ensure_ascii=True)
    return text + "\n"


def _frame_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: iso_time(v, TIME_DIGITS) if isinstance(v, datetime) else v for k, v in row.items()}
        for row in frame.iter_rows(named=True)
    ]


def _series_json(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Each series with its points ``[time, value]``: times formatted by Polars in one pass, and
    whole-unit values rounded there too (half to even, as Python's ``round``)."""
    if frame.is_empty():
        return []
    keys = ["series", "kind", "node", "source", "device", "pid", "metric", "unit"]
    value = pl.col("value")
    finite = value.is_not_null() & value.is_finite()
    whole = pl.col("unit").is_in(list(WHOLE_UNITS))
    texts = frame.with_columns(
        ts=iso_time_expr(pl.col("ts"), TIME_DIGITS),
        whole=pl.when(finite & whole).then(value.round(0, mode="half_to_even").cast(pl.Int64)),
    )
    grouped = texts.group_by(keys, maintain_order=True).agg("ts", "value", "whole").sort("series")
    out = []
    for row in grouped.iter_rows(named=True):
        unit = row["unit"]
        values = row["whole"] if unit in WHOLE_UNITS else [number(v, unit) for v in row["value"]]
        points = [[t, v] for t, v in zip(row["ts"], values, strict=True)]
        out.append({**{k: row[k] for k in keys}, "points": points})
    return out
