"""PyTorch CUDA memory snapshots (``torch.cuda.memory._dump_snapshot``): allocator trace events
become exact ``torch_allocated_bytes`` / ``torch_reserved_bytes`` series, and the ``oom`` trace
entry an ``oom`` event (``docs/formats/pytorch.md``, "Memory snapshots").

**Untrusted input.** A snapshot from a crashed server is a pickle, and unpickling can run code.
The snapshot is plain data (dicts, lists, tuples, strings, numbers, booleans, None), which pickle
builds without looking up any class, so :class:`_PlainUnpickler` refuses *every* class lookup
(``find_class``) and persistent id: a pickle that tries to reach ``os.system``, ``builtins.eval``
or any ``__reduce__`` callable is refused before anything runs, with a clear
:class:`~oomtrace.errors.InputError`. Only known keys are read, each checked for its type.

**Totals.** The trace is a ring buffer: it starts mid-history. The segments list is the state at
the dump, so the running totals are reconstructed *backwards* from it: allocated bytes change
with ``alloc`` (+) and ``free_completed`` (-), reserved bytes with ``segment_alloc`` /
``segment_map`` (+) and ``segment_free`` / ``segment_unmap`` (-). Every trace entry is a sample,
so the series' peaks are the exact peaks of the recorded window.

**Time.** ``time_us`` (microseconds since the epoch, newer torch) places entries in time. Older
snapshots have no times: then only what is known is kept, at the file's modification time (the
dump): the totals at the dump and ``*_peak_bytes`` samples for the peak over the recorded window;
the entries' order is known, their times are not, and a note says so.
"""

from __future__ import annotations

import io
import pickle
from datetime import UTC, datetime
from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.schema import TS
from oomtrace.units import format_bytes

MAX_SNAPSHOT_BYTES: Final = 4 << 30
ALLOCATED_DELTA: Final = {"alloc": 1, "free_completed": -1}
RESERVED_DELTA: Final = {
    "segment_alloc": 1,
    "segment_map": 1,
    "segment_free": -1,
    "segment_unmap": -1,
}
# time_us outside these years is not an epoch time (a counter, or damage).
_PLAUSIBLE_US: Final = (
    int(datetime(2015, 1, 1, tzinfo=UTC).timestamp() * 1e6),
    int(datetime(2100, 1, 1, tzinfo=UTC).timestamp() * 1e6),
)


class RefusedPickle(pickle.UnpicklingError):
    """The pickle asked for something a memory snapshot never needs."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain containers and numbers only; every class lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(f"it asks to construct {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("it holds a persistent reference")


def load_plain(data: bytes, what: str) -> Any:
    """Unpickle ``data`` allowing no class at all, or raise :class:`InputError` naming ``what``."""
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except RefusedPickle as err:
        raise InputError(
            f"{what}: refused to load: {err}, which a PyTorch memory snapshot never does "
            "(it may be malicious); pass the pickle written by torch.cuda.memory._dump_snapshot"
        ) from err
    except Exception as err:
        raise InputError(
            f"{what}: not a readable pickle ({type(err).__name__}: {err}); pass the file "
            "written by torch.cuda.memory._dump_snapshot"
        ) from err


_MAX_DEVICES: Final = 1 << 16
_MAX_INT: Final = 1 << 53  # 8 PiB, or 285 years of microseconds: anything larger is damage


def _int(value: object) -> int | None:
    """A count, size or time: a non-negative int that fits (bools are ints in Python: refused)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_INT
    return value if ok else None  # type: ignore[return-value]


def _segments(snapshot: dict[str, Any], diag: SourceDiagnostics) -> dict[int, dict[str, int]]:
    """Per device: reserved, allocated, count and largest free block at the dump."""
    totals: dict[int, dict[str, int]] = {}
    raw = snapshot.get("segments")
    if not isinstance(raw, list):
        return totals
    bad = 0
    for seg in raw:
        device = _int(seg.get("device")) if isinstance(seg, dict) else None
        device = device if device is not None and device < _MAX_DEVICES else None
        size = _int(seg.get("total_size")) if isinstance(seg, dict) else None
        if device is None or size is None or not isinstance(seg, dict):
            bad += 1
            continue
        raw_blocks = seg.get("blocks")
        blocks = (
            [b for b in raw_blocks if isinstance(b, dict)] if isinstance(raw_blocks, list) else []
        )
        states = [(b.get("state"), _int(b.get("size")) or 0) for b in blocks]
        allocated = _int(seg.get("allocated_size"))
        if allocated is None:
            # States: active_allocated, and active_pending_free (code) or active_awaiting_free.
            allocated = sum(
                n for st, n in states if isinstance(st, str) and st.startswith("active")
            )
        free_blocks = [n for st, n in states if st == "inactive"]
        t = totals.setdefault(
            device, {"reserved": 0, "allocated": 0, "segments": 0, "largest_free": 0}
        )
        t["reserved"] += size
        t["allocated"] += allocated
        t["segments"] += 1
        t["largest_free"] = max([t["largest_free"], *free_blocks])
    diag.skip("segment entry without device or size", bad, None)
    return totals


def _trace_frame(snapshot: dict[str, Any], diag: SourceDiagnostics) -> pl.DataFrame:
    """One row per usable trace entry: device, order, action, size, time_us, device_free."""
    rows: dict[str, list[Any]] = {
        k: [] for k in ("device", "seq", "action", "size", "time_us", "device_free")
    }
    traces = snapshot.get("device_traces")
    bad = 0
    for device, trace in enumerate(traces if isinstance(traces, list) else []):
        if not isinstance(trace, list):
            bad += 1
            continue
        for seq, entry in enumerate(trace):
            action = entry.get("action") if isinstance(entry, dict) else None
            size = _int(entry.get("size")) if isinstance(entry, dict) else None
            if not isinstance(action, str) or size is None or not isinstance(entry, dict):
                bad += 1
                continue
            rows["device"].append(device)
            rows["seq"].append(seq)
            rows["action"].append(action)
            rows["size"].append(size)
            rows["time_us"].append(_int(entry.get("time_us")))
            rows["device_free"].append(_int(entry.get("device_free")))
    diag.lines_read += len(rows["seq"]) + bad
    diag.skip("trace entry without an action or a size", bad, None)
    schema = {
        "device": pl.Int32,
        "seq": pl.Int64,
        "action": pl.String,
        "size": pl.Int64,
        "time_us": pl.Int64,
        "device_free": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema)


def _running_totals(trace: pl.DataFrame, final: dict[int, dict[str, int]]) -> pl.DataFrame:
    """Allocated and reserved bytes after each entry, anchored to the segments at the dump."""
    delta = {
        "d_alloc": pl.col("action").replace_strict(
            ALLOCATED_DELTA, default=0, return_dtype=pl.Int64
        )
        * pl.col("size"),
        "d_res": pl.col("action").replace_strict(RESERVED_DELTA, default=0, return_dtype=pl.Int64)
        * pl.col("size"),
    }
    anchors = pl.DataFrame(
        {
            "device": list(final),
            "final_alloc": [v["allocated"] for v in final.values()],
            "final_res": [v["reserved"] for v in final.values()],
        },
        schema={"device": pl.Int32, "final_alloc": pl.Int64, "final_res": pl.Int64},
    )
    return (
        trace.sort("device", "seq")
        .with_columns(**delta)
        .join(anchors, on="device", how="left")
        .with_columns(
            allocated=pl.col("final_alloc")
            - pl.col("d_alloc").sum().over("device")
            + pl.col("d_alloc").cum_sum().over("device"),
            reserved=pl.col("final_res")
            - pl.col("d_res").sum().over("device")
            + pl.col("d_res").cum_sum().over("device"),
        )
    )


class TorchSnapshotParser:
    """The ``torch-memory-snapshot`` format."""

    name = "torch-memory-snapshot"
    description = "PyTorch CUDA memory snapshot pickle (torch.cuda.memory._dump_snapshot)"

    def sniff(self, head: str, name: str) -> float:
        # Pickle protocol 2+ starts with byte 0x80, which the text head shows as U+FFFD.
        if not head.startswith("\ufffd"):
            return 0.0
        start = head[:4096]
        if "segments" in start and ("device_traces" in head or "total_size" in start):
            return 0.95
        return 0.5 if name.lower().removesuffix(".gz").endswith((".pickle", ".pkl")) else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        snapshot = load_plain(source.read_bytes(diag, MAX_SNAPSHOT_BYTES), source.name)
        if not isinstance(snapshot, dict) or not ({"segments", "device_traces"} & set(snapshot)):
            raise InputError(
                f"{source.name}: a pickle, but not a PyTorch memory snapshot (no segments or "
                "device_traces); pass the file written by torch.cuda.memory._dump_snapshot"
            )
        final = _segments(snapshot, diag)
        trace = _trace_frame(snapshot, diag)
        largest = max([trace["size"].sum(), *(max(v.values()) for v in final.values())])
        if largest >= 1 << 62:
            raise InputError(
                f"{source.name}: memory sizes beyond any real device (sum {largest:,} bytes); "
                "the snapshot is damaged, pass the file as torch wrote it"
            )
        when = _dump_time(trace, ctx.mtime, diag)
        result = ParseResult(engine_config=_settings(snapshot))
        frames = _samples_and_events(trace, final, when, diag)
        result.samples, result.events = frames
        for device, seg in sorted(final.items()):
            diag.note(
                f"device {device} at the dump: {seg['segments']} segment(s), reserved "
                f"{format_bytes(seg['reserved'])}, allocated {format_bytes(seg['allocated'])}, "
                f"largest free block {format_bytes(seg['largest_free'])}"
            )
        diag.note("device numbers are CUDA indices inside the process (after CUDA_VISIBLE_DEVICES)")
        return result


def _dump_time(trace: pl.DataFrame, mtime: datetime | None, diag: SourceDiagnostics) -> datetime:
    """The last event time if the trace has times, else the file's modification time."""
    latest = trace["time_us"].max()
    if isinstance(latest, int) and _PLAUSIBLE_US[0] <= latest < _PLAUSIBLE_US[1]:
        return datetime.fromtimestamp(latest / 1e6, tz=UTC)
    if mtime is None:
        raise InputError("memory snapshot: no event times and no file time; pass it as a file")
    diag.note(
        f"the dump time is taken from the file's modification time ({mtime:%Y-%m-%d %H:%M:%S} UTC)"
    )
    return mtime


def _settings(snapshot: dict[str, Any]) -> dict[str, Any]:
    settings = snapshot.get("allocator_settings")
    if not isinstance(settings, dict):
        return {}
    plain = {str(k): v for k, v in settings.items() if isinstance(v, str | int | float | bool)}
    return {"pytorch_allocator_settings": dict(sorted(plain.items()))} if plain else {}


def _samples_and_events(
    trace: pl.DataFrame, final: dict[int, dict[str, int]], when: datetime, diag: SourceDiagnostics
) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    at_dump = pl.DataFrame(
        {
            "ts": [when] * (2 * len(final)),
            "device": [d for d in final for _ in (0, 1)],
            "metric": [m for _ in final for m in ("torch_reserved_bytes", "torch_allocated_bytes")],
            "value": [float(v[k]) for v in final.values() for k in ("reserved", "allocated")],
        },
        schema={"ts": TS, "device": pl.Int32, "metric": pl.String, "value": pl.Float64},
    )
    known = trace.filter(pl.col("device").is_in(list(final)))
    if trace.height > known.height:
        diag.note(
            f"{trace.height - known.height} trace entries on devices with no segments at the dump "
            "were not turned into totals (their starting point is unknown)",
            lost=True,
        )
    if known.height == 0:
        return (at_dump if at_dump.height else None), None
    totals = _running_totals(known, final)
    negative = totals.filter((pl.col("allocated") < 0) | (pl.col("reserved") < 0)).height
    if negative:
        diag.note(
            f"{negative} reconstructed totals fell below zero: the trace and the segments disagree"
        )
    low, high = totals["time_us"].min(), totals["time_us"].max()
    has_time = (
        totals["time_us"].null_count() == 0
        and isinstance(low, int)
        and isinstance(high, int)
        and _PLAUSIBLE_US[0] <= low
        and high < _PLAUSIBLE_US[1]
    )
    if has_time:
        totals = totals.with_columns(
            ts=pl.from_epoch("time_us", time_unit="us")
            .dt.replace_time_zone("UTC")
            .dt.cast_time_unit("ns")
        )
    else:
        diag.note(
            f"this snapshot has no event times: its {totals.height} trace entries are in order but "
            "not in time, so only the totals at the dump (file modification time) and the peak of "
            "the recorded window are kept",
            lost=True,
        )
        totals = totals.with_columns(ts=pl.lit(when, TS))
    diag.lines_recognised += totals.height
    samples = _series(totals, has_time)
    # Devices with trace entries end their series at the dump already.
    untraced = at_dump.filter(~pl.col("device").is_in(totals["device"].unique().implode()))
    return pl.concat([samples, untraced], how="diagonal_relaxed"), _oom_events(totals)


def _series(totals: pl.DataFrame, has_time: bool) -> pl.DataFrame:
    """Per device and instant: the totals after the last entry, and the peak within the instant
    where it was higher (several entries share a microsecond, or all share the dump time)."""
    grouped = totals.group_by("device", "ts", maintain_order=True).agg(
        torch_allocated_bytes=pl.col("allocated").last(),
        torch_reserved_bytes=pl.col("reserved").last(),
        torch_allocated_peak_bytes=pl.col("allocated").max(),
        torch_reserved_peak_bytes=pl.col("reserved").max(),
    )
    long = grouped.unpivot(index=["device", "ts"], variable_name="metric", value_name="value")
    if has_time:
        # The dump sample already gives the final totals; keep peaks only where they add news.
        long = (
            long.join(
                long.filter(~pl.col("metric").str.contains("_peak_"))
                .with_columns(metric=pl.col("metric").str.replace("_bytes", "_peak_bytes"))
                .rename({"value": "_last"}),
                on=["device", "ts", "metric"],
                how="left",
            )
            .filter(pl.col("_last").is_null() | (pl.col("value") > pl.col("_last")))
            .drop("_last")
        )
    return long.select("ts", "device", "metric", pl.col("value").cast(pl.Float64))


def _oom_events(totals: pl.DataFrame) -> pl.DataFrame | None:
    ooms = totals.filter(pl.col("action") == "oom")
    if ooms.height == 0:
        return None
    return ooms.select(
        "ts",
        "device",
        kind=pl.lit("oom"),
        requested_bytes="size",
        free_bytes="device_free",
        allocated_bytes="allocated",
        reserved_unallocated_bytes=(pl.col("reserved") - pl.col("allocated")).clip(lower_bound=0),
        detail=pl.lit("PyTorch memory snapshot: allocator OOM trace entry (device_free, size)"),
    )


PARSER: Final = TorchSnapshotParser()
