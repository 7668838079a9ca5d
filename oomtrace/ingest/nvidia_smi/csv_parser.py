"""nvidia-smi CSV: ``--query-gpu`` and ``--query-compute-apps`` captures, as loops and scripts
leave them (``docs/formats/nvidia-smi.md``).

What real files look like, and what this parser does about it:

* the header names the queried fields in the order asked (``timestamp, index, memory.used [MiB],
  memory.total [MiB]``), so any field order is read through the header; a header without units
  (``nounits``, or a field list pasted as ``timestamp,index,memory.used``) is accepted too;
* values carry their unit (``1234 MiB``) unless ``nounits``; memory is MiB and becomes integer
  bytes (a value with neither its own unit nor one in the header is read as MiB, with a note);
* ``[N/A]``, ``[Not Supported]`` and the other bracketed states are left out, counted per field;
* ``timestamp`` is local time without a zone (``YYYY/MM/DD HH:MM:SS.mmm``): placed with ``--tz``,
  UTC otherwise (recorded as assumed); a DST fall-back hour is resolved by file order;
* a loop that re-runs nvidia-smi repeats the header; a script that appends both queries to one
  file switches layout at each header: every row is read with the header above it;
* a file without any header (``--format=csv,noheader``) cannot be read, since its columns cannot
  be told apart: it is refused with the remedy;
* a one-off query without ``timestamp`` (the usual paste in a bug report) keeps its rows in file
  order with no made-up time (clock ``untimed``, like a default table without its time line);
  in a file whose other rows have times, such rows are left out, counted;
* ``--query-compute-apps`` rows name their GPU by ``gpu_uuid``/``gpu_bus_id``, not by index: the
  ``device_ref`` column lets the orchestrator place them with the index a ``--query-gpu`` capture
  of the same incident (this file or another) states; :attr:`ParseResult.device_index` is that
  statement for the ``--query-gpu`` rows here.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import cache
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest.nvidia_smi.csv_order import QueryCommands
from oomtrace.ingest.nvidia_smi.csv_values import memory_bytes
from oomtrace.ingest.nvidia_smi.local_times import in_file_order, place_local_times
from oomtrace.ingest.nvidia_smi.processes import process_events
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, first_line

log = logging.getLogger(__name__)

# Memory fields (canonical nvidia-smi names and the aliases it accepts) -> metric.
MEMORY_FIELDS: Final[dict[str, str]] = {
    "memory.total": "device_total_bytes",
    "memory.used": "device_used_bytes",
    "memory.free": "device_free_bytes",
    "memory.reserved": "device_reserved_bytes",
    "used_gpu_memory": "process_used_bytes",
    "used_memory": "process_used_bytes",
}
# Fields that identify the GPU a row is about, most specific first.
REF_FIELDS: Final = ("uuid", "gpu_uuid", "pci.bus_id", "gpu_bus_id")
# Fields whose values are free text and may hold commas (only one per layout may).
TEXT_FIELDS: Final = frozenset({"name", "gpu_name", "process_name"})
_USED: Final = frozenset({"timestamp", "index", "pid", *MEMORY_FIELDS, *REF_FIELDS})
TIMESTAMP_FORMAT: Final = "%Y/%m/%d %H:%M:%S%.3f"

_FIELD = r"[a-z][a-z0-9_.]*(?:\s*\[[^\]]*\])?"
_HEADER_SHAPE: Final = rf"^\s*{_FIELD}(?:\s*,\s*{_FIELD})*\s*$"
_HEADER_KNOWN: Final = (
    r"(?:^|,)\s*(?:timestamp|index|uuid|pid|process_name|memory\.[a-z]+|used_gpu_memory|"
    r"used_memory|gpu_uuid|pci\.bus_id|gpu_bus_id)\s*(?:\[|,|$)"
)
_ROW_TIMESTAMP: Final = r"^\s*\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\s*,"

HEADER_EXAMPLE: Final = "timestamp, index, memory.used [MiB], memory.total [MiB]"


@dataclass(frozen=True)
class Layout:
    """The columns one header line announces: field names in order, and their units."""

    fields: tuple[str, ...]
    units: tuple[str | None, ...]

    def cells(self) -> tuple[pl.Expr, list[pl.Expr]]:
        """Whether a row fits this layout, and its cells ``f0``, ``f1``, ... (stripped), from
        a ``parts`` column holding the line split on commas.

        Split on commas (a regular expression with one group per field costs five times as
        much); one free-text field may hold commas (a process path): it takes what is left
        between the fields before and after it."""
        n = len(self.fields)
        parts = pl.col("parts")  # the line split on commas, computed once
        count = parts.list.len()
        greedy = next((i for i, f in enumerate(self.fields) if f in TEXT_FIELDS), None)
        cells: list[pl.Expr] = []
        for i in range(n):
            if greedy is None or i < greedy:
                cell = parts.list.get(i, null_on_oob=True)
            elif i == greedy:
                cell = parts.list.slice(i, count - n + 1).list.join(",")
            else:
                cell = parts.list.get(i - n, null_on_oob=True)
            cells.append(cell.str.strip_chars().alias(f"f{i}"))
        return (count == n if greedy is None else count >= n), cells

    def column(self, field: str) -> str | None:
        return f"f{self.fields.index(field)}" if field in self.fields else None

    def unit(self, field: str) -> str | None:
        return self.units[self.fields.index(field)]


@cache
def parse_header(line: str) -> Layout:
    """The layout a header line announces (``memory.used [MiB]`` -> field and unit)."""
    fields: list[str] = []
    units: list[str | None] = []
    for token in line.split(","):
        match = re.fullmatch(r"\s*([a-z][a-z0-9_.]*)\s*(?:\[([^\]]*)\])?\s*", token)
        name, unit = (match.group(1), match.group(2)) if match else (token.strip(), None)
        fields.append(name)
        units.append(unit if unit and unit != "%" else None)
    return Layout(tuple(fields), tuple(units))


class NvidiaSmiCsvParser:
    """The ``nvidia-smi-csv`` format: ``--query-gpu`` and ``--query-compute-apps`` CSV."""

    name = "nvidia-smi-csv"
    description = "nvidia-smi --query-gpu / --query-compute-apps CSV (header needed)"

    def sniff(self, head: str, name: str) -> float:
        lines = [line for line in head.splitlines()[:200] if line.strip()]
        for line in lines:
            if re.match(_HEADER_SHAPE, line) and re.search(_HEADER_KNOWN, line):
                return 0.9
        # Headerless rows are claimed so that parsing can refuse them with the remedy.
        rows = sum(1 for line in lines[:20] if re.match(_ROW_TIMESTAMP, line))
        return 0.6 if lines and rows >= min(len(lines[:20]), 2) else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        tz = ctx.clock.tz or "UTC"
        state = _State()
        for chunk in source.line_chunks(diag):
            _read_chunk(chunk.lines, chunk.first_line, state, diag)
        if state.headers == 0 and state.headerless:
            raise InputError(
                f"{source.name}: nvidia-smi CSV without a header line (--format=csv,noheader), "
                "so its columns cannot be told apart; add the header line naming the queried "
                f"fields in order (e.g. `{HEADER_EXAMPLE}`) or re-run with --format=csv"
            )
        diag.skip("row before the first header line", state.headerless, state.headerless_example)
        if state.timeless and not state.parts:
            return _untimed(state, diag)
        if state.timeless:
            diag.note(
                f"{state.timeless:,} row(s) under a header without `timestamp` cannot be placed "
                "in time; left out (query timestamp as well)",
                lost=True,
            )
            diag.skip("row under a header without timestamp", state.timeless, None)
        result = ParseResult(clock={"tz": tz, "tz_assumed": ctx.clock.tz is None})
        if ctx.clock.tz is None:
            diag.note(
                "nvidia-smi timestamps are local time without a zone; read as UTC "
                "(pass --tz ZONE with the capturing host's zone)"
            )
        if state.parts:
            result.samples = place_local_times(
                pl.concat(state.parts, how="diagonal_relaxed"), tz, diag
            )
            _note_unplaced(result.samples, diag)
        if state.names:
            named = process_events(
                place_local_times(pl.concat(state.names), tz, SourceDiagnostics("", "", ""))
            )
            result.events = named if named.height else None
        if state.pairs:
            result.device_index = _device_index(pl.concat(state.pairs), diag)
        return result


def _untimed(state: _State, diag: SourceDiagnostics) -> ParseResult:
    """A file none of whose rows has a time: its rows in file order, without one."""
    diag.lines_recognised += state.timeless
    diag.note(
        "the rows have no timestamp column: they keep their order and no made-up time (query "
        "timestamp as well to place them)"
    )
    result = ParseResult()
    if state.untimed_parts:
        rows = pl.concat(state.untimed_parts, how="diagonal_relaxed")
        result.samples = in_file_order(state.commands.by_position(rows, diag))
        _note_unplaced(result.samples, diag)
    if state.untimed_names:
        named = process_events(in_file_order(pl.concat(state.untimed_names)))
        result.events = named if named.height else None
    return result


class _State:
    """What carries over from one chunk of lines to the next."""

    def __init__(self) -> None:
        self.header: str | None = None
        self.headers = 0
        self.headerless = 0
        self.headerless_example: str | None = None
        self.timeless = 0
        self.parts: list[pl.DataFrame] = []
        self.names: list[pl.DataFrame] = []
        # rows under a header without timestamp, kept only where no row of the file has a time
        self.untimed_parts: list[pl.DataFrame] = []
        self.untimed_names: list[pl.DataFrame] = []
        self.pairs: list[pl.DataFrame] = []
        self.noted: set[str] = set()
        self.commands = QueryCommands()


def _read_chunk(lines: pl.Series, first_line: int, state: _State, diag: SourceDiagnostics) -> None:
    line = pl.col("line")
    frame = (
        pl.DataFrame({"line": lines})
        .with_row_index("n", offset=first_line)
        .with_columns(
            kind=pl.when(line.str.strip_chars() == "")
            .then(pl.lit("blank"))
            .when(line.str.contains(_HEADER_SHAPE) & line.str.contains(_HEADER_KNOWN))
            .then(pl.lit("header"))
            .otherwise(pl.lit("row"))
        )
        .with_columns(
            header=pl.when(pl.col("kind") == "header")
            .then(line.str.strip_chars())
            .otherwise(None)
            .forward_fill()
            .fill_null(pl.lit(state.header, dtype=pl.String))
        )
    )
    state.commands.add(lines)
    kinds = frame["kind"]
    blank = frame.filter(pl.col("kind") == "blank")
    diag.skip("blank line", blank.height, "")
    headers = int((kinds == "header").sum())
    state.headers += headers
    diag.lines_recognised += headers
    if frame.height:
        state.header = frame["header"][-1]
    rows = frame.filter(pl.col("kind") == "row")
    orphans = rows.filter(pl.col("header").is_null())
    if orphans.height:
        state.headerless += orphans.height
        state.headerless_example = state.headerless_example or orphans["line"][0]
    for header in rows["header"].drop_nulls().unique(maintain_order=True):
        layout = parse_header(header)
        part = rows.filter(pl.col("header") == header)
        _read_rows(part, layout, state, diag)


def _read_rows(rows: pl.DataFrame, layout: Layout, state: _State, diag: SourceDiagnostics) -> None:
    fits, columns = layout.cells()
    rows = rows.with_columns(parts=pl.col("line").str.split(",")).with_columns(fit=fits)
    misfit = rows.filter(~pl.col("fit"))
    diag.skip("not a row of the CSV header above it", misfit.height, first_line(misfit["line"]))
    cells = rows.filter(pl.col("fit")).select("n", "line", *columns)
    ts_col = layout.column("timestamp")
    if ts_col is None:
        state.timeless += cells.height
        cells = cells.with_columns(local=pl.lit(None, dtype=pl.Datetime("ns")))
        parts, names = state.untimed_parts, state.untimed_names
    else:
        cells = _timed(cells, ts_col, diag)
        diag.lines_recognised += cells.height
        parts, names = state.parts, state.names
    _note_layout(layout, state, diag)
    index_col = layout.column("index")
    ref_field = next((f for f in REF_FIELDS if f in layout.fields), None)
    pid_col = layout.column("pid")
    metrics = [f for f in layout.fields if f in MEMORY_FIELDS]
    cells = memory_bytes(cells, {f: MEMORY_FIELDS[f] for f in metrics}, layout, diag)
    ref_col = layout.column(ref_field) if ref_field else None
    name_col = layout.column("process_name")
    device = pl.col(index_col).cast(pl.Int32, strict=False) if index_col else None
    pid = pl.col(pid_col).cast(pl.Int64, strict=False) if pid_col else None
    wide = cells.select(
        "n",
        "local",
        (pl.lit(None, pl.Int32) if device is None else device).alias("device"),
        (pl.lit(None, pl.String) if ref_col is None else pl.col(ref_col)).alias("device_ref"),
        (pl.lit(None, pl.Int64) if pid is None else pid).alias("pid"),
        *(pl.col(MEMORY_FIELDS[f]) for f in metrics),
    )
    if name_col and pid_col:  # the names, whatever their memory (kept even where it is [N/A])
        process_names = cells.select(pl.col(name_col).alias("name"))
        named = wide.select("n", "local", "device", "device_ref", "pid").hstack(process_names)
        names.append(named)
    if index_col and ref_field:
        state.pairs.append(wide.select("device_ref", "device").drop_nulls().unique())
    if not metrics:
        return
    long = wide.unpivot(
        on=[MEMORY_FIELDS[f] for f in metrics],
        index=["n", "local", "device", "device_ref", "pid"],
        variable_name="metric",
        value_name="value",
    ).filter(pl.col("value").is_not_null())
    parts.append(long)


def _timed(cells: pl.DataFrame, ts_col: str, diag: SourceDiagnostics) -> pl.DataFrame:
    """The rows whose timestamp reads, with it as a naive ``local`` time."""
    parsed = pl.col(ts_col).str.to_datetime(TIMESTAMP_FORMAT, strict=False)
    # a year the nanosecond clock cannot hold (a damaged "-1/03/14 ...") reads as no time
    in_range = parsed.dt.year().is_between(1678, 2261)
    cells = cells.with_columns(local=pl.when(in_range).then(parsed).dt.cast_time_unit("ns"))
    bad_ts = cells.filter(pl.col("local").is_null())
    diag.skip(
        "timestamp not in nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm form",
        bad_ts.height,
        first_line(bad_ts["line"]),
    )
    return cells.filter(pl.col("local").is_not_null())


def _note_layout(layout: Layout, state: _State, diag: SourceDiagnostics) -> None:
    key = ",".join(layout.fields)
    if key in state.noted:
        return
    state.noted.add(key)
    ignored = [f for f in layout.fields if f not in _USED and f not in TEXT_FIELDS]
    if ignored:
        diag.note(f"fields with no canonical metric, not used: {', '.join(ignored)}", lost=True)
    if any(f in layout.fields for f in ("used_gpu_memory", "used_memory")) and not any(
        f in layout.fields for f in (*REF_FIELDS, "index")
    ):
        diag.note(
            "process rows do not say which GPU they are on; their device is unknown "
            "(query gpu_uuid as well)",
            lost=True,
        )


def _note_unplaced(samples: pl.DataFrame, diag: SourceDiagnostics) -> None:
    unnamed = samples.filter(
        pl.col("device").is_null()
        & pl.col("device_ref").is_null()
        & pl.col("metric").str.starts_with("device_")
    )
    if unnamed.height:
        diag.note(
            "--query-gpu rows name no GPU (neither index nor uuid); their device is unknown "
            "(query index as well)",
            lost=True,
        )


def _device_index(pairs: pl.DataFrame, diag: SourceDiagnostics) -> dict[str, int]:
    pairs = pairs.unique()
    clash = pairs.filter(pl.col("device_ref").is_duplicated())
    if clash.height:
        diag.note(
            f"GPU {clash['device_ref'][0]} appears under several indexes; not used to place "
            "rows that name it by UUID or bus id",
            lost=True,
        )
    kept = pairs.filter(~pl.col("device_ref").is_duplicated())
    return dict(zip(kept["device_ref"].to_list(), kept["device"].to_list(), strict=True))


PARSER = NvidiaSmiCsvParser()
