"""Every input's parse result of one incident merged into one trace.

Each table is conformed to the canonical schema, rows are labelled with the node and the source
they came from, GPUs named only by UUID or bus id are placed on the device index another input
states (or, where the incident's device-memory series show a single GPU, on that one: a node with
one GPU has no other), and the manifest gathers what each source says about the engine, the model
and its clock (the first statement of a key wins; a different later one is a note). This is the one
guard against values no measurement can hold, whatever parser read them: a row's or a statement's
value out of range is left out and counted for its source.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Final, cast

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ClockOptions, ParseResult
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.isotime import iso_time
from oomtrace.schema import CLOCK, OUT_OF_RANGE, TABLES, TableName, conform_within_range
from oomtrace.trace import Manifest, Trace
from oomtrace.units import MAX_BYTES

# One input's contribution: the file, what its parser returned, and its diagnostics.
Parsed = tuple[InputFile, ParseResult, SourceDiagnostics]
# Keys of a source's clock record that alignment wrote about that source alone (see
# oomtrace.ingest.alignment): the trace-level record keeps the parsers' statements only.
ALIGNMENT_KEYS: Final = frozenset(
    {
        "status", "aligned_with", "agreement", "score", "runner_up", "evidence", "reason",
        "remedy", "anchors", "untimed_rows", "utc_offset",
    }
)  # fmt: skip


def merge(
    results: list[Parsed],
    skipped: list[SourceDiagnostics],
    node: str | None,
    clock: ClockOptions,
) -> Trace:
    """One trace from the parsed inputs; ``skipped`` are the diagnostics of inputs no parser
    read; ``node`` labels every row (default: from the inputs)."""
    node = node or _default_node([(source, r) for source, r, _ in results])
    manifest = Manifest(nodes=[node])
    frames: dict[TableName, list[pl.DataFrame]] = {t: [] for t in TABLES}
    devices = _device_index(results)
    only = _only_device(results, devices)
    for input_file, result, diag in results:
        diag.node = node
        source = f"{diag.parser}:{input_file.name}"
        conformed: list[pl.DataFrame] = []
        for table in TABLES:
            frame = getattr(result, table)
            if frame is None or frame.height == 0:
                diag.rows[table] = 0
                continue
            frame = _place_devices(frame, devices, diag, only)
            frame = frame.with_columns(node=pl.lit(node), source=_source(frame, source))
            if "clock" not in frame.columns:
                # One clock for the whole input (alignment set it); an input without times
                # comes with one per row (anchored or un-timed).
                status = result.clock.get("status") or "stated"
                frame = frame.with_columns(clock=pl.lit(status, CLOCK))
            frame, left_out = conform_within_range(table, frame, what=input_file.name)
            diag.skip(OUT_OF_RANGE, left_out.count, left_out.example)
            diag.rows[table] = frame.height
            frames[table].append(frame)
            conformed.append(frame)
        _time_range(diag, conformed)
        _merge_dict(manifest.engine, result.engine, "engine", diag)
        _merge_dict(manifest.model, result.model, "model", diag)
        _merge_dict(manifest.engine_config, result.engine_config, "engine_config", diag)
        diag.clock = source_clock(result.clock, clock)
        # Sources may each place time their own way: the per-source record says how; the
        # trace-level one keeps the first statement of each key without calling that a conflict.
        for key, value in result.clock.items():
            if value is not None and key not in ALIGNMENT_KEYS:
                manifest.clock.setdefault(key, value)
        manifest.sources.append(diag)
    for diag in skipped:
        diag.node = node
        manifest.sources.append(diag)
    tables = {t: _in_time_order(pl.concat(frames[t])) if frames[t] else None for t in TABLES}
    trace = Trace(manifest=manifest)
    for table, frame in tables.items():
        if frame is not None:
            setattr(trace, table, frame)
    return trace


def _in_time_order(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` sorted by ``ts``, ties in their order, un-timed rows last in their input's
    order (one log's rows mostly come sorted: the check costs a fraction of the sort)."""
    ts = frame.get_column("ts")
    if not ts.has_nulls() and ts.is_sorted():
        return frame
    return frame.sort("ts", maintain_order=True, nulls_last=True)


def device_ref_key(ref: str) -> str:
    """The form GPU identifiers are compared in: upper case, PCI domains widened to the 8 digits
    nvidia-smi, NVML and DCGM print (sysfs and lspci print 4)."""
    key = ref.strip().upper()
    return "0000" + key if _SHORT_PCI.match(key) else key


_SHORT_PCI = re.compile(r"^[0-9A-F]{4}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]$")


def _device_index(results: list[Parsed]) -> dict[str, int]:
    found: dict[str, int] = {}
    for _, result, diag in results:
        for ref, index in result.device_index.items():
            key = device_ref_key(ref)
            if found.get(key, index) != index:
                diag.note(f"GPU {ref} is device {index} here but {found[key]} elsewhere; kept it")
                continue
            found[key] = index
    return found


# Metrics whose series enumerate a node's GPUs (one series per GPU, whatever runs on it).
_DEVICE_METRICS: Final = ("device_total_bytes", "device_used_bytes", "device_free_bytes")


def _only_device(results: list[Parsed], devices: dict[str, int]) -> int | None:
    """The device index, if the incident's GPU listings (device-memory series, identifiers tied
    to indexes) show exactly one GPU."""
    seen = set(devices.values())
    for _, result, _ in results:
        frame = result.samples
        if frame is None or not {"device", "metric"} <= set(frame.columns):
            continue
        listed = frame.filter(pl.col("metric").is_in(_DEVICE_METRICS))["device"].drop_nulls()
        seen.update(int(d) for d in listed.unique().to_list())
    return next(iter(seen)) if len(seen) == 1 else None


def _ref_kind(ref: str) -> str:
    return "pci" if ":" in ref and not ref.upper().startswith(("GPU-", "MIG-")) else "uuid"


def _place_devices(
    frame: pl.DataFrame, devices: dict[str, int], diag: SourceDiagnostics, only: int | None
) -> pl.DataFrame:
    """Resolve a ``device_ref`` column (GPU UUID or bus id) to the device index another input
    of the incident states; where none does but the incident shows a single GPU (``only``), a
    single unplaced GPU is that one, unless an identifier of the same kind (UUID, bus id) is
    known for it and differs; rows still unplaced keep a null device, with a note."""
    if "device_ref" not in frame.columns:
        return frame
    key = pl.col("device_ref").str.strip_chars().str.to_uppercase()
    key = pl.when(key.str.contains(_SHORT_PCI.pattern)).then(pl.lit("0000") + key).otherwise(key)
    placed = key.replace_strict(devices, default=None, return_dtype=pl.Int32)
    if "device" in frame.columns:
        placed = pl.coalesce(pl.col("device").cast(pl.Int32), placed)
    frame = frame.with_columns(device=placed)
    unplaced = pl.col("device").is_null() & pl.col("device_ref").is_not_null()
    refs = frame.filter(unplaced)["device_ref"].unique()
    known = {_ref_kind(ref) for ref, index in devices.items() if index == only}
    if only is not None and refs.len() == 1 and _ref_kind(refs[0]) not in known:
        frame = frame.with_columns(
            device=pl.when(unplaced).then(pl.lit(only, pl.Int32)).otherwise(pl.col("device"))
        )
        diag.note(
            f"GPU {refs[0]} is taken for device {only}: no input ties it to an index, and the "
            f"incident's GPU listings show device {only} alone (a node with one GPU)"
        )
    lost = frame.filter(pl.col("device").is_null() & pl.col("device_ref").is_not_null())
    if lost.height:
        refs = lost["device_ref"].unique().sort()
        diag.note(
            f"{lost.height:,} row(s) name their GPU only as {', '.join(refs.head(3))}"
            f"{' ...' if refs.len() > 3 else ''}, which no input of this incident ties to a device "
            "index; their device is unknown (add an `nvidia-smi --query-gpu=index,uuid,pci.bus_id "
            "--format=csv` capture)",
            lost=True,
        )
    return frame.drop("device_ref")


def _source(frame: pl.DataFrame, base: str) -> pl.Expr:
    if "source" not in frame.columns:
        return pl.lit(base)
    qualified = pl.concat_str(pl.lit(base + "#"), pl.col("source"))
    return pl.when(pl.col("source").is_null()).then(pl.lit(base)).otherwise(qualified)


def _default_node(items: list[tuple[InputFile, ParseResult]]) -> str:
    for _, result in items:
        if result.host:
            return result.host
    parents = {s.path.resolve().parent.name for s, _ in items}
    # several inputs, or one series of files (named with a ``*``): their folder names the node
    several = len(items) > 1 or "*" in Path(items[0][0].name).name
    if several and len(parents) == 1 and next(iter(parents)):
        return next(iter(parents))
    return Path(items[0][0].name.removesuffix(".gz")).stem or "node"


def source_clock(clock: Mapping[str, Any], options: ClockOptions) -> dict[str, Any]:
    """One source's clock record in one vocabulary, whichever form its parser stated it in:
    ``tz_source`` is ``option`` (``--tz``), ``default`` (no zone anywhere: read as UTC) or what
    stated the times (``kubectl/docker timestamps``, ...); ``tz_assumed`` is true only for
    ``default``. ``year_source`` likewise, where the year had to be chosen."""
    out = {k: v for k, v in clock.items() if v is not None}
    if not out:
        return out
    if "tz_source" not in out and "tz_assumed" in out:
        if out["tz_assumed"]:
            out["tz_source"] = "default"
        elif options.tz is not None and out.get("tz") == options.tz:
            out["tz_source"] = "option"
        else:
            out["tz_source"] = "the log"
    if "tz_source" in out:
        # Aligned relative to an input whose zone is itself assumed, the zone stays assumed.
        out.setdefault("tz_assumed", out["tz_source"] == "default")
    if "year_assumed" in out and "year_source" not in out:
        out["year_source"] = "mtime" if out["year_assumed"] else "option"
    return out


def _merge_dict(
    into: dict[str, Any], new: dict[str, Any], what: str, diag: SourceDiagnostics
) -> None:
    for key, value in new.items():
        if value is None:
            continue
        if not _plausible(value):
            diag.skip(OUT_OF_RANGE, 1, f"{what}.{key} = {value!r}")
            diag.note(f"{what}.{key} = {value!r} is out of range; left out", lost=True)
            continue
        if key in into and into[key] != value:
            diag.note(f"{what}.{key} = {value!r} here disagrees with {into[key]!r}; kept the first")
            continue
        into[key] = value


def _plausible(value: Any) -> bool:
    """A stated number any engine could print: finite and within units.MAX_BYTES (the largest
    statement is a byte count; token and block counts are far below it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    return math.isfinite(value) and abs(value) <= MAX_BYTES


def _time_range(diag: SourceDiagnostics, frames: list[pl.DataFrame]) -> None:
    stamps = [f["ts"] for f in frames if f.height]
    if not stamps:
        return
    merged = pl.concat(stamps)
    low, high = merged.min(), merged.max()
    diag.first_ts = iso_time(cast("datetime | None", low), 6)
    diag.last_ts = iso_time(cast("datetime | None", high), 6)
