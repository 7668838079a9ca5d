"""The memory values of nvidia-smi CSV rows as integer bytes (``docs/formats/nvidia-smi.md``).

Values carry their unit (``1234 MiB``) unless ``nounits``, when the header's unit (or MiB,
nvidia-smi's memory unit) applies; bracketed states (``[N/A]``, ``[Not Supported]``) and text
that is no size are left out and counted in a note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.schema import OUT_OF_RANGE
from oomtrace.units import bytes_beyond_range, bytes_expr

if TYPE_CHECKING:
    from oomtrace.ingest.nvidia_smi.csv_parser import Layout

_UNAVAILABLE: Final = r"^\[.*\]$|^N/A$"
_QUANTITY: Final = r"^(?<number>[0-9]+(?:\.[0-9]+)?)\s*(?<unit>[A-Za-z]+)?$"


def memory_bytes(
    cells: pl.DataFrame, fields: dict[str, str], layout: Layout, diag: SourceDiagnostics
) -> pl.DataFrame:
    """Adds each memory field's integer bytes under its metric name (``fields``: field to
    metric); unavailable and unreadable values become null and are counted in a note."""
    cells = cells.with_columns(
        pl.col(layout.column(f) or "").str.extract_groups(_QUANTITY).alias(f"q_{f}") for f in fields
    )
    checks: list[pl.Expr] = []
    for f in fields:
        raw, number = pl.col(layout.column(f) or ""), pl.col(f"q_{f}").struct.field("number")
        unavailable = raw.str.contains(_UNAVAILABLE)
        beyond = bytes_beyond_range(number, _unit(f, layout))
        checks += [
            unavailable.sum().alias(f"unavailable {f}"),
            (number.is_null() & ~unavailable).sum().alias(f"unreadable {f}"),
            raw.filter(number.is_null() & ~unavailable).first().alias(f"example {f}"),
            (number.is_not_null() & pl.col(f"q_{f}").struct.field("unit").is_null())
            .sum()
            .alias(f"unitless {f}"),
            beyond.sum().alias(f"beyond {f}"),
            raw.filter(beyond).first().alias(f"too large {f}"),
        ]
    counts = cells.select(checks).row(0, named=True) if fields else {}
    for f in fields:
        diag.skip(OUT_OF_RANGE, counts[f"beyond {f}"], counts[f"too large {f}"])
        if counts[f"unavailable {f}"]:
            diag.note(
                f"{f}: {counts[f'unavailable {f}']:,} value(s) were [N/A], [Not Supported] or "
                "another unavailable state; left out",
                lost=True,
            )
        if counts[f"unreadable {f}"]:
            diag.note(
                f"{f}: {counts[f'unreadable {f}']:,} value(s) are not a size "
                f"({counts[f'example {f}']!r}); left out",
                lost=True,
            )
        if layout.unit(f) is None and counts[f"unitless {f}"]:
            diag.note(f"{f}: values without a unit were read as MiB, nvidia-smi's memory unit")
    return cells.with_columns(
        bytes_expr(pl.col(f"q_{f}").struct.field("number"), _unit(f, layout)).alias(metric)
        for f, metric in fields.items()
    )


def _unit(field: str, layout: Layout) -> pl.Expr:
    """A memory cell's unit: its own, the header's, or nvidia-smi's MiB."""
    return pl.col(f"q_{field}").struct.field("unit").fill_null(pl.lit(layout.unit(field) or "MiB"))
