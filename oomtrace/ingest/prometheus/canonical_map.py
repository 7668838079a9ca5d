"""Raw Prometheus samples, however they were read, to canonical rows.

Both readers (exposition text, query JSON) produce the same *raw* frame: ``ts``, ``name``,
``value`` and one String column per label in :data:`~oomtrace.ingest.prometheus.dialects.LABELS`.
:func:`to_result` maps it through the dialect table in one pass of Polars expressions:

* values that mean "nothing measured" are left out and counted: NaN (llama.cpp before the first
  decode), DCGM's blank sentinels (near 2^63, 2^47 and 2^31);
* DCGM framebuffer MiB become bytes; ``gpu`` is the device index; a MIG instance series stands
  for its GPU when it is that GPU's only memory series, and is otherwise kept as a part of its
  GPU (a ``#mig=ID`` source qualifier on the GPU's index);
* SGLang's further TP/PP ranks repeat rank 0's scheduler state: the lowest rank is kept;
* series that are independent (data-parallel ``engine``/``dp_rank``, Prometheus targets) are
  kept apart by a source qualifier (``#engine=1``) when a file holds more than one;
* where two names give one metric at one instant (vLLM 0.9.2-0.10.x exports both KV usage
  names), the newer name's row is kept;
* ``vllm:cache_config_info`` labels and start-up capacity gauges go to ``engine_config``;
  a change of DCGM's last-Xid gauge becomes an ``xid`` event.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.parser_api import ParseResult
from oomtrace.ingest.prometheus import dialects as d
from oomtrace.ingest.prometheus.frames import RAW_SAMPLES
from oomtrace.isotime import iso_time
from oomtrace.schema import METRICS, WHOLE_NUMBER_KINDS

log = logging.getLogger(__name__)

XID = "DCGM_FI_DEV_XID_ERRORS"
# DCGM "blank" sentinels: INT64 0x7ffffffffffffff0+, FP64 2^47+, INT32 0x7ffffff0+ (+0..15).
_BLANKS: Final = ((9.2e18, float("inf")), (2.0**47, 2.0**47 + 16), (0x7FFFFFF0, 0x7FFFFFFF + 1))
_WHOLE: Final = [m for m, (kind, _) in METRICS.items() if kind in WHOLE_NUMBER_KINDS]


# Timestamps oomtrace can hold: nanoseconds since 1970 as Int64 reach 2262.
MAX_MS: Final = 9_000_000_000_000


def millis_to_ts(millis: pl.Expr) -> pl.Expr:
    """Epoch milliseconds to UTC nanosecond instants; out of range (or negative) gives null."""
    nanos = pl.when(millis.is_between(0, MAX_MS)).then(millis * 1_000_000)
    return nanos.cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")


def seconds_to_ts(seconds: pl.Series) -> pl.Series:
    """Float epoch seconds (prometheus_client's and the HTTP API's form) to instants, rounded to
    the millisecond that the exposition format and Prometheus store."""
    frame = pl.DataFrame({"s": seconds.cast(pl.Float64, strict=False)})
    millis = pl.when(pl.col("s").is_between(0, MAX_MS / 1000)).then((pl.col("s") * 1000).round(0))
    return frame.select(millis_to_ts(millis.cast(pl.Int64)).alias("ts")).to_series()


@dataclass(frozen=True)
class ConfigInfo:
    """One ``vllm:cache_config_info`` sample: when it was seen and all its labels."""

    ts: datetime | None
    labels: Mapping[str, str]


def raw_frame(
    ts: pl.Series, names: list[str], values: list[float], labels: Sequence[Mapping[str, str]]
) -> pl.DataFrame:
    """The raw frame from parallel per-sample lists (what a reader holds after parsing)."""
    present: set[str] = set()
    for item in labels:
        present.update(item)
    columns: dict[str, Any] = {
        "ts": ts,
        "name": pl.Series(names, dtype=pl.String),
        "value": pl.Series(values, dtype=pl.Float64, strict=False),
    }
    for label in d.LABELS:
        column = [item.get(label) for item in labels] if label in present else None
        columns[label] = pl.Series(column, dtype=pl.String) if column else None
    frame = pl.DataFrame({k: v for k, v in columns.items() if v is not None})
    return frame.with_columns(
        pl.lit(None, pl.String).alias(label) for label in d.LABELS if label not in frame.columns
    ).select(RAW_SAMPLES.names())


def note_unmapped(
    counts: Mapping[str, int],
    example: str | None,
    diag: SourceDiagnostics,
    grouped: Iterable[str] = (),
) -> None:
    """Count samples of families outside the dialect table, naming the biggest families.

    ``counts`` is by sample name; ``_bucket`` and ``_created`` series join their family, and
    ``_sum``/``_count`` do when the family is a histogram or summary (``grouped``: names from
    ``# TYPE`` lines, or seen with buckets). A counter named ``..._count`` (TGI's
    ``tgi_request_count``) stays itself.
    """
    total = sum(counts.values())
    diag.skip("metric family not mapped to the vocabulary", total, example)
    families: Counter[str] = Counter()
    parts = {n.removesuffix("_bucket") for n in counts if n.endswith("_bucket")} | set(grouped)
    for name, count in counts.items():
        base = re.sub(r"_(?:bucket|created)$", "", name)
        stem = re.sub(r"_(?:sum|count)$", "", base)
        families[stem if stem in parts else base] += count
    if families:
        names = sorted(families, key=lambda n: (-families[n], n))
        shown = ", ".join(f"{n} ({families[n]:,})" for n in names[:8])
        more = f" and {len(names) - 8} more" if len(names) > 8 else ""
        diag.note(f"{len(names)} metric families not mapped: {shown}{more}", lost=True)


def to_result(
    raw: pl.DataFrame, configs: Sequence[ConfigInfo], diag: SourceDiagnostics
) -> ParseResult:
    """Map raw samples of known families to canonical samples, events and engine config."""
    check_frame(raw, RAW_SAMPLES, "Prometheus raw samples")
    result = ParseResult()
    table = pl.DataFrame(
        [(s.name, s.engine, s.metric, s.scale, s.priority, s.reason) for s in d.SERIES],
        schema=["name", "dialect", "metric", "scale", "priority", "need_reason"],
        orient="row",
    )
    joined = raw.join(table, on="name", how="inner")
    applies = pl.col("metric").is_not_null() & (
        pl.col("need_reason").is_null() | (pl.col("reason") == pl.col("need_reason"))
    )
    _note_known_unmapped(joined.filter(~applies), diag)
    result.events = _xid_events(joined.filter(pl.col("name") == XID), diag)
    mapped = _measured(joined.filter(applies), diag)
    mapped = _replicas(_mig(mapped, diag), diag)
    result.host = _host(mapped, diag)
    result.device_index = _device_index(mapped)
    result.samples = _dedupe(_canonical(mapped, diag), diag)
    result.engine = _engine(raw, diag)
    result.engine_config = {**_config_gauges(mapped), **_cache_config(configs, diag)}
    return result


def _skip(diag: SourceDiagnostics, reason: str, count: int, example: str | None) -> None:
    """Samples the readers counted as recognised (one per line or point) but left out here."""
    diag.skip(reason, count, example)
    diag.lines_recognised -= max(count, 0)


def _example(frame: pl.DataFrame) -> str | None:
    if not frame.height:
        return None
    row = frame.row(0, named=True)
    return f"{row['name']} {row['value']}"


def _note_known_unmapped(frame: pl.DataFrame, diag: SourceDiagnostics) -> None:
    frame = frame.filter(pl.col("name") != XID)
    _skip(diag, "known family with no canonical metric", frame.height, _example(frame))
    for name in frame["name"].unique().sort():
        for series in d.BY_NAME[name]:
            if series.metric is None:
                diag.note(f"{name}: {series.why}; not mapped", lost=True)
            elif series.reason is not None:
                diag.note(f"{name}: only reason={series.reason} is mapped")


def _is_blank(value: pl.Expr) -> pl.Expr:
    return pl.any_horizontal(value.is_between(lo, hi, closed="left") for lo, hi in _BLANKS)


def _measured(frame: pl.DataFrame, diag: SourceDiagnostics) -> pl.DataFrame:
    nan = frame.filter(~pl.col("value").is_finite())
    _skip(diag, "NaN or infinite value (nothing measured yet)", nan.height, _example(nan))
    frame = frame.filter(pl.col("value").is_finite())
    blank = (pl.col("dialect") == "dcgm") & _is_blank(pl.col("value"))
    blanks = frame.filter(blank)
    _skip(diag, "DCGM blank value (the field has no data)", blanks.height, _example(blanks))
    return frame.filter(~blank)


def _mig(frame: pl.DataFrame, diag: SourceDiagnostics) -> pl.DataFrame:
    """A MIG instance's memory stands for its GPU only if nothing else describes that GPU; where
    the GPU has a series of its own or several instances, each instance is kept as a part of it
    (``_mig``: its GPU instance id, a ``mig=`` source qualifier on the GPU's index)."""
    mig = pl.col("GPU_I_ID").is_not_null()
    if not frame.select(mig.any()).item():
        return frame.with_columns(_mig=pl.lit(None, pl.String))
    group = ["gpu", "metric"]
    frame = frame.with_columns(
        whole=(~mig).any().over(group),
        instances=pl.col("GPU_I_ID").drop_nulls().n_unique().over(group),
    )
    part = mig & (pl.col("whole") | (pl.col("instances") > 1))
    parts = frame.filter(part).select("gpu", "GPU_I_ID").unique().height
    if parts:
        diag.note(
            f"{parts} MIG instance(s) kept as parts of their GPU (a #mig=ID source qualifier on "
            "the GPU's index): the GPU has a series of its own or several instances"
        )
    kept = frame.filter(mig & ~part).select("gpu", "GPU_I_ID", "GPU_I_PROFILE").unique().sort("gpu")
    for gpu, instance, profile in kept.iter_rows():
        diag.note(f"GPU {gpu}: its only MIG instance {instance} ({profile}) stands for the device")
    return frame.with_columns(_mig=pl.when(part).then(pl.col("GPU_I_ID"))).drop(
        "whole", "instances"
    )


def _replicas(frame: pl.DataFrame, diag: SourceDiagnostics) -> pl.DataFrame:
    """Keep the lowest TP/PP rank: further ranks repeat the same scheduler's state."""
    for label in d.REPLICA_LABELS:
        rank = pl.col(label).cast(pl.Int64, strict=False)
        keep = rank.is_null() | (rank == rank.min().over(["name", *d.QUALIFIER_LABELS]))
        extra = frame.filter(~keep)
        if extra.height:
            _skip(
                diag, f"series of a further {label} (repeats the lowest rank)", extra.height, None
            )
            diag.note(f"series were reported per {label}; kept the lowest rank's")
        frame = frame.filter(keep)
    return frame


def _host(frame: pl.DataFrame, diag: SourceDiagnostics) -> str | None:
    hosts = frame.select(pl.coalesce(*d.HOST_LABELS).drop_nulls().unique().sort())
    if hosts.height == 1:
        return str(hosts.item())
    if hosts.height > 1:
        diag.note(
            f"{hosts.height} hosts ({', '.join(hosts.to_series().head(4))}); their series are "
            "kept apart by a #host= source qualifier; ingest one host per trace to compare nodes"
        )
    return None


def _device_index(frame: pl.DataFrame) -> dict[str, int]:
    index: dict[str, int] = {}
    gpu = pl.col(d.DEVICE_LABEL).cast(pl.Int32, strict=False)
    for label in d.DEVICE_REF_LABELS:
        pairs = frame.select(ref=pl.col(label), gpu=gpu).drop_nulls().unique()
        pairs = pairs.filter(~pl.col("ref").is_duplicated())
        index.update(zip(pairs["ref"].to_list(), pairs["gpu"].to_list(), strict=True))
    return index


def _canonical(frame: pl.DataFrame, diag: SourceDiagnostics) -> pl.DataFrame:
    frame = frame.with_columns(_host=pl.coalesce(*d.HOST_LABELS))
    labels = [*d.QUALIFIER_LABELS, "_host"]
    parts: list[pl.Expr] = [
        pl.when(pl.col(lab).drop_nulls().n_unique().over("dialect") > 1).then(
            pl.lit(f"{lab.lstrip('_')}=") + pl.col(lab)
        )
        for lab in labels
    ]
    parts.append(pl.lit("mig=") + pl.col("_mig"))
    value = pl.col("value") * pl.col("scale")
    whole = pl.col("metric").is_in(_WHOLE)
    frame = frame.with_columns(
        source=pl.concat_str(parts, separator=",", ignore_nulls=True).replace("", None),
        value=pl.when(whole).then(value.round(0)).otherwise(value),
        fraction=whole & (value != value.round(0)),
    )
    fractions = int(frame["fraction"].sum())
    if fractions:
        diag.note(
            f"{fractions:,} value(s) of whole-number metrics had a fraction (an averaged query?); "
            "rounded to whole numbers"
        )
    qualified = frame["source"].drop_nulls().unique().sort()
    if qualified.len():
        diag.note(
            f"independent series kept apart by source qualifier: {', '.join(qualified.head(6))}"
            + (" ..." if qualified.len() > 6 else "")
        )
    device = pl.col(d.DEVICE_LABEL).cast(pl.Int32, strict=False)
    return frame.select(
        "ts",
        device.alias("device"),
        pl.when(device.is_null()).then(pl.coalesce(*d.DEVICE_REF_LABELS)).alias("device_ref"),
        pl.col(d.PID_LABEL).cast(pl.Int64, strict=False).alias("pid"),
        "metric",
        "value",
        "source",
        "priority",
    )


def _dedupe(frame: pl.DataFrame, diag: SourceDiagnostics) -> pl.DataFrame:
    key = ["ts", "device", "device_ref", "pid", "source", "metric"]
    kept = frame.sort("priority", maintain_order=True).unique(
        key, keep="first", maintain_order=True
    )
    gone = frame.height - kept.height
    example = None
    if gone:
        twice = frame.filter(pl.struct(key).is_duplicated()).row(0, named=True)
        example = f"{twice['metric']} at {twice['ts']}"
    _skip(diag, "same series and instant given twice (e.g. old and new vLLM name)", gone, example)
    kept = kept.sort("ts", maintain_order=True).drop("priority")
    for optional in ("device_ref", "source"):
        if kept[optional].null_count() == kept.height:
            kept = kept.drop(optional)
    return kept


def _engine(raw: pl.DataFrame, diag: SourceDiagnostics) -> dict[str, Any]:
    names = set(raw["name"].unique().to_list())
    found: list[dict[str, Any]] = []
    for engine in d.ENGINES:
        if not any(d.BY_NAME[n][0].engine == engine for n in names if n in d.BY_NAME):
            continue
        entry: dict[str, Any] = {"name": engine}
        for fam in d.FAMILIES:
            if fam.engine == engine and set(fam.present) <= names and not set(fam.absent) & names:
                entry["metrics_family"] = fam.label
                break
        found.append(entry)
    if len(found) > 1:
        diag.note(f"metrics of several engines: {', '.join(e['name'] for e in found)}")
    return found[0] if found else {}


def _config_gauges(frame: pl.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, key in d.CONFIG_GAUGES.items():
        values = frame.filter(pl.col("name") == name).sort("ts")["value"]
        if values.len():
            out[key] = round(values[0])
    return out


def _cache_config(configs: Sequence[ConfigInfo], diag: SourceDiagnostics) -> dict[str, Any]:
    """engine_config from cache_config_info: the first one seen; later changes are noted."""
    ordered = sorted(configs, key=lambda c: (c.ts is None, c.ts or datetime.min))
    seen: list[dict[str, Any]] = []
    for info in ordered:
        config = _convert(info.labels, diag)
        if seen and config != seen[0] and config not in seen:
            changed = sorted(
                k for k in config.keys() | seen[0].keys() if config.get(k) != seen[0].get(k)
            )
            when = iso_time(info.ts, 3) if info.ts else "an unknown time"
            diag.note(
                f"{d.CACHE_CONFIG_INFO} differs at {when} ({', '.join(changed)}: "
                + ", ".join(f"{seen[0].get(k)!r} -> {config.get(k)!r}" for k in changed[:3])
                + "); engine_config keeps the first"
            )
        if config not in seen:
            seen.append(config)
    return seen[0] if seen else {}


def _convert(labels: Mapping[str, str], diag: SourceDiagnostics) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, (key, kind) in d.CACHE_CONFIG_KEYS.items():
        text = labels.get(label)
        if text is None or text in {"None", ""}:
            continue
        try:
            out[key] = (
                (text == "True") if kind is bool else kind(float(text) if kind is int else text)
            )
        except (ValueError, OverflowError):  # "inf" is a float no integer holds
            diag.note(
                f"{d.CACHE_CONFIG_INFO}: {label}={text!r} is not a {kind.__name__}; left out",
                lost=True,
            )
    return out


def _xid_events(frame: pl.DataFrame, diag: SourceDiagnostics) -> pl.DataFrame | None:
    """DCGM's XID gauge holds the last Xid seen: each change to a non-zero value is an event."""
    frame = frame.filter(pl.col("value").is_finite() & ~_is_blank(pl.col("value")))
    if not frame.height:
        return None
    device = pl.col(d.DEVICE_LABEL).cast(pl.Int32, strict=False)
    frame = frame.with_columns(device=device).sort("ts", maintain_order=True)
    previous = pl.col("value").shift(1).over("device")
    changed = frame.filter((pl.col("value") != previous) & (pl.col("value") != 0))
    initial = frame.filter(previous.is_null() & (pl.col("value") != 0))
    if initial.height:
        diag.note(
            f"an Xid ({int(initial['value'][0])}) was already reported at the first sample of "
            f"{initial.height} GPU series; it happened before the capture"
        )
    return changed.select(
        "ts",
        "device",
        kind=pl.lit("xid"),
        detail=pl.format("Xid {}", pl.col("value").cast(pl.Int64)),
    )
