"""Who held the device when PyTorch ran out of memory: the per-process clauses of its message.

PyTorch (2.1 and later) asks NVML for every compute process on the failing device and prints one
clause each (``reportProcessMemoryInfo`` in ``c10/cuda/CUDACachingAllocator.cpp``, see
``docs/formats/pytorch.md``): ``Including non-PyTorch memory, this process has X memory in use.``
for the process whose pid equals its own ``getpid()``, ``Process P has X memory in use.`` for each
other. NVML gives host pids, so inside a container the failing process never matches its own pid
and is printed as ``Process P`` like the others.

What becomes of them:

* every listed process is a ``process_used_bytes`` sample with its pid;
* the failing process's figure is the event's ``process_bytes``; its pid is the event's ``pid``
  and its sample's, where it can be named: from the line's own ``pid=N`` (vLLM and Ray print one
  before each worker's lines, and for a "this process" clause that pid is NVML's too), or, in a
  container, as the one listed process that holds at least what PyTorch itself had reserved
  (allocated plus reserved-but-unallocated): the failing process must be listed and must hold
  that much, so a single candidate is it.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.schema import empty
from oomtrace.units import bytes_expr

SIZE: Final = r"([0-9.]+) ?(bytes|[KMGTP]iB)"
SELF: Final = r"this process has " + SIZE + r" memory in use"
OTHERS: Final = r"Process (\d+) has ([0-9.]+ ?(?:bytes|[KMGTP]iB)) memory in use"
# A pid the line itself names before the message: vLLM's "(VllmWorker rank=1 pid=254)", Ray's
# "(RayWorkerWrapper pid=1234, ip=...)".
_LINE_PID: Final = r"\bpid=(\d+)\b"
_MESSAGE_START: Final = r"out of memory\. Tried to allocate"


def with_processes(found: pl.DataFrame) -> pl.DataFrame:
    """``found`` (sentences-layout events: ``_t``, ``allocated_bytes``,
    ``reserved_unallocated_bytes``, optionally ``pid``) with ``process_bytes``, ``pid``,
    ``_others`` (a list of ``(pid, bytes)`` structs) and ``_who`` (how the failing process was
    named, for the detail)."""
    self_bytes = bytes_expr(
        pl.col("_t").str.extract(SELF, 1), pl.col("_t").str.extract(SELF, 2)
    ).alias("_self")
    before = pl.col("_t").str.split(_MESSAGE_START).list.first()
    line_pid = before.str.extract(_LINE_PID, 1).cast(pl.Int64, strict=False)
    given = pl.col("pid").cast(pl.Int64) if "pid" in found.columns else pl.lit(None, pl.Int64)
    others = (
        pl.col("_t")
        .str.extract_all(OTHERS)
        .list.eval(
            pl.struct(
                pid=pl.element().str.extract(r"Process (\d+)", 1).cast(pl.Int64, strict=False),
                bytes=bytes_expr(
                    pl.element().str.extract(r"has ([0-9.]+) ?", 1),
                    pl.element().str.extract(r"has [0-9.]+ ?(bytes|[KMGTP]iB)", 1),
                ),
            )
        )
        .alias("_others")
    )
    found = found.with_columns(self_bytes, others, _line_pid=pl.coalesce(given, line_pid))
    # PyTorch's own reserved memory: the failing process holds at least this much.
    own = pl.col("allocated_bytes").fill_null(0) + pl.col("reserved_unallocated_bytes").fill_null(0)
    candidates = (
        found.with_row_index("_row")
        .select("_row", "_others", _own=own)
        .explode("_others")
        .drop_nulls("_others")
        .unnest("_others")
        .filter(pl.col("bytes").is_not_null() & (pl.col("bytes") >= pl.col("_own")))
        .group_by("_row")
        .agg(_cand_pid=pl.col("pid").first(), _cand_bytes=pl.col("bytes").first(), _n=pl.len())
        .filter(pl.col("_n") == 1)
        .drop("_n")
    )
    found = (
        found.with_row_index("_row")
        .join(candidates, on="_row", how="left", maintain_order="left")
        .drop("_row")
    )
    is_self = pl.col("_self").is_not_null()
    return found.with_columns(
        process_bytes=pl.when(is_self).then(pl.col("_self")).otherwise(pl.col("_cand_bytes")),
        pid=pl.when(is_self).then(pl.col("_line_pid")).otherwise(pl.col("_cand_pid")),
        _who=pl.when(is_self & pl.col("_line_pid").is_not_null())
        .then(pl.format('failing process: pid {} ("this process")', pl.col("_line_pid")))
        .when(is_self)
        .then(pl.lit('failing process: "this process", its pid not printed'))
        .when(pl.col("_cand_pid").is_not_null())
        .then(
            pl.format(
                "failing process: pid {}, the only one listed holding PyTorch's reserved memory",
                pl.col("_cand_pid"),
            )
        ),
    ).drop("_self", "_line_pid", "_cand_pid", "_cand_bytes")


def process_samples(events: pl.DataFrame) -> pl.DataFrame:
    """A ``process_used_bytes`` sample for every process the messages list, and for the failing
    process where its pid is known (no process is counted twice)."""
    if "_others" not in events.columns:
        return empty_samples()
    listed = (
        events.select("ts", "device", "_others")
        .explode("_others")
        .drop_nulls("_others")
        .unnest("_others")
        .filter(pl.col("bytes").is_not_null())
        .select("ts", "device", "pid", value="bytes")
    )
    failing = events.filter(
        pl.col("pid").is_not_null() & pl.col("process_bytes").is_not_null()
    ).select("ts", "device", "pid", value="process_bytes")
    rows = pl.concat([listed, failing]).unique(["ts", "device", "pid"], maintain_order=True)
    if rows.height == 0:
        return empty_samples()
    return rows.select(
        "ts",
        pl.col("device").cast(pl.Int32),
        pl.col("pid").cast(pl.Int64),
        metric=pl.lit("process_used_bytes"),
        value=pl.col("value").cast(pl.Float64),
    )


def empty_samples() -> pl.DataFrame:
    return empty("samples").drop("node", "source")
