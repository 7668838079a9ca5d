"""A figure a log states at each start of the server it comes from (the KV pool, a budget):
the first start's is kept, and a later start that states another is a note, not a silent
overwrite."""

from __future__ import annotations

from typing import Any

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics


def first_stated(
    lines: pl.Series,
    patterns: tuple[str, ...],
    key: str,
    diag: SourceDiagnostics,
    dtype: pl.DataType,
) -> Any:
    """The first value that group 1 of one of ``patterns`` (the wordings of one figure) finds
    among ``lines``, cast to ``dtype``; None when no line states it."""
    found = pl.select(pl.coalesce(lines.str.extract(p, 1) for p in patterns)).to_series()
    values = found.drop_nulls().cast(dtype, strict=False).drop_nulls()
    if values.len() == 0:
        return None
    if values.n_unique() > 1:
        diag.note(
            f"{key}: the log states {values.unique(maintain_order=True).to_list()} "
            "(several starts); kept the first"
        )
    return values[0]
