"""From the canonical ``requests`` table to the replay's workload: one row per request with its
arrival, token lengths and time model, each with where it came from.

* Arrival: the request's first event of any kind.
* Prompt: the first stated ``prompt_tokens``. A request without one cannot be sized and is left
  out (counted in the notes).
* Output length: ``output_tokens`` on the ``finished`` (or ``aborted``) event where stated
  (``recorded``); otherwise ``max_tokens`` as an upper bound (``max_tokens_bound``); otherwise the
  request is left out. A length of 0 is replayed as 1 (a request holds its prompt until it has
  produced its first token).
* Prefill time: ``first_token - admitted`` where both are recorded (``recorded``); otherwise the
  prompt at the median prefill speed of the requests that recorded one (``trace_median``);
  otherwise at ``prefill_tokens_per_s`` (``option``).
* Decode speed: ``(end - first_token) / (output - 1)`` where a request recorded both times and
  two or more output tokens (``recorded``); otherwise the median of those (``trace_median``);
  otherwise ``decode_tokens_per_s`` (``option``); otherwise the median over whole requests
  (admission or arrival to finish, less prefill, over output tokens: ``end_to_end_bound``, which
  includes queueing, so requests are held longer than they were: noted); otherwise the input is
  refused.

Service times therefore do not depend on the load in the replay; the replay is about memory and
admission, not about how batch size changes step time (stated in every result).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import numpy as np
import polars as pl

from oomtrace.errors import InputError, UsageError
from oomtrace.replay.compiled import Engine, grouper
from oomtrace.replay.kernel import grouping
from oomtrace.trace import Trace

DEFAULT_PREFILL_TOKENS_PER_S: Final = 10_000.0
NS: Final = 1_000_000_000
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

WORKLOAD_SCHEMA: Final = pl.Schema(
    {
        "request_id": pl.String(),
        "arrival": pl.Datetime("ns", "UTC"),
        "arrival_ns": pl.Int64(),
        "prompt_tokens": pl.Int64(),
        "output_tokens": pl.Int64(),
        "max_tokens": pl.Int64(),
        "prefill_ns": pl.Int64(),
        "decode_ns_per_token": pl.Int64(),
        "output_source": pl.String(),
        "prefill_source": pl.String(),
        "decode_source": pl.String(),
    }
)


@dataclass(frozen=True)
class TimeOptions:
    """Fallbacks for requests whose own times do not give a speed."""

    decode_tokens_per_s: float | None = None
    prefill_tokens_per_s: float = DEFAULT_PREFILL_TOKENS_PER_S

    def __post_init__(self) -> None:
        if self.decode_tokens_per_s is not None and not self.decode_tokens_per_s > 0:
            raise UsageError("--decode-tokens-per-s must be above 0")
        if not self.prefill_tokens_per_s > 0:
            raise UsageError("--prefill-tokens-per-s must be above 0")


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order (``requests`` has :data:`WORKLOAD_SCHEMA`), the instant that
    ``arrival_ns`` counts from, and what was assumed to build it."""

    requests: pl.DataFrame
    t0: datetime
    notes: tuple[str, ...]
    decode_fallback_tokens_per_s: float | None
    prefill_fallback_tokens_per_s: float | None

    @property
    def size(self) -> int:
        return self.requests.height

    def source_counts(self, column: str) -> dict[str, int]:
        counts = self.requests.group_by(column).len().sort(column).rows()
        return {str(k): int(v) for k, v in counts}


def _per_request(requests: pl.DataFrame, engine: Engine = "auto") -> pl.DataFrame:
    """One row per request (see the module docstring), in arrival order: the row numbers of the
    values taken "first where" or "last where" (their smallest or largest row number where they
    apply: the rows are in time order) found by grouping, the values gathered afterwards. A
    trace that replays compiled is grouped compiled (:mod:`oomtrace.replay.kernel.grouping`),
    a smaller one by Polars."""
    frame = requests if requests["ts"].is_sorted() else requests.sort("ts", maintain_order=True)
    # The times are gathered four times by row number: from one chunk rather than a chunk per
    # Parquet row group (a day's 67) a gather costs about a third of the CPU; on a day this
    # function took 0.2-0.3 CPU s less (side by side in one process), for a 64 MiB copy
    frame = frame.with_columns(frame["ts"].rechunk())
    rows = _compiled_rows(frame, engine) if frame["ts"].null_count() == 0 else None
    per = _polars_rows(frame) if rows is None else rows
    out = per.select(
        "request_id",
        "arrival",
        # each column made one chunk just for its gather (a copy held only while it runs): on a
        # day 0.07-0.13 CPU s less for the four gathers
        frame["prompt_tokens"].rechunk().gather(per["_prompt"]),
        frame["max_tokens"].rechunk().gather(per["_max"]),
        frame["output_tokens"].rechunk().gather(per["_output"]).alias("recorded_output"),
        *("admitted", "first_token", "ended", "server_rejected"),
    )
    # The groups come in the order of their first row, which is arrival order; only ties (and
    # nulls) need the sort, which orders them by id.
    arrival = out["arrival"]
    if arrival.null_count() or not arrival.is_sorted() or _has_ties(arrival):
        out = out.sort("arrival", "request_id")
    return out


def _has_ties(sorted_values: pl.Series) -> bool:
    """Whether two neighbours of a sorted series are equal (a hash-free count of distinct)."""
    physical = sorted_values.to_physical()
    return bool((physical.diff() == 0).any())


# The events the grouping tells apart (every other event is grouping.E_OTHER).
_EVENT_CODES: Final = {
    "admitted": grouping.E_ADMITTED,
    "first_token": grouping.E_FIRST_TOKEN,
    "finished": grouping.E_END,
    "aborted": grouping.E_END,
    "rejected": grouping.E_REJECTED,
}


def _compiled_rows(frame: pl.DataFrame, engine: Engine) -> pl.DataFrame | None:
    """:func:`_polars_rows` by the compiled grouping, where the trace replays compiled; None
    where it does not (or, about once in ten million days, two ids share a hash)."""
    functions = grouper(frame.height, engine)
    if functions is None:
        return None
    group_ids, group_rows = functions
    # a row's code as a sum of bits (its event's code, a bit per count it states): one pass of
    # comparisons of the event's short strings and one sum, a third of the CPU of a chain of
    # when/then (each link makes a column)
    ev, ids = pl.col("event"), pl.col("request_id")
    bits = [(ev == event).cast(pl.Int8) * code for event, code in _EVENT_CODES.items()]
    bits += [
        pl.col(column).is_not_null().cast(pl.Int8) * flag
        for column, flag in (
            ("prompt_tokens", grouping.E_PROMPT),
            ("max_tokens", grouping.E_MAX),
            ("output_tokens", grouping.E_OUTPUT),
        )
    ]
    key, check, code = (
        column.to_numpy()
        for column in frame.select(
            ids.hash(seed=0), ids.hash(seed=1).alias("_check"),
            pl.sum_horizontal(bits).cast(pl.Int8).alias("_code"),
        ).get_columns()
    )  # fmt: skip
    numbers, groups = group_ids(key, check, grouping.new_table(frame.height))
    if groups < 0:
        return None
    matrix = group_rows(numbers, groups, code)

    def rows_of(which: int) -> pl.Series:
        found = pl.Series(np.ascontiguousarray(matrix[:, which]))
        return found.set(found < 0, None)

    first = pl.Series(np.ascontiguousarray(matrix[:, grouping.G_FIRST]))
    ts = frame["ts"]
    return pl.DataFrame(
        {
            "request_id": frame["request_id"].rechunk().gather(first),
            "arrival": ts.gather(first),
            "_prompt": rows_of(grouping.G_PROMPT),
            "_max": rows_of(grouping.G_MAX),
            "_output": rows_of(grouping.G_OUTPUT),
            "admitted": ts.gather(rows_of(grouping.G_ADMITTED)),
            "first_token": ts.gather(rows_of(grouping.G_FIRST_TOKEN)),
            "ended": ts.gather(rows_of(grouping.G_END)),
            "server_rejected": pl.Series(matrix[:, grouping.G_REJECTED] >= 0),
        }
    )


def _polars_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """Per request its id, arrival, the row numbers of its first stated prompt and max tokens
    and of its last stated output, its admission, first token and end, whether the server
    rejected it. One grouping with plain minima and maxima: each "where" is evaluated over the
    rows before grouping, so the grouping runs Polars' plain per-group minima and maxima (a
    third faster on a day than conditions inside the groups)."""
    ev, ts, row = pl.col("event"), pl.col("ts"), pl.col("_row")
    ends = ev.is_in(["finished", "aborted"])
    columns = ("request_id", "ts", "event", "prompt_tokens", "max_tokens", "output_tokens")
    return (
        frame.lazy()
        .select(*columns)
        .with_row_index("_row")
        .select(
            "request_id",
            arrival=ts,
            _prompt=pl.when(pl.col("prompt_tokens").is_not_null()).then(row),
            _max=pl.when(pl.col("max_tokens").is_not_null()).then(row),
            _output=pl.when(ends & pl.col("output_tokens").is_not_null()).then(row),
            admitted=pl.when(ev == "admitted").then(ts),
            first_token=pl.when(ev == "first_token").then(ts),
            ended=pl.when(ends).then(ts),
            server_rejected=ev == "rejected",
        )
        .group_by("request_id", maintain_order=True)
        .agg(
            pl.col("arrival").first(),
            *(pl.col(c).min() for c in ("_prompt", "_max", "admitted", "first_token")),
            *(pl.col(c).max() for c in ("_output", "ended")),
            pl.col("server_rejected").any(),
        )
        .collect()
    )


def _nodes(node: pl.Series) -> list[str]:
    """The nodes named, sorted; a column of one node (the usual trace) is found without hashing
    every row."""
    if node.len() and node.null_count() == 0 and bool((node == node[0]).all()):
        return [node[0]]
    return sorted(node.drop_nulls().unique().to_list())


def _end_to_end_decode_ns(per: pl.DataFrame, prefill_rate: float | None) -> float | None:
    """Median ns per output token over whole requests: (finish - admission, or arrival) less the
    prompt at the prefill rate, over output tokens. Includes time spent queued: an upper bound
    on the time per token, so a replay with it holds requests longer than they were held."""
    start = pl.coalesce("admitted", "arrival")
    prefill = pl.col("prompt_tokens") * NS / prefill_rate if prefill_rate else pl.lit(0.0)
    per_token = ((pl.col("ended") - start).dt.total_nanoseconds() - prefill) / (
        pl.col("recorded_output") - 1
    )
    usable = per.filter((pl.col("recorded_output") >= 2) & pl.col("ended").is_not_null())
    return _median(usable.with_columns(_per=pl.when(per_token > 0).then(per_token)), "_per")


def _median(frame: pl.DataFrame, column: str) -> float | None:
    value = frame.select(pl.col(column).drop_nulls().median()).item()
    return None if value is None else float(value)


def build_workload(
    trace: Trace, *, options: TimeOptions | None = None, node: str | None = None
) -> Workload:
    """The replay workload of ``trace`` (one node's requests)."""
    options = options or TimeOptions()
    requests = trace.requests
    nodes = _nodes(requests["node"])
    if node is not None:
        if node not in nodes:
            raise UsageError(f"--node {node!r}: the trace has requests from {nodes or 'no node'}")
        requests = requests.filter(pl.col("node") == node)
    elif len(nodes) > 1:
        raise UsageError(
            f"the trace has requests from {len(nodes)} nodes ({', '.join(nodes)}); "
            "replay one engine at a time with --node"
        )
    per = _per_request(requests)
    notes: list[str] = []
    rejected = per.filter(pl.col("server_rejected"))
    if rejected.height:
        notes.append(f"{rejected.height} request(s) the server rejected are left out")
    per = per.filter(~pl.col("server_rejected"))
    out_expr = pl.coalesce("recorded_output", "max_tokens")
    unsized = per.filter(pl.col("prompt_tokens").is_null() | out_expr.is_null())
    if unsized.height:
        notes.append(
            f"{unsized.height} request(s) without a stated prompt length or output bound "
            "(no output_tokens at finish and no max_tokens) are left out"
        )
    per = per.filter(pl.col("prompt_tokens").is_not_null() & out_expr.is_not_null())
    if per.is_empty():
        raise InputError(
            "the trace has no request with a prompt length and an output length or bound; "
            "replay needs the requests table (re-ingest with the engine's request log lines)"
        )
    return _with_times(per, options, notes)


def _with_times(per: pl.DataFrame, options: TimeOptions, notes: list[str]) -> Workload:
    out = pl.max_horizontal(pl.coalesce("recorded_output", "max_tokens"), pl.lit(1))
    per = per.with_columns(
        output_tokens=out.cast(pl.Int64),
        output_source=pl.when(pl.col("recorded_output").is_not_null())
        .then(pl.lit("recorded"))
        .otherwise(pl.lit("max_tokens_bound")),
        own_prefill_ns=(pl.col("first_token") - pl.col("admitted")).dt.total_nanoseconds(),
        own_decode_ns=pl.when(pl.col("recorded_output") >= 2).then(
            (pl.col("ended") - pl.col("first_token")).dt.total_nanoseconds()
            / (pl.col("recorded_output") - 1)
        ),
    ).with_columns(
        own_prefill_ns=pl.when(pl.col("own_prefill_ns") >= 0).then("own_prefill_ns"),
        own_decode_ns=pl.when(pl.col("own_decode_ns") > 0).then("own_decode_ns"),
        prefill_speed=pl.when(pl.col("own_prefill_ns") > 0).then(
            pl.col("prompt_tokens") * NS / pl.col("own_prefill_ns")
        ),
    )
    prefill_rate = _median(per, "prefill_speed")
    prefill_from = "trace_median"
    if prefill_rate is None:
        prefill_rate, prefill_from = options.prefill_tokens_per_s, "option"
    decode_ns = _median(per, "own_decode_ns")
    decode_from = "trace_median"
    if decode_ns is None and options.decode_tokens_per_s is not None:
        decode_ns, decode_from = NS / options.decode_tokens_per_s, "option"
    if decode_ns is None:
        decode_ns = _end_to_end_decode_ns(per, prefill_rate)
        decode_from = "end_to_end_bound"
        if decode_ns is None:
            raise InputError(
                "no request in the trace states its finish time and two or more output tokens, "
                "so no decode speed can be derived; pass --decode-tokens-per-s"
            )
        notes.append(
            f"no request states its first-token time: decode speed taken from whole requests "
            f"(admission or arrival to finish, less prefill, over output tokens), median "
            f"{NS / decode_ns:.1f} tokens/s; queueing is included, so residency is overstated "
            "(a conservative bound for memory); pass --decode-tokens-per-s to set it"
        )
    t0 = per["arrival"].min()
    frame = per.select(
        "request_id",
        "arrival",
        arrival_ns=(pl.col("arrival") - pl.lit(t0)).dt.total_nanoseconds().cast(pl.Int64),
        prompt_tokens="prompt_tokens",
        output_tokens="output_tokens",
        max_tokens=pl.coalesce("max_tokens", "output_tokens"),
        prefill_ns=pl.max_horizontal(
            pl.coalesce("own_prefill_ns", (pl.col("prompt_tokens") * NS / prefill_rate).round(0)),
            pl.lit(1),
        ).cast(pl.Int64),
        decode_ns_per_token=pl.max_horizontal(
            pl.coalesce("own_decode_ns", pl.lit(decode_ns)).round(0), pl.lit(1)
        ).cast(pl.Int64),
        output_source="output_source",
        prefill_source=pl.when(pl.col("own_prefill_ns").is_not_null())
        .then(pl.lit("recorded"))
        .otherwise(pl.lit(prefill_from)),
        decode_source=pl.when(pl.col("own_decode_ns").is_not_null())
        .then(pl.lit("recorded"))
        .otherwise(pl.lit(decode_from)),
    ).cast(WORKLOAD_SCHEMA)
    return Workload(
        requests=frame,
        t0=t0 if isinstance(t0, datetime) else EPOCH,
        notes=tuple(notes),
        decode_fallback_tokens_per_s=NS / decode_ns,
        prefill_fallback_tokens_per_s=prefill_rate,
    )


def workload_from_arrays(
    arrival_s: list[float],
    prompt_tokens: list[int],
    output_tokens: list[int],
    *,
    prefill_s: float | list[float] = 0.05,
    decode_s_per_token: float | list[float] = 0.02,
    max_tokens: list[int] | None = None,
) -> Workload:
    """A workload stated directly (generators, tests, what-if studies without a trace)."""
    n = len(arrival_s)
    pre = prefill_s if isinstance(prefill_s, list) else [prefill_s] * n
    dec = decode_s_per_token if isinstance(decode_s_per_token, list) else [decode_s_per_token] * n
    frame = pl.DataFrame(
        {
            "request_id": [f"r{k}" for k in range(n)],
            "arrival_ns": [round(a * NS) for a in arrival_s],
            "prompt_tokens": prompt_tokens,
            "output_tokens": [max(o, 1) for o in output_tokens],
            "max_tokens": max_tokens if max_tokens is not None else output_tokens,
            "prefill_ns": [max(1, round(x * NS)) for x in pre],
            "decode_ns_per_token": [max(1, round(x * NS)) for x in dec],
        },
        schema_overrides=dict.fromkeys(("arrival_ns", "prompt_tokens", "output_tokens"), pl.Int64),
    )
    return workload_from_frame(frame)


def workload_from_frame(frame: pl.DataFrame, *, t0: datetime | None = None) -> Workload:
    """A workload from a frame with at least ``arrival_ns``, ``prompt_tokens``,
    ``output_tokens``, ``prefill_ns`` and ``decode_ns_per_token``; the rest is filled in."""
    start = t0 or EPOCH
    defaults = {
        "request_id": pl.format("r{}", pl.int_range(pl.len())),
        "max_tokens": pl.col("output_tokens"),
        "output_source": pl.lit("recorded"),
        "prefill_source": pl.lit("recorded"),
        "decode_source": pl.lit("recorded"),
    }
    frame = frame.with_columns(
        [expr.alias(name) for name, expr in defaults.items() if name not in frame.columns]
    ).with_columns(
        arrival=pl.lit(start, dtype=pl.Datetime("ns", "UTC"))
        + pl.duration(nanoseconds=pl.col("arrival_ns"))
    )
    frame = frame.select(list(WORKLOAD_SCHEMA)).cast(WORKLOAD_SCHEMA)
    frame = frame.sort("arrival_ns", maintain_order=True)
    return Workload(frame, start, (), None, None)
