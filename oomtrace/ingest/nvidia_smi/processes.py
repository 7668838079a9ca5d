"""The names of the processes nvidia-smi lists, as ``process`` events (``oomtrace/schema.py``).

The per-process memory is a ``process_used_bytes`` sample per row; a name is stated once: one
``process`` event per process (pid, GPU and name) at the first row that shows it, with the name
as nvidia-smi printed it (the default table cuts long names to ``...`` and their last
characters) in ``detail``. Reports join it to the samples by pid.
"""

from __future__ import annotations

import polars as pl

from oomtrace.ingest.alignment.anchoring import ORDER


def process_events(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (``ts``, ``device``, ``device_ref``, ``pid``, ``name``) to ``process`` events."""
    named = rows.filter(
        pl.col("pid").is_not_null() & pl.col("name").is_not_null() & (pl.col("name") != "")
    )
    if named.height == 0:
        return pl.DataFrame()
    key = ["pid", "device", "device_ref", "name"]
    first = named.sort("ts", maintain_order=True).unique(key, keep="first", maintain_order=True)
    # rows of a paste without times carry their line (``order``) instead of a time
    order = [c for c in first.columns if c == ORDER]
    return first.select(
        "ts",
        pl.col("device").cast(pl.Int32),
        "device_ref",
        pl.col("pid").cast(pl.Int64),
        *order,
        kind=pl.lit("process"),
        detail=pl.col("name"),
    )
