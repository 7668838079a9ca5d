"""The canonical trace: three long tables and a manifest (schema version 3).

Every parser and collector produces these tables; everything after them (analysis, replay,
reports) reads only these (``docs/ARCHITECTURE.md`` draws where they sit in the pipeline). All
timestamps are ``Datetime("ns", "UTC")``; memory is integer bytes; token counts are integers; a
count the source does not state is null, never invented.

Three choices in their layout, deliberate:

* every table carries ``source`` (the parser or sampler that produced the row), so that a finding
  can cite its evidence;
* ``samples`` and ``events`` carry ``pid`` (null unless the row is about one process), because
  per-process memory (NVML, nvidia-smi ``--query-compute-apps``, the PyTorch OOM "Process N has"
  clauses) is what tells foreign memory from the server's own;
* ``samples.value`` is Float64 so that ratios and byte counts share one long column; values of
  byte, token, block and count metrics are validated to be whole numbers;
* every table carries ``clock`` (:data:`CLOCK_STATES`), how far the row's ``ts`` can be trusted
  against the other inputs of the incident: rows of an input whose year or zone could not be
  aligned with the others (``unaligned``) keep the time they were read at but are not joined in
  time with the rest, and rows of a log that prints no time and that nothing anchored
  (``untimed``) have a null ``ts``, in the order of their input, after the timed rows
  (``docs/formats/log-prefixes-and-times.md``, "Aligning the inputs of one incident");
* ``requests`` carries, on the row that states them (the arrival), the sampling parameters that
  size a request's step: ``n`` and ``best_of`` (sequences sampled in parallel), ``logprobs`` and
  ``prompt_logprobs`` (how many top log-probabilities it asks for: the engine computes them over
  the whole vocabulary, for every prompt token with ``prompt_logprobs``). Null is "not stated".
  A trace written before these columns existed reads with them null.

Versions. A trace of an older version is read as a current one:

* 1: the tables, columns and vocabularies as first published;
* 2: ``clock`` added (and later, as a nullable column, ``requests.kv_blocks``); a version 1
  trace is read with every row ``stated``;
* 3: words added to the vocabularies, nothing changed: event kind ``process`` (a process seen
  holding device memory: ``pid``, ``device``, and its name as the source printed it in
  ``detail``, one per process and name where a source first shows it; nvidia-smi's default table
  and ``--query-compute-apps`` print names, the per-pid memory is in the ``process_used_bytes``
  samples) and metric ``state_usage_ratio`` (a hybrid model's recurrent-state pool, SGLang's
  Mamba slots, which is not KV cache). A version 2 trace is a valid version 3 trace. Later, as a
  nullable column: ``events.phase``, what the engine was doing when the failure came
  (:data:`EVENT_PHASES`, as the lines around it state it: llama.cpp's account of the failed
  buffer, a traceback's frames); a trace written before it reads with it null ("not stated").
  Later, as a nullable column: ``events.proc``, the process that printed the event as its log
  line's prefixes name it (vLLM's ``(VllmWorker rank=1 pid=2978)``, ``(EngineCore_DP0 pid=494)``,
  Ray's nested ones, journald's unit pid, a compose service; the parts joined by ``|``, colour
  codes removed), so that an OOM is matched with the lines of its own process; not ``pid``,
  which is the process the row is about, in the driver's pid namespace (a container's worker
  prints its own). A trace written before it reads with it null.
  Later, a word: event kind ``workspace_overflow`` (FlashInfer's attention workspace, a fixed
  buffer, too small for a batch: ``oomtrace/ingest/torch/workspace.py``).

Validation happens at stage boundaries through :func:`conform`, which fails in one place with a
column-level message. A value no measurement can hold (:data:`LIMITS`) is left out where rows
enter a trace (:func:`conform_within_range`, counted for its source) and refused in a trace read
back, so that no later stage meets one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import polars as pl

from oomtrace.errors import SchemaError
from oomtrace.units import MAX_BYTES

SCHEMA_VERSION: Final = 3
# Versions a trace directory may have been written in (version 1 has no ``clock`` column).
READABLE_VERSIONS: Final = (1, 2, 3)

TS: Final = pl.Datetime("ns", "UTC")

ClockState = Literal["stated", "assumed", "aligned", "anchored", "unaligned", "untimed"]
# How a row's time was placed, in a person's words (the order is the Enum's).
CLOCK_STATES: Final[Mapping[str, str]] = {
    "stated": "as its input states it (a full time with its zone, or --year/--tz)",
    "assumed": "as read under an assumption nothing else could check (zone UTC, year from the "
    "file's modification time)",
    "aligned": "its input's year or zone inferred from moments another input saw too",
    "anchored": "its input prints no time: placed at the moment another input saw it",
    "unaligned": "its input could not be aligned with the others: kept, not joined in time",
    "untimed": "its input prints no time and nothing anchored it: ts is null",
}
CLOCK: Final = pl.Enum(list(CLOCK_STATES))
# The states whose rows share one clock and are joined in time by the analysis.
JOINED_CLOCKS: Final[tuple[str, ...]] = ("stated", "assumed", "aligned", "anchored")


def _schema(columns: dict[str, Any]) -> pl.Schema:
    return pl.Schema(columns)


TableName = Literal["samples", "requests", "events"]
TABLES: Final[tuple[TableName, ...]] = ("samples", "requests", "events")
# What one row of each table is, in a person's words: a request has a row per lifecycle event,
# so "592 requests" would overstate a log of 296 requests.
ROW_NAMES: Final[dict[str, str]] = {
    "samples": "samples",
    "requests": "request events",
    "events": "events",
}

SAMPLES: Final = _schema(
    {
        "ts": TS,
        "node": pl.String,
        "source": pl.String,
        "device": pl.Int32,
        "pid": pl.Int64,
        "metric": pl.String,
        "value": pl.Float64,
        "clock": CLOCK,
    }
)

REQUESTS: Final = _schema(
    {
        "ts": TS,
        "node": pl.String,
        "source": pl.String,
        "request_id": pl.String,
        "event": pl.String,
        "prompt_tokens": pl.Int64,
        "max_tokens": pl.Int64,
        "output_tokens": pl.Int64,
        "cached_tokens": pl.Int64,
        # KV blocks the engine itself says the request held at this event (the vLLM plugin);
        # null where the source states none (every log). A trace written
        # before it existed reads with the column null.
        "kv_blocks": pl.Int64,
        "n": pl.Int64,
        "best_of": pl.Int64,
        "logprobs": pl.Int64,
        "prompt_logprobs": pl.Int64,
        "clock": CLOCK,
    }
)

EVENTS: Final = _schema(
    {
        "ts": TS,
        "node": pl.String,
        "source": pl.String,
        "device": pl.Int32,
        "pid": pl.Int64,
        "kind": pl.String,
        "requested_bytes": pl.Int64,
        "total_bytes": pl.Int64,
        "free_bytes": pl.Int64,
        "allocated_bytes": pl.Int64,
        "reserved_unallocated_bytes": pl.Int64,
        "process_bytes": pl.Int64,
        "detail": pl.String,
        "clock": CLOCK,
        # what the engine was doing (EVENT_PHASES); null where nothing states it
        "phase": pl.String,
        # the process that printed the event, as the log line's prefixes name it; null where none
        "proc": pl.String,
    }
)

SCHEMAS: Final[dict[TableName, pl.Schema]] = {
    "samples": SAMPLES,
    "requests": REQUESTS,
    "events": EVENTS,
}

# Columns that must never be null (``ts`` only where ``clock`` is ``untimed``). Everything else is
# nullable: null means "not stated"; a frame without ``clock`` is given ``stated``.
REQUIRED: Final[dict[TableName, tuple[str, ...]]] = {
    "samples": ("ts", "node", "source", "metric", "value"),
    "requests": ("ts", "node", "source", "request_id", "event"),
    "events": ("ts", "node", "source", "kind"),
}

MetricKind = Literal["bytes", "ratio", "count", "tokens", "blocks", "counter", "rate"]

# The closed metric vocabulary, name to (kind, meaning); the unit is in the name.
METRICS: Final[Mapping[str, tuple[MetricKind, str]]] = {
    # KV pool, as the engine reports it
    "kv_usage_ratio": ("ratio", "share of the KV pool's blocks (or tokens) in use, 0 to 1"),
    "kv_blocks_used": ("blocks", "KV blocks in use"),
    "kv_blocks_total": ("blocks", "KV blocks in the pool"),
    "kv_tokens_used": ("tokens", "token slots of the KV pool in use"),
    "kv_tokens_total": ("tokens", "token slots in the KV pool"),
    "kv_tokens_max_seen": ("tokens", "largest sequence length the engine has seen (llama.cpp)"),
    "state_usage_ratio": (
        "ratio",
        "share of a hybrid model's recurrent-state pool (Mamba slots) in use, 0 to 1; not KV",
    ),
    # scheduler
    "requests_running": ("count", "requests resident in the running batch"),
    "requests_waiting": ("count", "requests queued for admission"),
    "requests_swapped": ("count", "requests swapped out to CPU (vLLM V0)"),
    "requests_deferred": ("count", "requests deferred by the scheduler"),
    "preemptions_total": ("counter", "cumulative preemptions (recompute or swap) since start"),
    "preemptions_in_interval": ("count", "preemptions or retractions since the previous report"),
    "prompt_throughput_tokens_per_s": ("rate", "prefill tokens per second over the last interval"),
    "generation_throughput_tokens_per_s": ("rate", "decode tokens per second, last interval"),
    "prefix_cache_hit_ratio": ("ratio", "prefix cache hit rate, 0 to 1"),
    # device memory, from NVML, nvidia-smi or DCGM
    "device_total_bytes": ("bytes", "installed device memory"),
    "device_used_bytes": ("bytes", "device memory in use by all contexts"),
    "device_used_peak_bytes": ("bytes", "largest device_used_bytes seen since the previous sample"),
    "device_free_bytes": ("bytes", "free device memory"),
    "device_reserved_bytes": ("bytes", "memory reserved by the driver and firmware"),
    "process_used_bytes": ("bytes", "device memory used by one process (pid column)"),
    "process_used_peak_bytes": ("bytes", "largest process_used_bytes since the previous sample"),
    # PyTorch caching allocator
    "torch_allocated_bytes": ("bytes", "bytes in live tensors"),
    "torch_reserved_bytes": ("bytes", "bytes held by the caching allocator (reserved is not live)"),
    "torch_allocated_peak_bytes": ("bytes", "peak allocated since the previous sample"),
    "torch_reserved_peak_bytes": ("bytes", "peak reserved since the previous sample"),
    "torch_alloc_retries_total": ("counter", "cudaMalloc failures that forced a cache flush"),
    "torch_ooms_total": ("counter", "out-of-memory errors raised by the allocator"),
    # the collector's own health, per source (source column names the collector source)
    "collector_up": ("ratio", "1 when the last attempt of this source succeeded, else 0"),
    "collector_samples_total": ("counter", "samples this collector source has taken"),
    "collector_errors_total": ("counter", "failed attempts of this collector source"),
    "collector_deadline_misses_total": ("counter", "ticks that started later than scheduled"),
}

WHOLE_NUMBER_KINDS: Final = frozenset({"bytes", "count", "tokens", "blocks", "counter"})

RequestEvent = Literal[
    "arrived",
    "admitted",
    "first_token",
    "progress",
    "preempted",
    "resumed",
    "finished",
    "aborted",
    "rejected",
]
REQUEST_EVENTS: Final[tuple[str, ...]] = (
    "arrived",
    "admitted",
    "first_token",
    "progress",
    "preempted",
    "resumed",
    "finished",
    "aborted",
    "rejected",
)

EVENT_KINDS: Final[Mapping[str, str]] = {
    "oom": "an allocation failed for lack of device memory",
    "startup_kv_insufficient": "the engine refused to start: the cache cannot hold one request",
    "startup_no_kv_memory": "the engine refused to start: nothing left for the KV cache",
    "startup_memory_insufficient": (
        "the engine refused to start: less device memory was free than it was asked to use"
    ),
    "preemption": "the scheduler preempted or retracted requests",
    "engine_dead": "the engine process died or stopped answering",
    "engine_start": "the engine (re)started",
    "xid": "an NVIDIA Xid error",
    "warning": "a warning worth showing beside the timeline",
    "source_gap": "a source could not be read for a while (collector health)",
    "process": "a process seen holding device memory (pid, device; detail: its name)",
    "workspace_overflow": (
        "FlashInfer's fixed attention workspace could not hold a batch's temporaries (not device "
        "memory: requested_bytes asked, free_bytes the workspace had left where stated; detail: "
        "the buffer's name)"
    ),
}

# What the engine was doing when a failure came, as the lines around it state it
# (oomtrace/ingest/torch/oom_phase.py), in a person's words.
EVENT_PHASES: Final[Mapping[str, str]] = {
    "load_weights": "the loading of the model's weights",
    "profile_run": "the start-up profiling run (a dummy batch that sizes the KV cache)",
    "profile_sampler": "the start-up profiling run's dummy sampler pass (logits of a full batch)",
    "kv_cache_init": "the KV cache's allocation at start-up",
    "compute_reserve": "the reservation of the compute buffers at start-up",
    "graph_capture": "the CUDA graph capture at start-up",
    "warmup": "the warm-up before serving",
    # TensorRT-LLM under Triton: the model instance's creation allocates the runtime's buffers
    # (sized by the engine's build limits) and the KV cache before anything is served
    "engine_create": "the creation of the engine's runtime (its buffers and KV cache) at start-up",
    "compute_realloc": (
        "a re-allocation of the compute buffers while serving (a KV cache update, or a batch "
        "larger than the one reserved at start, such as an image's)"
    ),
    "dummy_batch": "a dummy batch an idle data-parallel rank runs while serving",
    "mm_encode": "the encoding of a request's image or video (the vision encoder) while serving",
}
# The phases that come before the engine serves anything.
STARTUP_PHASES: Final = frozenset(EVENT_PHASES) - {"compute_realloc", "dummy_batch", "mm_encode"}


# What a reading can hold. Beyond these a value is damage or hostility, not a measurement (a year
# outside what a nanosecond clock counts, 10^23 MiB, 1e29 requests), and analysis' integer sums
# would overflow on it. Bytes: 1 PiB (units.MAX_BYTES); counts of tokens, blocks, requests and
# events: 2^40 (about 10^12); ratios: 10^6 (a percentage read as a ratio still fits).
MAX_COUNT: Final = 2**40
LIMITS: Final[Mapping[MetricKind, float]] = {
    "bytes": MAX_BYTES,
    "ratio": 1e6,
    "count": MAX_COUNT,
    "tokens": MAX_COUNT,
    "blocks": MAX_COUNT,
    "counter": MAX_COUNT,
    "rate": MAX_COUNT,
}
EARLIEST: Final = datetime(1970, 1, 1, tzinfo=UTC)
LATEST: Final = datetime(2200, 1, 1, tzinfo=UTC)
OUT_OF_RANGE: Final = "value out of range"
# Without these a row says nothing: the row goes; any other value out of range becomes null.
_ROW_VALUES: Final = ("ts", "value")


@dataclass(frozen=True)
class LeftOut:
    """Values :func:`conform_within_range` left out: how many, and the first, described."""

    count: int = 0
    example: str = ""


def _outside(column: str, limit: float) -> pl.Expr:
    return (pl.col(column) < 0) | (pl.col(column) > limit)


def _out_of_range(table: TableName) -> dict[str, pl.Expr]:
    """Per column, where its value is out of range (never for a null)."""
    checks = {"ts": ~pl.col("ts").is_between(EARLIEST, LATEST, closed="left")}
    if table == "samples":
        limits = {metric: LIMITS[kind] for metric, (kind, _) in METRICS.items()}
        limit = pl.col("metric").replace_strict(limits, default=None, return_dtype=pl.Float64)
        value = pl.col("value")
        checks["value"] = ~value.is_nan() & (value.abs() > limit)
    elif table == "requests":
        checks |= {c: _outside(c, MAX_COUNT) for c in REQUESTS if c.endswith("_tokens")}
    else:
        checks |= {c: _outside(c, MAX_BYTES) for c in EVENTS if c.endswith("_bytes")}
    return {column: check.fill_null(False) for column, check in checks.items()}


def conform_within_range(
    table: TableName, frame: pl.DataFrame, *, what: str = ""
) -> tuple[pl.DataFrame, LeftOut]:
    """:func:`conform`, except that values out of range are left out rather than refused: the
    row when it is a time or a sample's value, the value (made null) otherwise."""
    where = _where(table, what)
    out = _cast(table, frame, where)
    checks = _out_of_range(table)
    flags = out.select(**checks).with_row_index("_row")
    hits = flags.filter(pl.any_horizontal(pl.exclude("_row")))
    if hits.height == 0:
        _check_values(table, out, where)
        return out, LeftOut()
    count = int(hits.select(pl.sum_horizontal(pl.exclude("_row").sum())).item())
    hit = hits.row(0, named=True)
    column = next(c for c in checks if hit[c])
    row = out.row(hit["_row"], named=True)
    example = f"{table} row at {row['ts']}: {column} = {row[column]!r}"
    drop = pl.any_horizontal(*(check for c, check in checks.items() if c in _ROW_VALUES))
    out = out.filter(~drop).with_columns(
        pl.when(check).then(None).otherwise(pl.col(c)).alias(c)
        for c, check in checks.items()
        if c not in _ROW_VALUES
    )
    _check_values(table, out, where)
    return out, LeftOut(count, example)


def empty(table: TableName) -> pl.DataFrame:
    """An empty frame of the table's schema."""
    return pl.DataFrame(schema=SCHEMAS[table])


def conform(table: TableName, frame: pl.DataFrame, *, what: str = "") -> pl.DataFrame:
    """Return ``frame`` with the table's columns, order and dtypes, or raise :class:`SchemaError`.

    Missing nullable columns are added as nulls (a missing ``clock`` as ``stated``); extra columns
    are an error (a misspelt column would otherwise vanish). Casts are strict: a value that does
    not fit is an error naming the column, not a silent null; so is a value out of range
    (:data:`LIMITS`).
    """
    where = _where(table, what)
    out = _cast(table, frame, where)
    _check_values(table, out, where)
    for column, check in _out_of_range(table).items():
        bad = out.filter(check)
        if bad.height:
            raise SchemaError(
                f"{where}: column {column} holds {bad.height:,} value(s) out of range (such as "
                f"{bad[column][0]!r}); re-run `oomtrace ingest`, which leaves them out"
            )
    return out


def absent_column(name: str, dtype: pl.DataType) -> pl.Expr:
    """What a frame without the nullable column ``name`` is given: nulls (a missing ``clock``,
    a trace from before it, ``stated``)."""
    return pl.lit("stated" if name == "clock" else None, dtype=dtype).alias(name)


def _where(table: TableName, what: str) -> str:
    return f"{table} table" + (f" from {what}" if what else "")


def _cast(table: TableName, frame: pl.DataFrame, where: str) -> pl.DataFrame:
    schema = SCHEMAS[table]
    extra = [c for c in frame.columns if c not in schema]
    if extra:
        raise SchemaError(f"{where}: unknown column(s) {', '.join(extra)}; expected {list(schema)}")
    missing_required = [c for c in REQUIRED[table] if c not in frame.columns]
    if missing_required:
        raise SchemaError(f"{where}: missing required column(s) {', '.join(missing_required)}")
    columns: list[pl.Expr] = []
    for name, dtype in schema.items():
        if name not in frame.columns:
            columns.append(absent_column(name, dtype))
            continue
        current = frame.schema[name]
        if current == dtype:
            columns.append(pl.col(name))
        elif isinstance(dtype, pl.Datetime) and isinstance(current, pl.Datetime):
            if current.time_zone is None:
                raise SchemaError(f"{where}: column {name} has no time zone; localise it to UTC")
            columns.append(pl.col(name).dt.convert_time_zone("UTC").dt.cast_time_unit("ns"))
        else:
            columns.append(pl.col(name).cast(dtype, strict=True))
    try:
        return frame.select(columns)
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError) as err:
        raise SchemaError(f"{where}: {_first_line(err)}") from err


def _check_values(table: TableName, frame: pl.DataFrame, where: str) -> None:
    untimed = pl.col("clock") == "untimed"
    checks = [
        (pl.col(c).is_null() & ~untimed if c == "ts" else pl.col(c).is_null()).sum().alias(c)
        for c in (*REQUIRED[table], "clock")
    ]
    nulls = frame.select(checks).row(0, named=True)
    for column, count in nulls.items():
        if count:
            raise SchemaError(f"{where}: column {column} has {count} null value(s)")
    timed = frame.select((untimed & pl.col("ts").is_not_null()).sum()).item()
    if timed:
        raise SchemaError(f"{where}: {timed} row(s) have clock 'untimed' and a time")
    if table == "samples":
        _check_vocabulary(frame, "metric", METRICS, where)
        whole = [m for m, (kind, _) in METRICS.items() if kind in WHOLE_NUMBER_KINDS]
        bad = frame.filter(
            pl.col("metric").is_in(whole) & (pl.col("value") != pl.col("value").round(0))
        )
        if bad.height:
            row = bad.row(0, named=True)
            raise SchemaError(
                f"{where}: column value holds a fraction ({row['value']}) for whole-number "
                f"metric {row['metric']}"
            )
    elif table == "requests":
        _check_vocabulary(frame, "event", REQUEST_EVENTS, where)
        _check_non_negative(
            frame,
            [
                "prompt_tokens",
                "max_tokens",
                "output_tokens",
                "kv_blocks",
                "n",
                "best_of",
                "logprobs",
            ],
            where,
        )
    else:
        _check_vocabulary(frame, "kind", EVENT_KINDS, where)
        _check_vocabulary(frame.drop_nulls("phase"), "phase", EVENT_PHASES, where)
        _check_non_negative(frame, [c for c in EVENTS if c.endswith("_bytes")], where)


def _check_vocabulary(
    frame: pl.DataFrame, column: str, vocabulary: Mapping[str, object] | tuple[str, ...], where: str
) -> None:
    unknown = frame.filter(~pl.col(column).is_in(list(vocabulary)))[column].unique().sort()
    if unknown.len():
        raise SchemaError(
            f"{where}: column {column} has value(s) outside the vocabulary: "
            f"{', '.join(unknown.head(5).to_list())}"
        )


def _check_non_negative(frame: pl.DataFrame, columns: list[str], where: str) -> None:
    for column in columns:
        if frame.filter(pl.col(column) < 0).height:
            raise SchemaError(f"{where}: column {column} has negative values")


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
