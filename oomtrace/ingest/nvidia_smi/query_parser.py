"""``nvidia-smi -q`` (``--query``): the long report, one ``key : value`` per line
(``docs/formats/nvidia-smi.md``).

A report opens with ``==============NVSMI LOG==============`` and a ``Timestamp`` line (the C
locale's ``date`` form, local time: read in ``--tz``, UTC otherwise, recorded as assumed), then
one block per GPU, ``GPU 00000000:01:00.0``, in nvidia-smi's index order. Read from each block:
``FB Memory Usage`` (``Total``, ``Reserved``, ``Used``, ``Free``: device memory, MiB; driver 270's
``Memory Usage`` in ``Mb``, which is MiB), and under
``Processes`` each ``Process ID`` with its ``Name`` and ``Used GPU Memory`` (per-process memory
and a ``process`` event, :mod:`.processes`). ``nvidia-smi -q -l N`` repeats the report: each
one is a snapshot at its time. The bus ids tie the indexes to the bus ids other inputs name
their GPUs by. A report without its ``Timestamp`` line keeps its rows in file order with no
made-up time; among timed reports, a block before the first ``Timestamp`` is left out, counted.

The sections are told apart by indentation (a heading such as ``    FB Memory Usage`` owns the
more indented lines under it), which also holds for a report pasted indented into Markdown.
The XML form of the same report (``-q -x``) is read by :mod:`.query_xml` into the same rows.
"""

from __future__ import annotations

import re
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.alignment.anchoring import ORDER
from oomtrace.ingest.nvidia_smi.processes import process_events
from oomtrace.ingest.nvidia_smi.query_xml import SNIFF as XML_SNIFF
from oomtrace.ingest.nvidia_smi.query_xml import xml_rows
from oomtrace.ingest.nvidia_smi.table_lines import TIME_FORMAT
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, first_line
from oomtrace.ingest.text.timestamps import localize
from oomtrace.schema import TS
from oomtrace.units import bytes_expr

CONFIDENCE: Final = 0.85
_MARKER: Final = r"=+\s*NVSMI LOG\s*=+"
_DAY: Final = (
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +"
    r"\d{1,2} \d{2}:\d{2}:\d{2} \d{4}"
)
_TIMESTAMP: Final = r"^\W*Timestamp\s*:\s*(" + _DAY + r")\s*$"
_BUS: Final = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
# Drivers of 2011 (270) opened a block with the bus as "bus:device:function" in decimal.
_GPU: Final = r"^\s*GPU (" + _BUS + r"|\d+:\d+:\d+)\s*$"
_PAIR: Final = r"^(?<indent>\s*)(?<key>[A-Za-z][^:]*?)\s*:\s*(?<value>.*?)\s*$"
_HEADING: Final = r"^(?<indent>\s*)(?<heading>[A-Za-z][^:]*?)\s*$"
_SIZE: Final = r"^(?<number>\d+(?:\.\d+)?)\s*(?<unit>[KMGT]iB|B|Mb)$"
# Driver 270 named the section "Memory Usage" and printed MiB as "Mb" (a Tesla M2090's 6 GB
# with ECC on: "Total : 5375 Mb"); later drivers "FB Memory Usage" beside "BAR1 Memory Usage".
_FRAME_BUFFER: Final = ("FB Memory Usage", "Memory Usage")
_OLD_MIB: Final = "Mb"
_PROCESSES: Final = "Processes"
_DEVICE_METRICS: Final = {
    "Total": "device_total_bytes",
    "Reserved": "device_reserved_bytes",
    "Used": "device_used_bytes",
    "Free": "device_free_bytes",
}
_PROCESS_KEYS: Final = ("Process ID", "Name", "Used GPU Memory")
_SNIFF_MARKER = re.compile(r"(?m)^\W*" + _MARKER)
_SNIFF_BLOCK = re.compile(r"(?m)" + _GPU[1:] + r"(?:\n.*){0,200}?\n\s*FB Memory Usage\s*$")


class NvidiaSmiQueryParser:
    """The ``nvidia-smi-query`` format: ``nvidia-smi -q`` reports, one or many."""

    name = "nvidia-smi-query"
    description = "nvidia-smi -q report (or -q -x XML): GPU memory and processes"

    def sniff(self, head: str, name: str) -> float:
        if "\x00" in head:
            return 0.0
        if _SNIFF_MARKER.search(head) or _SNIFF_BLOCK.search(head) or XML_SNIFF.search(head):
            return CONFIDENCE
        return 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        if XML_SNIFF.search(source.head()):
            return _parse_xml(source, ctx, diag)
        kept = [
            _classify(chunk.lines, chunk.first_line, diag) for chunk in source.line_chunks(diag)
        ]
        lines = pl.concat(kept) if kept else _classify(pl.Series([], dtype=pl.String), 1, diag)
        return _Report(_structure(lines), ctx, diag).result()


def _parse_xml(source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
    """A ``-q -x`` report: its elements as the text report's rows; its other lines (one element
    a line, as nvidia-smi prints them) counted as skipped."""
    text = source.read_bytes(diag).decode("utf-8", errors="replace")
    diag.lines_read += text.count("\n") + (not text.endswith("\n"))
    result = _Report(xml_rows(text, diag), ctx, diag).result()
    rest = diag.lines_read - diag.lines_recognised - diag.lines_skipped
    diag.skip("GPU property not about memory", rest, None)
    return result


def _classify(lines: pl.Series, first: int, diag: SourceDiagnostics) -> pl.DataFrame:
    """The lines that carry structure or a figure read, with what each is; the others counted."""
    line = pl.col("line")
    pair = line.str.extract_groups(_PAIR)
    heading = line.str.extract_groups(_HEADING)
    frame = (
        pl.DataFrame({"line": lines})
        .with_row_index("n", offset=first)
        .with_columns(
            pl.col("n").cast(pl.Int64),
            marker=line.str.contains(_MARKER),
            stamp=line.str.extract(_TIMESTAMP, 1),
            bus=line.str.extract(_GPU, 1),
            indent=pl.coalesce(
                pair.struct.field("indent"), heading.struct.field("indent")
            ).str.len_chars(),
            # a GPU's bus id and the report's time have colons too: they are no pair
            key=pl.when(~line.str.contains(_GPU) & ~line.str.contains(_TIMESTAMP)).then(
                pair.struct.field("key")
            ),
            value=pair.struct.field("value"),
            heading=heading.struct.field("heading"),
        )
    )
    wanted = (
        pl.col("marker")
        | pl.col("stamp").is_not_null()
        | pl.col("bus").is_not_null()
        | pl.col("heading").is_not_null()
        | pl.col("key").is_in([*_DEVICE_METRICS, *_PROCESS_KEYS])
    ).fill_null(value=False)
    rest = frame.filter(~wanted)
    blank = rest.filter(line.str.strip_chars() == "")
    diag.skip("blank line", blank.height, "")
    other = rest.filter(line.str.strip_chars() != "")
    diag.skip("GPU property not about memory", other.height, first_line(other["line"]))
    return frame.filter(wanted).drop("line")


def _structure(lines: pl.DataFrame) -> pl.DataFrame:
    """Each line with its report (``snapshot``), GPU block, section and process."""
    is_gpu = pl.col("bus").is_not_null()
    is_time = pl.col("stamp").is_not_null()
    heading = pl.col("heading").is_not_null() & ~is_gpu
    lines = lines.with_columns(
        snapshot=is_time.cum_sum(),
        block=is_gpu.cum_sum(),
        run=(heading | is_gpu | is_time).cum_sum(),
    )
    lines = lines.with_columns(
        device=pl.when(is_gpu).then(is_gpu.cum_sum().over("snapshot") - 1),
        section=pl.when(heading).then(pl.col("heading")),
        section_indent=pl.when(heading).then(pl.col("indent")),
    ).with_columns(
        pl.col("device").forward_fill().over("snapshot"),
        pl.col("section", "section_indent").forward_fill().over("block"),
    )
    inside = pl.col("key").is_not_null() & (pl.col("indent") > pl.col("section_indent"))
    processes = inside & (pl.col("section") == _PROCESSES)
    pid = pl.when(processes & (pl.col("key") == "Process ID")).then(pl.col("value"))
    name = pl.when(processes & (pl.col("key") == "Name")).then(pl.col("value"))
    return lines.with_columns(
        memory=inside & pl.col("section").is_in(_FRAME_BUFFER),
        processes=processes,
        pid=pid.cast(pl.Int64, strict=False).forward_fill().over("run"),
        name=name.forward_fill().over("run"),
    )


class _Report:
    def __init__(self, lines: pl.DataFrame, ctx: ParseContext, diag: SourceDiagnostics) -> None:
        self.lines, self.ctx, self.diag = lines, ctx, diag
        self.tz = ctx.clock.tz or "UTC"

    def result(self) -> ParseResult:
        times = self._times()
        device = self._device_rows()
        process = self._process_rows()
        structure = self.lines.filter(
            pl.col("marker") | pl.col("bus").is_not_null() | pl.col("stamp").is_not_null()
        )
        self.diag.lines_recognised += structure.height
        headings = self.lines.filter(
            pl.col("heading").is_not_null() & ~pl.col("marker") & pl.col("bus").is_null()
        )
        self.diag.skip("section heading (no figure)", headings.height, None)
        elsewhere = self.lines.filter(
            pl.col("key").is_not_null() & ~pl.col("memory") & ~pl.col("processes")
        )
        self.diag.skip(
            "GPU property not about memory", elsewhere.height, first_line(elsewhere["key"])
        )
        untimed = times.height == 0
        if untimed:
            self.diag.note(
                "the report has no Timestamp line: its rows keep their order and no made-up "
                "time (a report shows no failure another input could anchor it to)"
            )
        samples = [self._placed(f, times, untimed) for f in (device, process) if f.height]
        names = self._placed(
            self.lines.filter(pl.col("processes") & (pl.col("key") == "Name")).select(
                "n", "snapshot", pl.col("device").cast(pl.Int32), "pid", "name"
            ),
            times,
            untimed,
            count=False,
        )
        result = ParseResult(
            samples=pl.concat(samples, how="diagonal_relaxed") if samples else None,
            events=process_events(names.with_columns(device_ref=pl.lit(None, pl.String)))
            if names.height
            else None,
            device_index=dict(
                self.lines.filter(pl.col("bus").str.contains("^" + _BUS + "$"))
                .select("bus", "device")
                .unique()
                .iter_rows()
            ),
        )
        if not untimed:
            result.clock = {"tz": self.tz, "tz_assumed": self.ctx.clock.tz is None}
            if self.ctx.clock.tz is None:
                self.diag.note(
                    "nvidia-smi prints its time without a zone; read as UTC (pass --tz ZONE with "
                    "the host's zone)"
                )
        return result

    def _times(self) -> pl.DataFrame:
        rows = self.lines.filter(pl.col("stamp").is_not_null())
        naive = (
            pl.col("stamp")
            .str.replace_all(r"\s+", " ")
            .str.to_datetime(TIME_FORMAT, strict=False, time_unit="ns")
        )
        return rows.select("snapshot", ts=localize(naive, self.tz)).drop_nulls("ts")

    def _sizes(self, rows: pl.DataFrame, what: str) -> pl.DataFrame:
        """``value`` as integer bytes; values that are no size (``N/A``, ``Not available in WDDM
        driver model``) are left out, counted."""
        size = pl.col("value").str.extract_groups(_SIZE)
        unit = size.struct.field("unit").replace(_OLD_MIB, "MiB")
        rows = rows.with_columns(bytes=bytes_expr(size.struct.field("number"), unit))
        none = rows.filter(pl.col("bytes").is_null())
        self.diag.skip(f"{what} that states no size", none.height, first_line(none["value"]))
        self.diag.lines_recognised += rows.height - none.height
        return rows.filter(pl.col("bytes").is_not_null())

    def _device_rows(self) -> pl.DataFrame:
        rows = self.lines.filter(pl.col("memory") & pl.col("key").is_in(list(_DEVICE_METRICS)))
        return self._sizes(rows, "device memory figure").select(
            "n",
            "snapshot",
            pl.col("device").cast(pl.Int32),
            metric=pl.col("key").replace_strict(_DEVICE_METRICS),
            value=pl.col("bytes").cast(pl.Float64),
        )

    def _process_rows(self) -> pl.DataFrame:
        named = self.lines.filter(
            pl.col("processes") & pl.col("key").is_in(["Process ID", "Name"])
        ).height
        self.diag.lines_recognised += named
        rows = self.lines.filter(pl.col("processes") & (pl.col("key") == "Used GPU Memory"))
        return self._sizes(rows, "process memory figure").select(
            "n",
            "snapshot",
            pl.col("device").cast(pl.Int32),
            "pid",
            metric=pl.lit("process_used_bytes"),
            value=pl.col("bytes").cast(pl.Float64),
        )

    def _placed(
        self, rows: pl.DataFrame, times: pl.DataFrame, untimed: bool, *, count: bool = True
    ) -> pl.DataFrame:
        """Rows at their report's time, or in file order without one."""
        if untimed:
            return rows.sort("n").select(
                pl.lit(None, dtype=TS).alias("ts"),
                pl.col("n").alias(ORDER),
                pl.exclude("n", "snapshot"),
            )
        placed = rows.join(times.unique("snapshot", keep="last"), on="snapshot", how="inner")
        lost = rows.height - placed.height
        if lost and count:
            self.diag.lines_recognised -= lost
            self.diag.skip("figure before the report's Timestamp line", lost, None)
        return placed.select(pl.col("ts").cast(TS), pl.exclude("n", "snapshot", "ts"))


PARSER: Final = NvidiaSmiQueryParser()
