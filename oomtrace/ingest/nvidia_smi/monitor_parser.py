"""``nvidia-smi dmon`` and ``pmon``, the scrolling monitors (``docs/formats/nvidia-smi.md``).

Both print a header of column names and a line of units, each behind ``#``, then one row per GPU
(``dmon``) or per process (``pmon``) per interval, and repeat the header now and then::

    # gpu    pwr  gtemp  mtemp     sm    mem   mclk   pclk     fb   bar1
    # Idx      W      C      C      %      %    MHz    MHz     MB     MB
        0    294     81      -     98     57  13365   1897  90538      4

    # gpu         pid   type     sm    mem     fb   ccpm    command
    # Idx           #    C/G      %      %     MB     MB    name
        0    2094147     C     92     52  90480      0    sglang::schedul

The memory column is ``fb`` (``-s m``): the frame buffer in use, labelled ``MB`` but in MiB, the
unit ``memory.used`` and ``used_memory`` print (the same figures side by side in one capture).
A ``dmon`` row's ``fb`` is ``device_used_bytes``; a ``pmon`` row's is ``process_used_bytes`` of
its pid, and its command (cut to 15 characters) a ``process`` event. ``-`` is no value; a
``pmon`` row with ``-`` for its pid is a GPU with no process.

A monitor quoted in a Markdown reply keeps its ``> `` marks and often a ``\\#`` escaped so that
the header is no heading; both are taken off first.

Time: ``-o D`` adds a ``Date`` column (``YYYYMMDD``), ``-o T`` a ``Time`` column (``HH:MM:SS``),
local time without a zone, read in ``--tz`` (UTC otherwise, recorded as assumed). A monitor
without both keeps its rows in file order with no made-up time (a time of day alone names no day).
"""

from __future__ import annotations

import re
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.nvidia_smi.local_times import in_file_order, place_local_times
from oomtrace.ingest.nvidia_smi.processes import process_events
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, first_line
from oomtrace.units import MiB

CONFIDENCE: Final = 0.85
_INSIDE_OTHER_TEXT: Final = 0.5
_AROUND: Final = 5
# The header: "# gpu ...", "#Date       Time        gpu ..." (a monitor's first column is gpu).
HEADER: Final = r"^\s*#\s*(?:Date\s+)?(?:Time\s+)?gpu\s+\S"
UNITS: Final = r"^\s*#\s*(?:YYYYMMDD\s+)?(?:HH:MM:SS\s+)?Idx\b"
_ROW: Final = r"^\s*(?:\d{8}\s+)?(?:\d{2}:\d{2}:\d{2}\s+)?\d+\s+\S"
_SNIFF: Final = re.compile(r"(?m)" + HEADER + r".*\n" + UNITS)
_MONITOR_LINE = re.compile(f"{HEADER}|{UNITS}|{_ROW}")
# A monitor quoted in a Markdown reply ("> ") whose "#" was escaped so that it is not a heading
# ("> \# gpu   pwr ..."): both are taken off before the lines are read.
_QUOTED: Final = r"^(?:[ \t]*>)+ ?"
_ESCAPED_HASH: Final = r"^(\s*)\\#"


def _unquoted_text(text: str) -> str:
    return re.sub(r"(?m)" + _ESCAPED_HASH, r"\1#", re.sub(r"(?m)" + _QUOTED, "", text))


def _unquoted(line: pl.Expr) -> pl.Expr:
    return line.str.replace(_QUOTED, "").str.replace(_ESCAPED_HASH, "$1#")


class NvidiaSmiMonitorParser:
    """The ``nvidia-smi-monitor`` format: ``nvidia-smi dmon`` or ``pmon`` output."""

    name = "nvidia-smi-monitor"
    description = "nvidia-smi dmon/pmon: device or process frame-buffer use per interval"

    def sniff(self, head: str, name: str) -> float:
        head = _unquoted_text(head)
        if "\x00" in head or not _SNIFF.search(head):
            return 0.0
        lines = [line for line in head.splitlines()[:400] if line.strip()]
        other = sum(1 for line in lines if not _MONITOR_LINE.match(line))
        return CONFIDENCE if other <= _AROUND else _INSIDE_OTHER_TEXT

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        lines = source.numbered_lines(diag)
        lines = lines.with_columns(_unquoted(pl.col("line")))
        lines = lines.with_columns(
            layout=pl.col("line").str.contains(HEADER).cast(pl.Int64).cum_sum(),
        )
        return _Monitor(lines, ctx, diag).result()


class _Monitor:
    def __init__(self, lines: pl.DataFrame, ctx: ParseContext, diag: SourceDiagnostics) -> None:
        self.lines, self.ctx, self.diag = lines, ctx, diag
        self.tz = ctx.clock.tz or "UTC"

    def result(self) -> ParseResult:
        headers = self.lines.filter(pl.col("line").str.contains(HEADER))
        units = self.lines.filter(pl.col("line").str.contains(UNITS))
        rows = self.lines.filter(
            (pl.col("layout") > 0) & pl.col("line").str.contains(_ROW)
        ).with_columns(cells=pl.col("line").str.extract_all(r"\S+"))
        self.diag.lines_recognised += headers.height + units.height
        read = [
            self._read(rows.filter(pl.col("layout") == layout), line)
            for layout, line in headers.select("layout", "line").unique("layout").iter_rows()
        ]
        frames = [f for f in read if f is not None and f.height]
        self._count_rest(rows)
        if not frames:
            return ParseResult()
        found = pl.concat(frames, how="diagonal_relaxed")
        timed = found.filter(pl.col("local").is_not_null())
        if timed.height < found.height:
            self._untimed_note(timed.height, found.height)
        if 0 < timed.height < found.height:
            lost = found.height - timed.height
            self.diag.lines_recognised -= lost
            self.diag.skip("monitor row without a date and time", lost, None)
            found = timed
        if timed.height:
            result = ParseResult(clock={"tz": self.tz, "tz_assumed": self.ctx.clock.tz is None})
            if self.ctx.clock.tz is None:
                self.diag.note(
                    "nvidia-smi prints its time without a zone; read as UTC (pass --tz ZONE with "
                    "the host's zone)"
                )
            placed = place_local_times(timed, self.tz, self.diag)
        else:
            result, placed = ParseResult(), in_file_order(found)
        result.samples = placed.drop("name", strict=False)
        named = placed.filter(pl.col("pid").is_not_null()).with_columns(
            device_ref=pl.lit(None, pl.String)
        )
        events = process_events(named) if "name" in named.columns else pl.DataFrame()
        result.events = events if events.height else None
        return result

    def _read(self, rows: pl.DataFrame, header: str) -> pl.DataFrame | None:
        """The rows under one header: their time, GPU, pid and frame buffer."""
        columns = header.strip().lstrip("#").split()
        at = {name: i for i, name in enumerate(columns)}
        if "gpu" not in at or "fb" not in at:
            self.diag.skip("monitor row without an fb column (use -s m)", rows.height, None)
            return None
        cell = pl.col("cells").list
        # a row short of the header's columns is cut (the last line of a paste)
        whole = rows.filter(cell.len() >= len(columns))
        self.diag.skip("monitor row cut short", rows.height - whole.height, None)
        pmon = "pid" in at
        fb = cell.get(at["fb"]).cast(pl.Int64, strict=False)
        pid = cell.get(at["pid"]).cast(pl.Int64, strict=False) if pmon else pl.lit(None, pl.Int64)
        frame = whole.select(
            "n",
            local=_local(at),
            device=cell.get(at["gpu"]).cast(pl.Int32, strict=False),
            pid=pid,
            value=(fb * MiB).cast(pl.Float64),
            **({"name": cell.slice(at["command"]).list.join(" ")} if "command" in at else {}),
        )
        idle = frame.filter(pl.col("pid").is_null()).height if pmon else 0
        self.diag.skip("pmon row of a GPU with no process", idle, None)
        frame = frame.filter(pl.col("pid").is_not_null()) if pmon else frame
        blank = frame.filter(pl.col("value").is_null()).height
        self.diag.skip("monitor row whose fb is '-' (not measured)", blank, None)
        frame = frame.filter(pl.col("value").is_not_null())
        self.diag.lines_recognised += frame.height
        metric = "process_used_bytes" if pmon else "device_used_bytes"
        return frame.with_columns(metric=pl.lit(metric))

    def _count_rest(self, rows: pl.DataFrame) -> None:
        taken = pl.col("line").str.contains(f"{HEADER}|{UNITS}") | pl.col("n").is_in(
            rows["n"].implode()
        )
        rest = self.lines.filter(~taken)
        blank = rest.filter(pl.col("line").str.strip_chars() == "")
        self.diag.skip("blank line", blank.height, "")
        other = rest.filter(pl.col("line").str.strip_chars() != "")
        self.diag.skip(
            "not part of nvidia-smi dmon/pmon output", other.height, first_line(other["line"])
        )

    def _untimed_note(self, timed: int, found: int) -> None:
        if timed:
            self.diag.note(
                f"{found - timed:,} monitor row(s) without a date and time (-o DT) among rows "
                "with one cannot be placed in time; left out",
                lost=True,
            )
        else:
            self.diag.note(
                "the monitor prints no date and time (-o DT): its rows keep their order and no "
                "made-up time"
            )


def _local(at: dict[str, int]) -> pl.Expr:
    """The row's local wall-clock time where the monitor prints both its date and its time."""
    if "Date" not in at or "Time" not in at:
        return pl.lit(None, pl.Datetime("ns"))
    cell = pl.col("cells").list
    text = pl.concat_str(cell.get(at["Date"]), pl.lit(" "), cell.get(at["Time"]))
    return text.str.to_datetime("%Y%m%d %H:%M:%S", strict=False, time_unit="ns")


PARSER: Final = NvidiaSmiMonitorParser()
