"""nvidia-smi's local wall-clock times (``YYYY/MM/DD HH:MM:SS.mmm``, no zone) as instants.

``docs/formats/nvidia-smi.md``: the ``timestamp`` field is local time without a zone; it is read
in ``--tz`` (UTC unless given, recorded as assumed by the parser). Rows of a query without
``timestamp`` have no time at all and keep their order instead.
"""

from __future__ import annotations

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.alignment.anchoring import ORDER
from oomtrace.schema import TS


def place_local_times(frame: pl.DataFrame, tz: str, diag: SourceDiagnostics) -> pl.DataFrame:
    """Place local wall-clock times in ``tz``. In the repeated hour of a DST fall-back, rows after
    the clock went back (in file order) take the later instant, so a loop's time never runs
    backwards; rows in a spring-forward gap do not exist in ``tz`` and are left out."""
    frame = frame.sort("n")
    local = pl.col("local")
    earliest = local.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
    latest = local.dt.replace_time_zone(tz, ambiguous="latest", non_existent="null")
    went_back = (local.diff() < pl.duration(seconds=0)).fill_null(value=False).cum_sum() > 0
    frame = frame.with_columns(
        ts=pl.when((earliest != latest) & went_back).then(latest).otherwise(earliest)
    )
    gap = frame.filter(pl.col("ts").is_null())
    if gap.height:
        diag.note(
            f"{gap.height:,} value(s) carry a local time that does not exist in {tz} (the "
            "hour skipped by a DST change); left out",
            lost=True,
        )
    return frame.filter(pl.col("ts").is_not_null()).select(
        pl.col("ts").dt.convert_time_zone("UTC"), pl.exclude("n", "local", "ts")
    )


def in_file_order(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows without a time: a null ``ts`` and their line as ``order``, for alignment to anchor
    or leave un-timed (a snapshot states no failure, so in practice they stay un-timed)."""
    return frame.sort("n").select(
        pl.lit(None, dtype=TS).alias("ts"), pl.col("n").alias(ORDER), pl.exclude("n", "local")
    )
