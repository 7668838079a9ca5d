"""Placing one chunk's records in time, on the printed clock: each record's year offset (the
New Years crossed since the chunk's first printed time), the printed time handed down to lines
without one, and what the chunk tells the whole file (:class:`ChunkInfo`: its clock brief, the
full-time anchor, the printed-versus-full disagreement).

Both readers' records are placed together, in file order: the vectorised reader's one by one,
the scanner's (:mod:`._line_scan`) a run at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from oomtrace.ingest.text.yearless_clock import (
    ChunkYears,
    FullAnchor,
    printed_minus_full,
    year_offsets,
)
from oomtrace.schema import TS


@dataclass
class ChunkInfo:
    """What one chunk tells the whole file: its clock brief and its counters."""

    years: ChunkYears = field(default_factory=ChunkYears)
    full_anchor: FullAnchor | None = None
    full_lines: int = 0
    timed_lines: int = 0
    header_lines: int = 0  # lines with vLLM's header, placeable or not
    disagreement: dict[int, int] = field(default_factory=dict)
    hosts: dict[str, int] = field(default_factory=dict)
    bracketed: int = 0
    glued: int = 0
    rejoined: int = 0  # pieces of records folded at a fixed width, joined to the line before
    ray_collapsed: int = 0
    # which outer prefixes gave full times (their names, as a note says them), on a sample
    time_sources: dict[str, int] = field(default_factory=dict)


def place(frame: pl.DataFrame, info: ChunkInfo, tz: str) -> pl.DataFrame:
    """Local year offsets, the full-time anchor, the printed-versus-full disagreement, then
    the printed time handed down to lines without a header of their own. A ``weight`` column,
    where there is one, says how many records each row stands for (:func:`_place_with`)."""
    offsets, info.years = year_offsets(
        frame.get_column("printed_month_day"), frame.get_column("printed_second_of_day")
    )
    frame = frame.with_columns(offsets.alias("year_offset"))
    full = pl.coalesce(pl.col("arrival_ts"), pl.col("outer_ts"))
    weight = pl.col("weight") if "weight" in frame.columns else pl.lit(1, pl.Int64)
    # Rows with a year offset: those whose printed time exists and names a real month.
    printed = frame.select(
        "printed_month_day",
        "printed_second_of_day",
        "year_offset",
        full.alias("full_ts"),
        weight.alias("weight"),
    ).filter(pl.col("year_offset").is_not_null())
    info.timed_lines = int(printed.get_column("weight").sum())
    both = printed.filter(pl.col("full_ts").is_not_null())
    if both.height:
        info.full_lines = int(both.get_column("weight").sum())
        last = both.row(-1, named=True)
        info.full_anchor = FullAnchor(
            last["printed_month_day"],
            last["printed_second_of_day"],
            last["year_offset"],
            last["full_ts"],
        )
        counts = (
            both.select(printed_minus_full(both, tz).alias("diff"), "weight")
            .group_by("diff")
            .agg(pl.col("weight").sum())
        )
        for value, count in counts.iter_rows():
            if value is not None:
                info.disagreement[int(value)] = info.disagreement.get(int(value), 0) + int(count)
    return frame.with_columns(
        pl.col("printed_month_day", "printed_second_of_day", "year_offset").forward_fill()
    )


def place_with(
    records: pl.DataFrame, runs: pl.DataFrame, info: ChunkInfo, tz: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`place` over the records and the scanner's runs of records together, in file
    order (the year offsets follow every printed time; a line without one takes the time before
    it, whichever reader read that). A run's records share their year offset, their
    disagreement and what a line after them inherits: a run counts as its last record,
    weighted by its length."""
    times = ["record_seq", "printed_month_day", "printed_second_of_day", "arrival_ts", "outer_ts"]
    both = pl.concat(
        [
            records.select(times).with_columns(
                weight=pl.lit(1, pl.UInt32), run=pl.lit(None, pl.Int64)
            ),
            runs.with_columns(
                arrival_ts=pl.lit(None, TS), run=pl.int_range(0, pl.len(), dtype=pl.Int64)
            ).select(*times, "weight", "run"),
        ]
    ).sort("record_seq")
    both = place(both, info, tz)
    placed = ["printed_month_day", "printed_second_of_day", "year_offset"]
    mine = both.filter(pl.col("run").is_null())
    # Both are in record_seq order, so the rows line up.
    records = records.with_columns(mine.get_column(name) for name in placed)
    theirs = both.filter(pl.col("run").is_not_null()).select(placed)
    return records, theirs
