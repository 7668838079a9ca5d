"""The frames behind each class's cause chart (:mod:`oomtrace.report.cause_charts`), made from
the findings and the samples the report read.

Figures come from the analysis where it states them: the matched check's ``figures`` (what the
class was decided on: headroom, the bytes a start-up needed, the process that held memory), the
evidence rows it cites (the OOM event with its requested, free and total bytes), the culprits'
estimated step bytes. Only what a chart needs to draw between those figures (the culprits'
share of the KV in use at each moment, a trend line through idle levels) is computed here,
and the chart says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

import polars as pl

from oomtrace.schema import EVENT_PHASES, TS
from oomtrace.units import format_bytes

USE_SCHEMA: Final = pl.Schema({"ts": TS, "part": pl.String(), "value": pl.Float64()})
CULPRITS_PART: Final = "held by the culprits"
REST_PART: Final = "the rest in use"


def check_figures(incident: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of the check that decided the incident's class (empty when none stated)."""
    for check in incident.get("checks") or []:
        if isinstance(check, Mapping) and check.get("class") == incident.get("class"):
            figures = check.get("figures")
            if isinstance(figures, Mapping) and check.get("matched", True):
                return dict(figures)
    return {}


def event_values(incident: Mapping[str, Any], kinds: tuple[str, ...]) -> dict[str, Any]:
    """The values of the first evidence row that is an event of one of ``kinds`` (the OOM the
    incident is anchored on, the start-up refusal)."""
    for row in incident.get("evidence") or []:
        if not isinstance(row, Mapping) or row.get("table") != "events":
            continue
        values = row.get("values")
        if isinstance(values, Mapping) and values.get("kind") in kinds:
            return {**values, "ts": row.get("ts")}
    return {}


def number(*candidates: Any) -> int | None:
    """The first candidate that is a number, as an integer (bytes, tokens)."""
    for value in candidates:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None


# -- KV exhaustion -------------------------------------------------------------------------------


def culprits_kv(lanes: pl.DataFrame, stamps: pl.Series) -> pl.DataFrame:
    """The KV the culprits held at each of ``stamps`` (``ts, value``): the sum, over the
    culprits' resident intervals that contain the moment, of the interval's bytes, grown
    linearly from its first to its last stored token count. Culprits are few (``--top``), so
    the frame is stamps x culprit intervals at most."""
    held = lanes.filter(pl.col("culprit_rank").is_not_null()).select(
        "start",
        "end",
        pl.col("start_tokens").fill_null(pl.col("stored_tokens")).cast(pl.Float64).alias("t0"),
        pl.col("stored_tokens").cast(pl.Float64).alias("t1"),
        pl.col("kv_bytes").cast(pl.Float64).alias("b1"),
    )
    moments = pl.DataFrame({"ts": stamps.cast(TS)}).unique().sort("ts")
    if held.is_empty() or moments.is_empty():
        return moments.with_columns(pl.lit(0.0).alias("value"))
    length = (pl.col("end") - pl.col("start")).dt.total_nanoseconds().cast(pl.Float64)
    done = pl.when(length > 0).then(
        (pl.col("ts") - pl.col("start")).dt.total_nanoseconds().cast(pl.Float64) / length
    )
    tokens = pl.col("t0") + (pl.col("t1") - pl.col("t0")) * done.otherwise(1.0)
    per_token = pl.when(pl.col("t1") > 0).then(pl.col("b1") / pl.col("t1")).otherwise(0.0)
    # the findings state times to the microsecond, the samples to the nanosecond: a reading
    # 133 ns after an interval's stated end (the fill itself) is still inside it
    inside = moments.join(held, how="cross").filter(
        pl.col("ts").dt.truncate("1us").is_between(pl.col("start"), pl.col("end"))
    )
    sums = inside.group_by("ts").agg((tokens * per_token).sum().alias("value"))
    return moments.join(sums, on="ts", how="left").with_columns(pl.col("value").fill_null(0.0))


def kv_use(observed: pl.DataFrame, lanes: pl.DataFrame | None) -> pl.DataFrame:
    """The KV in use split in two (``ts, part, value``): what the culprits held and the rest,
    at each observation of the pool (``observed``: ``ts, value``, one source). The culprits'
    part never exceeds what was observed (their residency is an upper bound where the inputs
    do not state scheduling)."""
    if observed.is_empty():
        return pl.DataFrame(schema=USE_SCHEMA)
    if lanes is None or lanes.is_empty():
        held = observed.select("ts", pl.lit(0.0).alias("value"))
    else:
        held = culprits_kv(lanes, observed["ts"])
    both = observed.join(held.rename({"value": "held"}), on="ts", how="left").with_columns(
        pl.min_horizontal(pl.col("held").fill_null(0.0), pl.col("value")).alias("held")
    )
    parts = [
        both.select("ts", pl.lit(CULPRITS_PART).alias("part"), pl.col("held").alias("value")),
        both.select(
            "ts", pl.lit(REST_PART).alias("part"), (pl.col("value") - pl.col("held")).alias("value")
        ),
    ]
    return pl.concat(parts).cast(USE_SCHEMA).sort("part", "ts")


def preemptions(
    events: pl.DataFrame, requests: pl.DataFrame, low: datetime, high: datetime
) -> pl.DataFrame:
    """Preemptions between ``low`` and ``high``: ``ts, detail``. From the events (a log's
    count per stats interval, a retraction) and, where a source names them, from the requests
    preempted (``ts, request_id``), one mark per request."""
    counted = events.filter(
        (pl.col("kind") == "preemption") & pl.col("ts").is_between(low, high)
    ).select("ts", pl.col("detail").fill_null(""))
    named = requests.filter(pl.col("ts").is_between(low, high)).select(
        "ts", pl.format("request {} preempted", pl.col("request_id")).alias("detail")
    )
    return pl.concat([counted, named]).sort("ts", "detail")


# -- transient peak and fragmentation ----------------------------------------------------------

BAR_SCHEMA: Final = pl.Schema(
    {
        "row": pl.String(),
        "part": pl.String(),
        "value": pl.Float64(),
        "order": pl.Int64(),
        "note": pl.String(),
    }
)
FAILED_ROW: Final = "allocation that failed"
HEADROOM_ROW: Final = "headroom at the failure"


def allocation_bars(
    incident: Mapping[str, Any], label_of: dict[str, str]
) -> tuple[pl.DataFrame, int | None, dict[str, int | None]]:
    """Bars for the failed allocation, the headroom (free on the device, and the allocator's
    reserved-but-unallocated slack beside it) and every culprit the analysis estimated a step
    for (``label_of``: request id -> lane label). Returns the bars, the headroom and the
    figures the caption states (``requested``, ``free``, ``slack``, ``total``, ``in_use``)."""
    figures = check_figures(incident)
    oom = event_values(incident, ("oom",))
    requested = number(figures.get("requested_bytes"), oom.get("requested_bytes"))
    total = number(oom.get("total_bytes"), incident.get("capacity_bytes"))
    # the transient check's room; for fragmentation (no room figure) the OOM event's free bytes
    free = number(figures.get("room_bytes"), oom.get("free_bytes"))
    in_use = number(incident.get("observed_bytes"), incident.get("peak_bytes"))
    if free is None and total is not None and in_use is not None:
        free = max(total - in_use, 0)
    slack = number(figures.get("slack_bytes"), oom.get("reserved_unallocated_bytes"))
    rows: list[tuple[str, str, float, int, str]] = []
    if requested is not None:
        rows.append((FAILED_ROW, "allocation that failed", float(requested), 0, "the OOM event"))
    if free is not None:
        rows.append((HEADROOM_ROW, "free on the device", float(free), 0, "the OOM event"))
    if slack:
        rows.append(
            (
                HEADROOM_ROW,
                "reserved but unallocated (allocator slack)",
                float(slack),
                1,
                "the OOM event: cached by PyTorch, not in one piece",
            )
        )
    per_token = number(figures.get("step_bytes_per_token"))
    for culprit in incident.get("culprits") or []:
        step, note = step_estimate(culprit, per_token)
        if step is None:
            continue
        rid = str(culprit.get("request_id"))
        label = label_of.get(rid, rid)
        rows.append((label, "estimated for this request's step", float(step), 0, note))
    frame = pl.DataFrame(rows, schema=BAR_SCHEMA, orient="row")
    stated = {
        "requested": requested,
        "free": free,
        "slack": slack,
        "total": total,
        "in_use": in_use,
    }
    return frame, free, stated


def step_estimate(culprit: Mapping[str, Any], per_token: int | None) -> tuple[int | None, str]:
    """The bytes the analysis estimates a request's step needed, and what the estimate rests
    on: its own ``step_bytes`` (with the model's widths); else, for the request whose parameter
    made the step large (``step_parameter``), its step tokens times the bytes per token the
    transient check measured (``step_bytes_per_token``)."""
    parameter = culprit.get("step_parameter")
    tokens = number(culprit.get("step_tokens"))
    stated = number(culprit.get("step_bytes"))
    if stated is not None:
        what = f"{parameter}, " if parameter else ""
        return stated, f"{what}{tokens:,} tokens in the step" if tokens else str(parameter or "")
    if parameter and tokens and per_token:
        note = f"{parameter}: {tokens:,} tokens in the step x {format_bytes(per_token)} per token"
        return tokens * per_token, note
    return None, ""


# -- leak ----------------------------------------------------------------------------------------


def idle_levels(
    level: pl.DataFrame,
    running: pl.DataFrame,
    settled: float | None = None,
    until: datetime | None = None,
) -> pl.DataFrame:
    """The memory level at moments with no request running (``ts, value``): ``level`` joined
    to the running count in force at each moment; with ``settled`` (the first idle level the
    analysis measured), only from the first moment the level reached it (the engine loading
    its weights serves no request either, and is no leak); with ``until`` (the peak), none
    after it (a dead engine serves nothing and holds nothing)."""
    if level.is_empty() or running.is_empty():
        return pl.DataFrame(schema={"ts": TS, "value": pl.Float64()})
    count = running.sort("ts").select("ts", pl.col("value").alias("running"))
    joined = level.sort("ts").join_asof(count, on="ts", strategy="backward")
    idle = joined.filter(pl.col("running") == 0).select("ts", "value")
    if until is not None:
        idle = idle.filter(pl.col("ts") <= until)
    if settled:
        # the analysis' level is read from a sampled series: allow for a sample's rounding
        loaded = idle.filter(pl.col("value") >= 0.99 * settled)["ts"].min()
        idle = idle.filter(pl.col("ts") >= loaded) if loaded is not None else idle
    return idle


def leak_range(
    level: pl.DataFrame, idle: pl.DataFrame, line: pl.DataFrame, limit: int | None
) -> tuple[float, float]:
    """The bytes a leak chart spans: from a little below the idle levels (half the distance
    from them to the top again) to the device's total. From zero, a 3.6 GiB rise under an
    80 GiB device is a flat line at the top; the start-up ramp below is cut off instead."""
    values = pl.concat([idle["value"], line["value"]]) if idle.height else level["value"]
    highest = level["value"].max() if level.height else None
    top = max(float(limit or 0), highest if isinstance(highest, int | float) else 0.0)
    if values.is_empty():
        return 0.0, top * 1.01
    base = float(values.min())  # type: ignore[arg-type]
    return max(0.0, base - 0.5 * (top - base)), top * 1.01


def trend(points: pl.DataFrame, low: datetime, high: datetime) -> pl.DataFrame:
    """The least-squares line through ``points`` (``ts, value``), drawn from ``low`` to
    ``high`` as two points (empty when fewer than two points)."""
    if points.height < 2:
        return pl.DataFrame(schema={"ts": TS, "value": pl.Float64()})
    x = (pl.col("ts") - pl.col("ts").min()).dt.total_nanoseconds().cast(pl.Float64) / 1e9
    fit = points.select(
        pl.cov(x, pl.col("value")).alias("cov"),
        x.var().alias("var"),
        x.mean().alias("mx"),
        pl.col("value").mean().alias("my"),
        pl.col("ts").min().alias("t0"),
    ).row(0, named=True)
    if not fit["var"]:
        return pl.DataFrame(schema={"ts": TS, "value": pl.Float64()})
    slope = fit["cov"] / fit["var"]
    at = [low, high]
    values = [fit["my"] + slope * ((t - fit["t0"]).total_seconds() - fit["mx"]) for t in at]
    return pl.DataFrame({"ts": at, "value": values}, schema={"ts": TS, "value": pl.Float64()})


# -- start-up misfit -----------------------------------------------------------------------------

FIT_SCHEMA: Final = pl.Schema(
    {"bar": pl.String(), "part": pl.String(), "value": pl.Float64(), "order": pl.Int64()}
)
LIMIT_SCHEMA: Final = pl.Schema(
    {"label": pl.String(), "value": pl.Float64(), "dashed": pl.Boolean()}
)


def refusal_values(incident: Mapping[str, Any]) -> dict[str, Any]:
    """The start-up refusal the incident is anchored on (evidence), with the check's figures
    over it."""
    values = event_values(incident, ("startup_kv_insufficient", "startup_no_kv_memory"))
    return {**values, **check_figures(incident)}


def fit_bars(
    values: Mapping[str, Any],
    config: Mapping[str, Any],
    total: int | None,
    remedies: list[Mapping[str, Any]],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Weights, reserve and KV cache as configured, and with the setting that fits (the first
    remedy that sets ``--max-model-len``; else the KV memory the engine had), against the
    device and the engine's share of it. Returns the bars and the limits."""
    needed = number(values.get("kv_needed_bytes"), values.get("requested_bytes"))
    available = number(values.get("kv_available_bytes"), values.get("free_bytes"))
    max_len = number(values.get("max_model_len"), config.get("max_model_len"))
    weights = number(config.get("model_weights_bytes"))
    total = number(values.get("device_total_bytes"), total)
    share = config.get("gpu_memory_utilization")
    budget = int(total * float(share)) if total and isinstance(share, int | float) else None
    reserve = None
    if budget is not None and weights is not None and available is not None:
        reserve = budget - weights - available if budget >= weights + available else None
    fits_len, fits_kv = None, available
    for remedy in remedies:
        if remedy.get("setting") in ("--max-model-len", "--context-length") and remedy.get("value"):
            fits_len = number(_int(remedy["value"]))
            if fits_len and needed and max_len:
                fits_kv = needed * fits_len // max_len
            break
    configured = f"as configured (max_model_len {max_len:,})" if max_len else "as configured"
    fitted = (
        f"with --max-model-len {fits_len:,}" if fits_len else "with the KV cache the engine had"
    )
    rows: list[tuple[str, str, float, int]] = []
    for bar, kv in ((configured, needed), (fitted, fits_kv)):
        for order, (part, value) in enumerate(
            (("model weights", weights), ("runtime reserve", reserve), ("KV cache", kv))
        ):
            if value is not None:
                rows.append((bar, part, float(value), order))
    limits: list[tuple[str, float, bool]] = []
    if total is not None:
        limits.append((f"device {_size(total)}", float(total), False))
    if budget is not None and isinstance(share, int | float):
        limits.append((f"engine's share ({share:.0%}) {_size(budget)}", float(budget), True))
    return (
        pl.DataFrame(rows, schema=FIT_SCHEMA, orient="row"),
        pl.DataFrame(limits, schema=LIMIT_SCHEMA, orient="row"),
    )


def phase_bars(values: Mapping[str, Any], total: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A start-up OOM whose lines state its phase (loading the weights, the profiling run): what
    was held when it failed and what the phase asked for, against the device. Its figures are
    the allocation's, not weights, reserve and KV cache, so they are not drawn as those."""
    requested = number(values.get("requested_bytes"))
    free = number(values.get("free_bytes"))
    total = number(values.get("device_total_bytes"), total)
    held = total - free if total is not None and free is not None else None
    parts = (("held when it failed", held), ("the allocation that failed", requested))
    bar = "at the failure"
    rows = [(bar, part, float(v), i) for i, (part, v) in enumerate(parts) if v is not None]
    limits = [(f"device {_size(total)}", float(total), False)] if total is not None else []
    return (
        pl.DataFrame(rows, schema=FIT_SCHEMA, orient="row"),
        pl.DataFrame(limits, schema=LIMIT_SCHEMA, orient="row"),
    )


def phase_text(values: Mapping[str, Any], bars: pl.DataFrame, limits: pl.DataFrame) -> str:
    """The words beside :func:`phase_bars`' chart."""
    during = EVENT_PHASES.get(str(values.get("phase")), "the start-up")
    parts = "; ".join(f"{part}: {format_bytes(int(v))}" for part, v in bars["part", "value"].rows())
    if limits.is_empty():
        return f"What {during} asked for: {parts}; the inputs do not state the device's size."
    return f"What {during} asked for, against the device: {parts} ({limits.item(0, 'label')})."


def _int(text: Any) -> int | None:
    try:
        return int(str(text).replace(",", ""))
    except ValueError:
        return None


def _size(value: int) -> str:
    return format_bytes(value)
