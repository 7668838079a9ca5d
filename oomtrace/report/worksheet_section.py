"""The budget worksheet against what was observed: planned reserve against the measured peak.

The plan is the budget worksheet's document when one is given (``oomtrace budget --json``),
otherwise what the engine stated at start-up (weights, KV cache, CUDA graphs, memory
utilisation). The observation is the trace's own peak of device memory. The difference is the
point of the section: a runtime reserve planned at 1 GiB next to a measured 3 GiB of runtime
memory is the finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from oomtrace.report.document import Chart, Column, Section, Spec, Table
from oomtrace.report.records import table_from_mapping, table_from_records
from oomtrace.trace import Manifest
from oomtrace.units import format_bytes

TITLE = "Planned against observed"
PARTS_SCHEMA = pl.Schema(
    {"bar": pl.String(), "part": pl.String(), "bytes": pl.Int64(), "order": pl.Int64()}
)
COLUMNS = (
    Column("item", "item", "text"),
    Column("planned_bytes", "planned", "bytes"),
    Column("observed_bytes", "observed", "bytes"),
    Column("basis", "basis", "text"),
)


def _first(mapping: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, Mapping):
            value = value.get("bytes", value.get("total_bytes", value.get("per_gpu_bytes")))
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


def _observed_peak(
    memory: pl.DataFrame, incident: Mapping[str, Any] | None
) -> tuple[int | None, str]:
    # the display series keep every bucket's maximum, so their highest value is the recorded one
    for names, what in (
        (["device used"], "highest device memory sampled"),
        (["allocator reserved"], "highest allocator reserved"),
    ):
        # "GPU 1 device used (NVML)" on a multi-GPU trace: every GPU counts
        values = memory.filter(pl.any_horizontal(pl.col("series").str.ends_with(n) for n in names))[
            "value"
        ]
        if values.len():
            return int(values.max()), what  # type: ignore[arg-type]
    peak = (incident or {}).get("peak_bytes")
    return (int(peak), "incident peak") if isinstance(peak, int | float) else (None, "")


def _device_total(memory: pl.DataFrame, plan: Mapping[str, Any]) -> int | None:
    stated = _first(plan, "device_bytes", "device_memory_bytes", "device_total_bytes")
    if stated is not None:
        return stated
    values = memory.filter(pl.col("series").str.ends_with("device total"))["value"]
    return int(values.max()) if values.len() else None  # type: ignore[arg-type]


@dataclass(frozen=True)
class Plan:
    """The plan's figures and the observed ones (bytes; None where unknown)."""

    source: str
    device: int | None
    weights: int | None
    cache: int | None
    reserve: int | None
    reserve_basis: str
    peak: int | None
    peak_basis: str

    @property
    def runtime(self) -> int | None:
        """Memory outside the weights and the KV pool at the measured peak; None when the peak is
        below the two together (the pool was never allocated in full: nothing to measure)."""
        if self.peak is None or self.weights is None or self.cache is None:
            return None
        outside = self.peak - self.weights - self.cache
        return outside if outside >= 0 else None

    @property
    def never_full(self) -> bool:
        """The highest memory sampled stayed below the weights and the KV pool together."""
        if self.peak is None or self.weights is None or self.cache is None:
            return False
        return self.peak < self.weights + self.cache

    @property
    def planned_total(self) -> int | None:
        if self.weights is None or self.cache is None or self.reserve is None:
            return None
        return self.weights + self.cache + self.reserve

    def rows(self) -> tuple[tuple[str, int | None, int | None, str], ...]:
        src = self.source
        return (
            ("device memory", self.device, self.device, "installed (NVML, or the worksheet)"),
            ("model weights", self.weights, self.weights, f"{src}: weights as loaded"),
            (
                "KV cache pool",
                self.cache,
                self.cache,
                f"{src}: preallocated pool (reserved, not occupied)",
            ),
            (
                "runtime reserve (activations, graphs, workspace)",
                self.reserve,
                self.runtime,
                f"{self.reserve_basis}; observed: peak less weights and KV pool",
            ),
            (
                "total at peak",
                self.planned_total,
                self.peak,
                self.peak_basis or "no memory samples",
            ),
        )


def make_plan(
    worksheet: Mapping[str, Any] | None,
    config: Mapping[str, Any],
    memory: pl.DataFrame,
    incident: Mapping[str, Any] | None,
) -> Plan:
    """The worksheet's plan if given, else the engine's own statements at start-up."""
    plan: Mapping[str, Any] = worksheet or {}
    source = "worksheet" if worksheet else "engine start-up"
    device = _device_total(memory, plan)
    weights = _first(plan, "weights_bytes", "weights") or _first(config, "model_weights_bytes")
    cache = _first(plan, "available_cache_bytes", "kv_cache_bytes") or _first(
        config, "available_kv_cache_bytes"
    )
    reserve = _first(plan, "reserve_bytes", "reserve")
    reserve_basis = f"{source}: runtime reserve"
    if reserve is None and device is not None and weights is not None and cache is not None:
        utilisation = config.get("gpu_memory_utilization")
        budget = int(device * float(utilisation)) if utilisation else device
        reserve = budget - weights - cache
        reserve_basis = "engine start-up: memory budget less weights and KV cache"
    peak, peak_basis = _observed_peak(memory, incident)
    foreign = _foreign_bytes(incident)
    if peak is not None and foreign and peak_basis.startswith("highest device memory"):
        # the plan is the engine's: memory another process held is not its runtime reserve
        peak -= foreign
        peak_basis += f", less {format_bytes(foreign)} other processes held at the incident peak"
    return Plan(source, device, weights, cache, reserve, reserve_basis, peak, peak_basis)


def _foreign_bytes(incident: Mapping[str, Any] | None) -> int:
    """Device memory the incident says other processes held at its peak."""
    processes = (incident or {}).get("processes") or []
    return sum(
        int(p["bytes"])
        for p in processes
        if isinstance(p, Mapping) and isinstance(p.get("bytes"), int | float)
    )


def _worksheet_tables(worksheet: Mapping[str, Any]) -> list[tuple[str, Table]]:
    items = worksheet.get("rows") or worksheet.get("items")
    if isinstance(items, list) and items:
        tables = [("worksheet", table_from_records(items))]
    else:
        tables = [("worksheet", table_from_mapping(worksheet))]
    notes = tuple((str(a),) for a in worksheet.get("assumptions") or [])
    if notes:
        tables.append(("assumptions", Table((Column("assumption", "assumption", "text"),), notes)))
    return tables


def budget_section(
    worksheet: Mapping[str, Any] | None,
    manifest: Manifest,
    memory: pl.DataFrame,
    incident: Mapping[str, Any] | None,
) -> Section:
    """``memory``: the memory chart's series (``ts, series, value``), which keep every
    recorded peak."""
    plan = make_plan(worksheet, manifest.engine_config, memory, incident)
    rows = plan.rows()
    tables: list[tuple[str, Table]] = []
    if any(r[1] is not None or r[2] is not None for r in rows):
        tables.append(("planned_vs_observed", Table(COLUMNS, rows)))
    if worksheet:
        tables += _worksheet_tables(worksheet)
    parts = _parts(plan.weights, plan.cache, plan.reserve, plan.runtime)
    chart_list: tuple[Chart, ...] = ()
    if parts.height:

        def draw() -> Spec:
            from oomtrace.report.overview_charts import budget_chart  # noqa: PLC0415 - Altair

            return budget_chart(parts, title=TITLE)

        caption = "Planned: weights, KV pool and reserve; observed: the same at the measured peak."
        chart_list = (Chart("budget", TITLE, caption, draw, parts),)
    verdict = _reserve_sentence(plan.reserve, plan.runtime)
    if plan.never_full and plan.weights is not None and plan.cache is not None:
        verdict = (
            f"The highest device memory sampled ({format_bytes(plan.peak or 0)}) stayed below the "
            f"weights and the KV pool together ({format_bytes(plan.weights + plan.cache)}): the "
            "pool was never allocated in full (the engine stopped during start-up, or no sample "
            "caught it), so the runtime reserve could not be measured."
        )
    return Section(
        "budget",
        "Budget worksheet against what was observed",
        paragraphs=(
            f"The plan ({plan.source}) next to what the trace measured. {verdict}".strip(),
        ),
        tables=tuple(tables),
        charts=chart_list,
        empty="Neither a worksheet nor the engine's start-up statements give a memory plan.",
    )


def _parts(
    weights: int | None, cache: int | None, reserve: int | None, runtime: int | None
) -> pl.DataFrame:
    """Stacked bars, planned over observed, when every part of both is known."""
    if weights is None or cache is None or reserve is None or runtime is None:
        return pl.DataFrame(schema=PARTS_SCHEMA)
    names = ("model weights", "KV cache pool", "runtime reserve")
    rows = [
        (bar, name, value, order)
        for bar, values in (
            ("planned", (weights, cache, reserve)),
            ("observed", (weights, cache, max(runtime, 0))),
        )
        for order, (name, value) in enumerate(zip(names, values, strict=True))
    ]
    return pl.DataFrame(rows, schema=PARTS_SCHEMA, orient="row")


def _reserve_sentence(reserve: int | None, runtime: int | None) -> str:
    if reserve is None or runtime is None:
        return ""
    if runtime > reserve:
        return (
            f"At the peak, memory outside the weights and the KV pool reached "
            f"{format_bytes(runtime)}, {format_bytes(runtime - reserve)} more than the "
            f"{format_bytes(reserve)} planned for it."
        )
    return (
        f"At the peak, memory outside the weights and the KV pool was {format_bytes(runtime)}, "
        f"within the {format_bytes(reserve)} planned for it."
    )
