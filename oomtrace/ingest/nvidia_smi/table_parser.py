"""nvidia-smi's default table, as people paste it into bug reports (``docs/formats/nvidia-smi.md``).

Each table is one snapshot: per GPU its memory used and total (``device_used_bytes``,
``device_total_bytes``; MiB, so exact), per process its memory (``process_used_bytes`` with its
pid) and its name (a ``process`` event, :mod:`.processes`). The GPUs' bus ids tie their indexes
to the bus ids other inputs name them by (``--query-compute-apps`` with ``gpu_bus_id``).

Time: the line nvidia-smi prints above each table (``Sun Mar 29 20:25:44 2026``, local time,
read in ``--tz``, UTC otherwise, recorded as assumed; alignment may then correct the zone). A
paste without it keeps its rows in file order with no made-up time (``clock`` ``untimed``); in a
file whose other tables have time lines, a table without one is left out, counted. Line patterns:
:mod:`.table_lines`.
"""

from __future__ import annotations

import re
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.alignment.anchoring import ORDER
from oomtrace.ingest.nvidia_smi import table_lines as tl
from oomtrace.ingest.nvidia_smi.processes import process_events
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, first_line
from oomtrace.ingest.text.timestamps import localize
from oomtrace.schema import TS
from oomtrace.units import MiB

CONFIDENCE: Final = 0.85
# A table inside other output (an engine log, a PyTorch traceback): any parser of that output is
# more sure, and the table goes to whichever claims the file.
INSIDE_OTHER_TEXT: Final = 0.5
_AROUND_A_TABLE: Final = 5
_SNIFF_TABLE = re.compile(tl.SNIFF_TABLE)
_TABLE_LINE = re.compile(tl.LEAD + r"[|+]|" + tl.TIME)
_SNIFF_PROCESSES = re.compile(tl.SNIFF_PROCESSES)
_SNIFF_MIG = re.compile(tl.SNIFF_MIG)
_KINDS: Final = {
    "time": tl.TIME,
    "header": tl.HEADER,
    "gpu": tl.GPU_ROW,
    "process": tl.PROCESS_ROW,
    "mig": tl.MIG_ROW,
    "none": tl.NO_PROCESSES,
}
# A MIG GPU instance's memory is its own, not its GPU's: its rows keep the GPU's index and are
# told apart from the GPU's own series by this source qualifier (``smi.txt#mig=1``).
MIG_SOURCE: Final = "mig="


class NvidiaSmiTableParser:
    """The ``nvidia-smi-table`` format: ``nvidia-smi``'s default output, one table or many."""

    name = "nvidia-smi-table"
    description = "nvidia-smi's default table: GPU memory and the process list"

    def sniff(self, head: str, name: str) -> float:
        if "\x00" in head:
            return 0.0
        if not any(s.search(head) for s in (_SNIFF_TABLE, _SNIFF_PROCESSES, _SNIFF_MIG)):
            return 0.0
        lines = [line for line in head.splitlines()[:400] if line.strip()]
        table = sum(1 for line in lines if _TABLE_LINE.match(line))
        # a shell prompt or a remark around the table is fine; a log around it is not
        other = len(lines) - table
        return CONFIDENCE if other <= _AROUND_A_TABLE else INSIDE_OTHER_TEXT

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        chunks = [_classify(chunk.lines, chunk.first_line) for chunk in source.line_chunks(diag)]
        lines = pl.concat(chunks) if chunks else _classify(pl.Series([], dtype=pl.String), 1)
        return _Table(lines, ctx, diag).result()


def _classify(lines: pl.Series, first: int) -> pl.DataFrame:
    line = pl.col("line")
    kind = pl.lit(None, pl.String)
    for name, pattern in reversed(_KINDS.items()):
        kind = pl.when(line.str.contains(pattern)).then(pl.lit(name)).otherwise(kind)
    return (
        pl.DataFrame({"line": lines})
        .with_row_index("n", offset=first)
        .with_columns(pl.col("n").cast(pl.Int64), kind=kind)
    )


def embedded_tables(
    lines: pl.Series, first: int, ctx: ParseContext, diag: SourceDiagnostics
) -> tuple[ParseResult, pl.Series]:
    """The tables printed inside another log (TGI's ``text-generation-launcher --env`` report
    holds one), read by the same rules as a table file, and the numbers of the lines read as
    part of them (counted here; the log's own parser counts the rest). ``lines`` are numbered
    from ``first``. Such a table is placed only by its own time line: one without is left out,
    counted (the log's times around it say when it was pasted, not when it was taken)."""
    table = _Table(_classify(lines, first), ctx, diag, embedded=True)
    result = table.result()
    read = table.lines.filter(pl.col("kind").is_not_null()).get_column("n")
    return result, pl.concat([read, table.memory_lines, table.bar1_lines]).sort()


class _Table:
    def __init__(
        self,
        lines: pl.DataFrame,
        ctx: ParseContext,
        diag: SourceDiagnostics,
        *,
        embedded: bool = False,
    ) -> None:
        self.ctx, self.diag, self.embedded = ctx, diag, embedded
        self.tz = ctx.clock.tz or "UTC"
        # A snapshot starts at each header box; the time line above a header is its time.
        header = pl.col("kind") == "header"
        self.lines = lines.with_columns(
            snapshot=header.cum_sum().cast(pl.Int64) + (pl.col("kind") == "time").cast(pl.Int64)
        )
        self.used = 0
        self.memory_lines = pl.Series([], dtype=pl.Int64)
        self.bar1_lines = pl.Series([], dtype=pl.Int64)

    def result(self) -> ParseResult:
        times = self._times()
        gpus = self._gpus()
        processes = self._processes()
        migs = self._migs()
        self.diag.lines_recognised += self.used
        if not self.embedded:
            self._count_rest()
        placed, kept = self._place(times, gpus, processes, migs)
        samples = [f for f in placed.values() if f.height]
        result = ParseResult(
            samples=pl.concat(samples, how="diagonal_relaxed") if samples else None,
            events=process_events(kept) if kept.height else None,
            device_index=dict(gpus.select("bus", "device").unique().drop_nulls().iter_rows()),
        )
        if times.height:
            result.clock = {"tz": self.tz, "tz_assumed": self.ctx.clock.tz is None}
            if self.ctx.clock.tz is None:
                self.diag.note(
                    "nvidia-smi prints its time without a zone; read as UTC (pass --tz ZONE with "
                    "the host's zone)"
                )
        return result

    def _times(self) -> pl.DataFrame:
        rows = self.lines.filter(pl.col("kind") == "time")
        self.used += rows.height
        naive = (
            pl.col("line")
            .str.extract(tl.TIME, 1)
            .str.replace_all(r"\s+", " ")
            .str.to_datetime(tl.TIME_FORMAT, strict=False, time_unit="ns")
        )
        return rows.select("snapshot", ts=localize(naive, self.tz)).drop_nulls("ts")

    def _gpus(self) -> pl.DataFrame:
        """Each GPU row with the memory line right under it."""
        self.used += self.lines.filter(pl.col("kind") == "header").height
        rows = self.lines.filter(pl.col("kind") == "gpu")
        gpus = rows.select("n", "snapshot", g=pl.col("line").str.extract_groups(tl.GPU_ROW)).unnest(
            "g"
        )
        memory = (
            self.lines.filter(pl.col("n").is_in((gpus["n"] + 1).implode()))
            .select("n", m=pl.col("line").str.extract_groups(tl.MEMORY_ROW))
            .unnest("m")
            .with_columns(pl.col("n") - 1)
        )
        joined = gpus.join(memory, on="n", how="left", maintain_order="left").select(
            "n",
            "snapshot",
            device=pl.col("index").cast(pl.Int32, strict=False),
            bus="bus",
            used=_mib("used"),
            total=_mib("total"),
            state="state",
        )
        self.used += joined.height + memory.height
        states = joined.filter(pl.col("total").is_null())
        if states.height:
            shown = states["state"].drop_nulls().unique().sort().to_list()
            self.diag.note(
                f"{states.height} GPU row(s) state no memory figures ({', '.join(shown) or '?'},"
                " e.g. unified memory); their device memory is unknown",
                lost=True,
            )
        self.memory_lines = memory["n"] + 1
        return joined

    def _processes(self) -> pl.DataFrame:
        rows = self.lines.filter(pl.col("kind") == "process")
        found = rows.select(
            "n", "snapshot", p=pl.col("line").str.extract_groups(tl.PROCESS_ROW)
        ).unnest("p")
        memory = pl.col("memory")
        procs = found.select(
            "n",
            "snapshot",
            device=pl.col("gpu").cast(pl.Int32, strict=False),
            pid=pl.col("pid").cast(pl.Int64, strict=False),
            name=pl.col("name").str.strip_chars(),
            used=pl.when(memory.str.ends_with("MiB"))
            .then(memory.str.strip_suffix("MiB").cast(pl.Int64, strict=False) * MiB)
            .otherwise(None),
            cut=memory.str.ends_with("..."),
        )
        self.used += procs.height + self.lines.filter(pl.col("kind") == "none").height
        cut = procs.filter(pl.col("cut"))
        if cut.height:
            self.diag.note(
                f'{cut.height} process row(s) show their memory cut short ("...": the figure '
                "did not fit its column); their memory is left out, their pid and name kept",
                lost=True,
            )
        na = procs.filter(pl.col("used").is_null() & ~pl.col("cut"))
        if na.height:
            self.diag.note(
                f"{na.height} process row(s) state no memory (N/A, e.g. under Windows' display "
                "driver); their memory is unknown",
                lost=True,
            )
        return procs

    def _migs(self) -> pl.DataFrame:
        """Each MIG GPU instance's memory (a compute instance sharing it states none); the BAR1
        line under a row is mapped address space, not device memory."""
        rows = self.lines.filter(pl.col("kind") == "mig")
        found = rows.select("n", "snapshot", m=pl.col("line").str.extract_groups(tl.MIG_ROW))
        migs = found.unnest("m").select(
            "n",
            "snapshot",
            device=pl.col("gpu").cast(pl.Int32, strict=False),
            gi="gi",
            used=_mib("used"),
            total=_mib("total"),
        )
        self.used += migs.height
        after = self.lines.filter(pl.col("n").is_in((migs["n"] + 1).implode()))
        self.bar1_lines = after.filter(pl.col("line").str.contains(tl.MIG_BAR1))["n"]
        self.diag.skip(
            "MIG instance's BAR1 line (mapped address space, not device memory)",
            self.bar1_lines.len(),
            first_line(after.filter(pl.col("n").is_in(self.bar1_lines.implode()))["line"]),
        )
        shared = migs.filter(pl.col("total").is_null()).height
        if shared:
            self.diag.note(
                f"{shared} MIG compute instance row(s) share their GPU instance's memory (stated "
                "once, on the instance's first row)"
            )
        return migs.filter(pl.col("total").is_not_null())

    def _count_rest(self) -> None:
        taken = pl.concat([self.memory_lines, self.bar1_lines]).implode()
        rest = self.lines.filter(pl.col("kind").is_null() & ~pl.col("n").is_in(taken))
        frame = rest.filter(pl.col("line").str.contains(tl.FRAME))
        self.diag.skip(
            "table frame or column heading (no figures)", frame.height, first_line(frame["line"])
        )
        blank = rest.filter(pl.col("line").str.strip_chars() == "")
        self.diag.skip("blank line", blank.height, "")
        other = rest.filter(
            ~pl.col("line").str.contains(tl.FRAME) & (pl.col("line").str.strip_chars() != "")
        )
        self.diag.skip("not part of an nvidia-smi table", other.height, first_line(other["line"]))

    def _place(
        self, times: pl.DataFrame, gpus: pl.DataFrame, processes: pl.DataFrame, migs: pl.DataFrame
    ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
        """Each snapshot at its time. A file of tables without time lines keeps its rows with no
        time, in file order (``order``: their line), for alignment to anchor or leave un-timed;
        in a file that has time lines, a table without one is left out, counted."""
        snapshots = pl.concat([f.select("snapshot") for f in (gpus, processes, migs)]).unique()
        timed = snapshots.join(times.unique("snapshot", keep="last"), on="snapshot", how="left")
        untimed = timed.filter(pl.col("ts").is_null()).height
        if untimed and (times.height or self.embedded):
            among = "inside another log" if self.embedded else "among tables with one"
            self.diag.note(
                f"{untimed} table(s) without nvidia-smi's time line, {among}, "
                "cannot be placed in time; left out",
                lost=True,
            )
            timed = timed.filter(pl.col("ts").is_not_null())
        elif untimed:
            self.diag.note(
                "the table has no time line: its rows keep their order and no made-up time (a "
                "table shows no failure another input could anchor it to)"
            )
        gpu_rows = gpus.join(timed, on="snapshot", how="inner")
        proc_rows = processes.join(timed, on="snapshot", how="inner")
        mig_rows = migs.join(timed, on="snapshot", how="inner")
        # a GPU row and the memory line under it are two lines
        lines = pl.len() + pl.col("total").is_not_null().sum() + pl.col("state").is_not_null().sum()
        gone = gpus.select(lines).item() - gpu_rows.select(lines).item()
        lost = gone + processes.height - proc_rows.height + migs.height - mig_rows.height
        if lost:
            self.diag.lines_recognised -= lost
            self.diag.skip("row of a table with no time", lost, None)
        order = [pl.col("n").alias(ORDER)] if untimed and not times.height else []
        placed = {
            "gpus": _memory(gpu_rows.filter(pl.col("total").is_not_null()), order),
            "migs": _memory(mig_rows.with_columns(source=pl.lit(MIG_SOURCE) + pl.col("gi")), order),
            "processes": proc_rows.filter(pl.col("used").is_not_null()).select(
                pl.col("ts").cast(TS),
                "device",
                "pid",
                *order,
                metric=pl.lit("process_used_bytes"),
                value=pl.col("used").cast(pl.Float64),
            ),
        }
        kept = proc_rows.select(
            pl.col("ts").cast(TS),
            "device",
            "pid",
            "name",
            *order,
            device_ref=pl.lit(None, pl.String),
        )
        return placed, kept


def _mib(column: str) -> pl.Expr:
    """A MiB figure the table prints, as integer bytes (null where it printed none)."""
    return pl.col(column).cast(pl.Int64, strict=False) * MiB


def _memory(rows: pl.DataFrame, order: list[pl.Expr]) -> pl.DataFrame:
    """Rows with ``used`` and ``total`` bytes as two samples each (and their ``source``
    qualifier, where they have one)."""
    index = ["ts", "device", "n", *(["source"] if "source" in rows.columns else [])]
    long = rows.select(*index, "used", "total").unpivot(
        on=["used", "total"], index=index, variable_name="what", value_name="v"
    )
    return long.select(
        pl.col("ts").cast(TS),
        "device",
        *index[3:],
        *order,
        metric=pl.when(pl.col("what") == "used")
        .then(pl.lit("device_used_bytes"))
        .otherwise(pl.lit("device_total_bytes")),
        value=pl.col("v").cast(pl.Float64),
    )


PARSER: Final = NvidiaSmiTableParser()
