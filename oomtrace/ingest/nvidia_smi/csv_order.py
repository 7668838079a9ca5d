"""``--query-gpu`` rows that name no GPU (no ``index``, ``uuid`` or bus id), as a one-off paste
shows them: ``nvidia-smi --query-gpu=gpu_name,memory.total,memory.used --format=csv`` printed
one row per GPU, in index order (aristocratos/bpytop issue 26). Where the paste shows the
command and it queried every GPU (no ``-i``/``--id``), the n-th row under a header is device n;
where it does not, or queried a selection, the device stays unknown (a note says so).
"""

from __future__ import annotations

import re
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics

# The command as a shell line shows it (behind any prompt).
_COMMAND: Final = re.compile(r"\bnvidia-smi(?:\.exe)?\s.*--query-gpu[= ]")
_SELECTION: Final = re.compile(r"\s(?:-i|--id)(?:[= ]|\d)")


class QueryCommands:
    """The ``--query-gpu`` commands a file shows, and whether each queried every GPU."""

    def __init__(self) -> None:
        self.every_gpu: list[bool] = []

    def add(self, lines: pl.Series) -> None:
        for line in lines.filter(lines.str.contains(_COMMAND.pattern)).to_list():
            self.every_gpu.append(not _SELECTION.search(line))

    def by_position(self, samples: pl.DataFrame, diag: SourceDiagnostics) -> pl.DataFrame:
        """``samples`` (``n``: the row's line) with the device of each unnamed GPU row taken
        from its place under its header, where the one command shown queried every GPU."""
        unnamed = (
            pl.col("device").is_null()
            & pl.col("device_ref").is_null()
            & pl.col("metric").str.starts_with("device_")
        )
        if self.every_gpu != [True] or not samples.select(unnamed.any()).item():
            return samples
        lines = samples.filter(unnamed).select("n").unique().sort("n")
        # a run of consecutive lines is one query's output: the first row is GPU 0
        run = (pl.col("n").diff().fill_null(1) != 1).cum_sum()
        places = lines.with_columns(place=pl.int_range(pl.len()).over(run).cast(pl.Int32))
        diag.note(
            "the rows name no GPU, but the command above them queried every GPU, which "
            "nvidia-smi lists in index order: the first row under the header is device 0"
        )
        return (
            samples.join(places, on="n", how="left")
            .with_columns(device=pl.when(unnamed).then(pl.col("place")).otherwise(pl.col("device")))
            .drop("place")
        )
