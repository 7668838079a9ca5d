"""What the analysis reads of the ``samples`` table, in one streaming pass.

A day at 100 Hz is tens of millions of rows, nearly all of them a few memory series. The table is
never held whole: the rows of the memory metrics are streamed in batches and split into one
``ts, value`` frame per series (:class:`~oomtrace.analysis.index.SeriesIndex`); every other row
(engine, KV and scheduler metrics, sampled about once a second) is kept as it is; and the table's
totals (rows, time span per node, metrics, sources) are counted on the way.

Series are told apart by an exact integer code per row: each key column's values are numbered in
the order they appear (a handful per column) and the numbers packed into one integer, so that a
batch splits by comparing integers, never by hashing strings. The same checks as
:func:`oomtrace.schema.conform` run on the way (required values present, metrics in the
vocabulary, whole numbers where the metric counts); a row that fails one is reported by the
caller's ``invalid`` (which, for a scanned directory, reads it the strict way to raise the same
error).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from oomtrace.analysis.index import SeriesIndex, series_label
from oomtrace.analysis.observed_series import SERIES_KEYS
from oomtrace.schema import METRICS, REQUIRED, SAMPLES, TS, WHOLE_NUMBER_KINDS

CHUNK_ROWS: Final = 1_000_000
# Bits of the packed series code per key column (metric first): values beyond are read exactly
# but slowly (a key-column grouping per batch).
_BITS: Final = {"metric": 6, "node": 12, "source": 12, "device": 12, "pid": 20}
_FEW: Final = 4  # up to this many names per key column are told apart by comparison
WHOLE_METRICS: Final = [m for m, (kind, _) in METRICS.items() if kind in WHOLE_NUMBER_KINDS]

Invalid = Callable[[], None]  # called when a value fails a check


@dataclass(frozen=True)
class SampleView:
    """``memory``: one series per ``(node, source, device, pid, metric)`` of the memory metrics;
    ``other``: every other row (canonical columns); ``rows``, ``spans`` (``node, first, last``),
    ``metrics`` and ``sources``: the whole table's totals."""

    memory: SeriesIndex
    other: pl.DataFrame
    rows: int
    spans: pl.DataFrame
    metrics: frozenset[str]
    sources: frozenset[str]

    @property
    def empty(self) -> bool:
        return self.rows == 0

    @property
    def several_nodes(self) -> bool:
        """Whether the table holds more than one node: series labels then name theirs."""
        return self.spans.height > 1


class Numbering:
    """Values of one key column numbered from 1 in order of appearance (0 is null)."""

    def __init__(self, column: str, dtype: pl.DataType) -> None:
        self.column, self.dtype = column, dtype
        self.values: list[Any] = []
        self.capacity = (1 << _BITS[column]) - 1
        self._code: tuple[int, pl.Expr] | None = None  # the expression, for this many values

    def learn(self, batch: pl.DataFrame) -> bool:
        """Number the batch's new values; False when they no longer fit the code."""
        known = set(self.values)
        self.values += [v for v in batch[self.column].unique(maintain_order=True) if v not in known]
        if None in self.values:
            self.values.remove(None)
        return len(self.values) <= self.capacity

    def code(self) -> pl.Expr:
        """The value's number; a value not numbered yet fails the cast (text) or gives null
        (integers), so that the caller numbers the batch's values and codes it again. Built
        once for each set of values (a day is a hundred batches, the values known after the
        first few)."""
        if self._code is None or self._code[0] != len(self.values):
            self._code = (len(self.values), self._build())
        return self._code[1]

    def _build(self) -> pl.Expr:
        col = pl.col(self.column)
        if self.dtype == pl.String and len(self.values) > _FEW:
            physical = col.cast(pl.Enum(self.values)).to_physical().cast(pl.UInt64) + 1
            return physical.fill_null(0)
        if self.dtype == pl.String:  # a few names: comparing is cheaper than a lookup
            code = pl.lit(None, pl.UInt64)  # a name not numbered yet
            for number, value in reversed(list(enumerate(self.values, start=1))):
                code = pl.when(col == value).then(pl.lit(number, pl.UInt64)).otherwise(code)
            return pl.when(col.is_null()).then(pl.lit(0, pl.UInt64)).otherwise(code)
        numbers = range(1, len(self.values) + 1)
        known = col.replace_strict(self.values, numbers, default=None, return_dtype=pl.UInt64)
        return pl.when(col.is_null()).then(pl.lit(0, pl.UInt64)).otherwise(known)

    def value(self, number: int) -> Any:
        return None if number == 0 else self.values[number - 1]


def numberings_of(schema: pl.Schema) -> list[Numbering]:
    """The key columns' numberings, packed into a series code in this order."""
    return [Numbering(c, schema[c]) for c in ("metric", "node", "source", "device", "pid")]


def _packed(numberings: list[Numbering]) -> pl.Expr:
    code, shift = pl.lit(0, pl.UInt64), 0
    for numbering in numberings:
        code = code + (numbering.code() * (1 << shift))
        shift += _BITS[numbering.column]
    return code


def series_key(numberings: list[Numbering], code: int) -> tuple[Any, ...]:
    values: dict[str, Any] = {}
    for numbering in numberings:
        bits = _BITS[numbering.column]
        values[numbering.column] = numbering.value(code & ((1 << bits) - 1))
        code >>= bits
    return tuple(values[c] for c in SERIES_KEYS)


def split_series(
    samples: pl.LazyFrame, metrics: Iterable[str], *, chunk_rows: int = CHUNK_ROWS
) -> dict[tuple[Any, ...], pl.DataFrame]:
    """``ts, value`` of every series of ``metrics``, keyed by ``(node, source, device, pid,
    metric)``, each in time order (the table's order among rows of one instant)."""
    wanted = list(metrics)
    rows = samples.filter(pl.col("metric").is_in(wanted)).select("ts", "value", *SERIES_KEYS)
    numberings = numberings_of(samples.collect_schema())
    chunks: dict[int, list[pl.DataFrame]] = {}
    batches = rows.collect_batches(chunk_size=chunk_rows)
    for batch in batches:
        coded = coded_batch(batch, numberings)
        if coded is None:
            return _split_exactly(rows)
        # one pass over the batch, however many series it holds (a filter per series is one
        # pass each: hundreds with per-process series on a multi-GPU node)
        parts = coded.partition_by("_code", as_dict=True, maintain_order=True, include_key=False)
        for (code,), part in parts.items():
            chunks.setdefault(int(code), []).append(part)
    out = {}
    times: list[pl.Series] = []
    for code in list(chunks):  # one series at a time: its batches go as it is put together
        frame = _in_time_order(chunks.pop(code))
        out[series_key(numberings, code)] = _sharing_times(frame, times)
    return dict(sorted(out.items(), key=lambda kv: _sort_key(kv[0])))


def _sharing_times(frame: pl.DataFrame, times: list[pl.Series]) -> pl.DataFrame:
    """``frame`` with the times of an earlier series where they are the same (``times``: those
    seen so far): series sampled together (the device, the allocator's allocated and reserved
    bytes at 100 Hz) then hold one time column, not one each (a day: 66 MiB a series)."""
    ts = frame["ts"]
    same = next((t for t in times if t.len() == ts.len() and t.equals(ts)), None)
    if same is None:
        times.append(ts)
        return frame
    return frame.with_columns(same)


def coded_batch(batch: pl.DataFrame, numberings: list[Numbering]) -> pl.DataFrame | None:
    """``ts, value, _code`` of a batch; its new key values are numbered first when it has any
    (None when they no longer fit the code)."""
    try:
        frame = batch.select("ts", "value", _code=_packed(numberings))
        if not frame["_code"].has_nulls():
            return frame
    except pl.exceptions.InvalidOperationError:  # text not numbered yet
        pass
    if not all(n.learn(batch) for n in numberings):
        return None
    return batch.select("ts", "value", _code=_packed(numberings))


def _split_exactly(rows: pl.LazyFrame) -> dict[tuple[Any, ...], pl.DataFrame]:
    """The same split for tables with too many distinct keys to pack: a grouping by the keys."""
    frame = rows.collect()
    parts = frame.partition_by(SERIES_KEYS, as_dict=True, include_key=False, maintain_order=True)
    out = {key: _in_time_order([part]) for key, part in parts.items()}
    return dict(sorted(out.items(), key=lambda kv: _sort_key(kv[0])))


def _in_time_order(parts: list[pl.DataFrame]) -> pl.DataFrame:
    one = pl.concat(parts, rechunk=True)
    if one["ts"].is_sorted():  # flagged, so that rolling windows and searches trust it
        return one.with_columns(pl.col("ts").set_sorted())
    return one.sort("ts", maintain_order=True)


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((value is None, value) for value in key)


def memory_index(
    series: dict[tuple[Any, ...], pl.DataFrame],
    *,
    unit: str,
    by_node: bool,
    kind: str = "observed",
) -> SeriesIndex:
    """The series by label; ``by_node``: the labels name the node (the trace holds several: two
    nodes' series of one source, device and pid would otherwise share a label, one replacing
    the other). The caller decides it from the whole samples table, so that every index built of
    one trace (a window's read, the buckets') labels a series the same way."""
    parts: dict[str, pl.DataFrame] = {}
    meta: dict[str, dict[str, Any]] = {}
    for (node, source, device, pid, metric), frame in series.items():
        name = series_label(str(metric), str(source), device, pid, node if by_node else None)
        parts[name] = frame
        meta[name] = {
            "kind": kind,
            "node": node,
            "source": source,
            "device": device,
            "pid": pid,
            "metric": metric,
            "unit": unit,
        }
    return SeriesIndex(parts, meta)


def read_samples(
    samples: pl.LazyFrame, memory_metrics: Iterable[str], invalid: Invalid
) -> SampleView:
    """The samples table as the analysis reads it (see the module docstring)."""
    wanted = list(memory_metrics)
    series = split_series(samples, wanted)
    other = (
        samples.filter(~pl.col("metric").is_in(wanted) | pl.col("metric").is_null())
        .collect()
        .select(SAMPLES.names())
    )
    _check(series, other, invalid)
    spans = spans_of({k: _ends(f) for k, f in series.items() if f.height}, other)
    return SampleView(
        memory=memory_index(series, unit="bytes", by_node=spans.height > 1),
        other=other,
        rows=other.height + sum(f.height for f in series.values()),
        spans=spans,
        metrics=frozenset([*other["metric"].unique().to_list(), *(k[4] for k in series)]),
        sources=frozenset([*other["source"].unique().to_list(), *(k[1] for k in series)]),
    )


def _check(
    series: dict[tuple[Any, ...], pl.DataFrame], other: pl.DataFrame, invalid: Invalid
) -> None:
    """What :func:`oomtrace.schema.conform` checks of sample values, on the split table."""
    whole = pl.col("value") != pl.col("value").round(0)
    for (node, source, _device, _pid, metric), frame in series.items():
        if node is None or source is None or frame["ts"].has_nulls() or frame["value"].has_nulls():
            invalid()
        if metric in WHOLE_METRICS and frame.select(whole.any()).item():
            invalid()
    check_other(other, invalid)


def check_other(other: pl.DataFrame, invalid: Invalid) -> None:
    """The checks of :func:`oomtrace.schema.conform` on the rows other than the memory series."""
    whole = pl.col("value") != pl.col("value").round(0)
    required = other.select(pl.any_horizontal(pl.col(c).is_null() for c in REQUIRED["samples"]))
    if required.to_series().any():
        invalid()
    if other.filter(~pl.col("metric").is_in(list(METRICS))).height:
        invalid()
    if other.filter(pl.col("metric").is_in(WHOLE_METRICS) & whole).height:
        invalid()


def _ends(frame: pl.DataFrame) -> tuple[int, int]:
    ns = frame["ts"].to_physical()
    return int(ns[0]), int(ns[-1])


def spans_of(ends: dict[tuple[Any, ...], tuple[int, int]], other: pl.DataFrame) -> pl.DataFrame:
    """First and last sample time per node (``ends``: each memory series' first and last, in
    nanoseconds, so that nothing is rounded to a Python datetime's microseconds)."""
    of_series = pl.DataFrame(
        {
            "node": [key[0] for key in ends],
            "first": pl.Series([e[0] for e in ends.values()], dtype=pl.Int64).cast(TS),
            "last": pl.Series([e[1] for e in ends.values()], dtype=pl.Int64).cast(TS),
        },
        schema={"node": pl.String, "first": TS, "last": TS},
    )
    of_other = other.group_by("node").agg(first=pl.col("ts").min(), last=pl.col("ts").max())
    both = pl.concat([of_other, of_series])
    return both.group_by("node").agg(pl.col("first").min(), pl.col("last").max()).sort("node")
