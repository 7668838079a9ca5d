"""Figures that should agree, compared where both exist; the gaps are findings.

* modelled KV (the sweep over requests) against observed KV (blocks, tokens or usage x pool);
* device memory in use (NVML, nvidia-smi) against allocator reserved: the gap is memory outside
  PyTorch's cache (CUDA context, NCCL, graphs) or another process;
* allocator reserved against allocated: the slack is cached but not live (fragmentation when it
  is large at an OOM). Reserved is memory the allocator holds, never memory in use by tensors.

Each comparison is an as-of join of one series onto the other's sample times.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import polars as pl

from oomtrace.analysis.findings import Reconciliation
from oomtrace.analysis.index import Family, SeriesIndex
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.observed_series import SERIES_SCHEMA
from oomtrace.analysis.pool import POOL_COLUMNS, Breakpoints, pool_at
from oomtrace.units import format_bytes

TOLERANCE = timedelta(seconds=5)


def _stats(gaps: pl.DataFrame) -> tuple[int, float | None, float | None, object]:
    if gaps.is_empty():
        return 0, None, None, None
    worst = gaps.row(int(gaps["gap"].abs().arg_max() or 0), named=True)
    return gaps.height, float(gaps["gap"].median()), float(worst["gap"]), worst["ts"]  # type: ignore[arg-type]


def kv_reconciliation(
    observed: pl.DataFrame, breakpoints: Breakpoints, kv: KVModel, requests_seen: bool
) -> tuple[Reconciliation | None, pl.DataFrame]:
    """Modelled against observed KV at the observed sample times, and the gap series."""
    if observed.is_empty() or not requests_seen:
        return None, pl.DataFrame(schema=SERIES_SCHEMA)
    unit = str(observed["unit"][0])
    modelled_column = {"bytes": "kv_bytes", "blocks": "kv_blocks", "tokens": "stored_tokens"}.get(
        unit
    )
    if modelled_column is None:  # a bare ratio and no pool size: nothing to compare with
        return None, pl.DataFrame(schema=SERIES_SCHEMA)
    joined = pool_at(breakpoints, observed.select("node", "ts", "value"), has_bytes=kv.has_bytes)
    cap = pool_caps(kv).get(modelled_column)
    modelled = pl.col(modelled_column).cast(pl.Float64)
    if cap is not None:  # the model never holds more than the pool (see modelled_index)
        modelled = modelled.clip(upper_bound=float(cap))
    gaps = joined.select("node", "ts", gap=modelled - pl.col("value")).filter(
        pl.col("gap").is_not_null()
    )
    points, median, worst, worst_ts = _stats(gaps)
    if median is None:
        return None, pl.DataFrame(schema=SERIES_SCHEMA)
    typical = float(observed["value"].median() or 0.0)  # type: ignore[arg-type]
    meaning = _kv_meaning(median, worst, worst_ts, typical, cap, unit)
    recon = Reconciliation(
        "kv_modelled_vs_observed",
        f"modelled {modelled_column}",
        "observed KV in use",
        unit,
        points,
        median,
        worst,
        worst_ts,  # type: ignore[arg-type]
        meaning,
    )
    series = gaps.select(
        series=pl.lit("kv modelled minus observed"),
        kind=pl.lit("derived"),
        node="node",
        source=pl.lit("oomtrace"),
        device=pl.lit(None, pl.Int32),
        pid=pl.lit(None, pl.Int64),
        metric=pl.lit("kv_gap"),
        unit=pl.lit(unit),
        ts="ts",
        value="gap",
    )
    return recon, series


AGREE = 0.1  # modelled and observed agree when they differ by no more than this share


def _kv_meaning(
    median: float,
    worst: float | None,
    worst_ts: object,
    typical: float,
    pool: int | None,
    unit: str,
) -> str:
    """What the gap between modelled and observed KV says. They "agree" only when the median and
    the worst gap are both within :data:`AGREE` of the pool (else of the typical observation): a
    median near zero beside a worst gap of gigabytes is not agreement."""
    scale = float(pool) if pool else typical
    relative = median / typical if typical else 0.0
    worst_share = abs(worst or 0.0) / scale if scale else 0.0
    if abs(relative) <= AGREE:
        meaning = f"modelled and observed KV agree within {AGREE:.0%} (median)"
        if worst_share <= AGREE:
            return meaning + " and at worst"
        when = f" at {worst_ts:%H:%M:%S}" if hasattr(worst_ts, "strftime") else ""
        size = _amount(abs(worst or 0.0), unit)
        side = "above" if (worst or 0.0) > 0 else "below"
        why = _ABOVE if (worst or 0.0) > 0 else _BELOW
        return f"{meaning}, but the model was {size} {side} observed{when}: {why}"
    if relative < 0:
        return f"modelled KV is {-relative:.0%} below observed (median): {_BELOW}"
    return f"modelled KV is {relative:.0%} above observed (median): {_ABOVE}"


_BELOW = "requests missing from the lifecycle log, or stored tokens underestimated"
_ABOVE = (
    "requests the model counts resident that the engine had preempted, queued or finished "
    "without an end statement, or prefix-cache sharing (one block held for several requests)"
)


def _amount(value: float, unit: str) -> str:
    return format_bytes(round(value)) if unit == "bytes" else f"{value:,.0f} {unit}"


def pool_caps(kv: KVModel) -> dict[str, int | None]:
    """What the pool holds, per modelled column: the model is never allowed above it."""
    return {
        "kv_bytes": kv.pool_bytes,
        "stored_tokens": kv.pool_tokens,
        "kv_blocks": kv.pool_blocks,
    }


def _pair(index: SeriesIndex, a_metric: str, b_metric: str) -> list[tuple[str, str, pl.DataFrame]]:
    """For every device with both metrics: ``a`` rows with ``b`` as of each of their times, while
    ``b`` lasts (after its last sample, e.g. a process that died, there is nothing to compare)."""
    out = []
    devices = index.catalog.filter(pl.col("metric") == a_metric).select("node", "device").unique()
    for node, device in devices.sort("node", "device", nulls_last=True).iter_rows():
        a = index.find(a_metric, node, device)
        b = index.find(b_metric, node, device)
        if a is None or b is None:
            continue
        b_rows = index.rows(b).select(pl.col("ts").alias("b_ts"), b="value")
        joined = (
            index.rows(a)
            .select("ts", a="value")
            .join_asof(
                b_rows,
                left_on="ts",
                right_on="b_ts",
                strategy="backward",
                tolerance=TOLERANCE,
            )
            .filter(pl.col("b").is_not_null() & (pl.col("ts") <= b_rows["b_ts"].max()))
        )
        out.append((a, b, joined))
    return out


SPECS = (
    (
        "device_vs_reserved",
        "device_used_bytes",
        "torch_reserved_bytes",
        "non_pytorch_bytes",
        (
            "memory outside PyTorch's cache: CUDA context, NCCL buffers, CUDA graphs, or "
            "another process on the device"
        ),
    ),
    (
        "reserved_vs_allocated",
        "torch_reserved_bytes",
        "torch_allocated_bytes",
        "allocator_slack_bytes",
        (
            "held by the caching allocator but not by live tensors (reserved is not "
            "occupied); large slack at an OOM means fragmentation"
        ),
    ),
)


def memory_reconciliations(index: SeriesIndex) -> tuple[list[Reconciliation], SeriesIndex]:
    """Device against reserved, reserved against allocated, per device; and the gap series."""
    results: list[Reconciliation] = []
    parts: dict[str, pl.DataFrame] = {}
    meta: dict[str, dict[str, object]] = {}
    for name, a_metric, b_metric, gap_metric, meaning in SPECS:
        for a, b, joined in _pair(index, a_metric, b_metric):
            gaps = joined.select("ts", gap=pl.col("a") - pl.col("b"))
            points, median, worst, worst_ts = _stats(gaps)
            text = meaning if worst is None else f"up to {format_bytes(round(worst))}: {meaning}"
            results.append(
                Reconciliation(name, a, b, "bytes", points, median, worst, worst_ts, text)  # type: ignore[arg-type]
            )
            where = index.meta(a)
            label = f"{gap_metric} gpu{where['device']} ({where['node']})"
            parts[label] = gaps.select("ts", value="gap")
            meta[label] = {
                "kind": "derived",
                "node": where["node"],
                "source": "oomtrace",
                "device": where["device"],
                "pid": None,
                "metric": gap_metric,
                "unit": "bytes",
            }
    return results, SeriesIndex(parts, meta)


POOL_SERIES = {
    "resident_requests": ("modelled resident requests", "count"),
    "stored_tokens": ("modelled stored tokens", "tokens"),
    "kv_blocks": ("modelled kv blocks", "blocks"),
    "kv_bytes": ("modelled kv bytes", "bytes"),
    "contract_bytes": ("contract kv bytes (prompt + max_tokens)", "bytes"),
}


def modelled_index(
    breakpoints: Breakpoints, has_bytes: bool, caps: dict[str, int | None] | None = None
) -> SeriesIndex:
    """The sweep's pool series, one per node and quantity (one point per breakpoint), evaluated
    when read, a node's quantities together (a day has millions of breakpoints; the findings
    keep few of them). ``caps`` (:func:`pool_caps`) hold the KV series to what the pool holds:
    where the model counts more (requests it keeps resident that the engine had preempted or
    finished), the engine's pool is the truth."""
    families: list[Family] = []
    sizes: dict[str, int] = {}
    meta: dict[str, dict[str, object]] = {}
    if breakpoints.is_empty():
        return SeriesIndex({}, {})
    columns = tuple(c for c in POOL_COLUMNS if has_bytes or c not in ("kv_bytes", "contract_bytes"))
    nodes = [node for node, _ in breakpoints.frames()]
    for node, frame in breakpoints.frames():
        labels: dict[str, str] = {}
        for column in columns:
            name, unit = POOL_SERIES[column]
            label = name if len(nodes) == 1 else f"{name} ({node})"
            labels[label] = column
            sizes[label] = frame.height
            meta[label] = {
                "kind": "modelled",
                "node": node,
                "source": "oomtrace",
                "device": None,
                "pid": None,
                "metric": f"modelled_{column}",
                "unit": unit,
            }
        families.append(Family(partial(_modelled, breakpoints, node, columns, caps or {}), labels))
    return SeriesIndex.of_families(families, sizes, meta)


def _modelled(
    breakpoints: Breakpoints, node: str, columns: tuple[str, ...], caps: dict[str, int | None]
) -> pl.DataFrame:
    def capped(column: str) -> pl.Expr:
        value = pl.col(column).cast(pl.Float64)
        cap = caps.get(column)
        return value.clip(upper_bound=float(cap)) if cap else value

    return breakpoints.evaluated(node, columns).select("ts", *[capped(c) for c in columns])
