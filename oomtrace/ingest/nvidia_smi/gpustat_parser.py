"""``gpustat`` (wookayin/gpustat), the one-line-per-GPU summary people paste beside or instead of
``nvidia-smi`` (``docs/formats/nvidia-smi.md``)::

    gpu-a-11.extreme         Mon Aug 22 15:23:57 2022  515.65.01
    [0] Tesla P100-PCIE-16GB | 27'C,   0 % |   103 / 16384 MB | alice:python/48211(98M)

A header (host, the query's local time in the C locale's ``date`` form, driver version), then
per GPU its index, name, temperature and utilisation, memory used and total, and its processes.
gpustat prints memory in ``MB`` that are MiB (NVML's bytes divided by 1024 twice; the same
figures as nvidia-smi's ``MiB``, wookayin/gpustat issue 130): ``device_used_bytes`` and
``device_total_bytes``. A process shown with its pid (``-p``: ``user:command/pid(98M)``, or
``command/pid(98M)``; ``M`` is MiB too) is a ``process_used_bytes`` sample and a ``process``
event; the default ``user(98M)`` names no process and is noted, not read. ``gpustat -i``
(``--watch``) prints one snapshot after another: each at its header's time, read in ``--tz``
(UTC otherwise, recorded); a paste without a header keeps its rows in file order with no
made-up time.
"""

from __future__ import annotations

import re
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.nvidia_smi.local_times import in_file_order, place_local_times
from oomtrace.ingest.nvidia_smi.processes import process_events
from oomtrace.ingest.nvidia_smi.table_lines import TIME_FORMAT
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, first_line
from oomtrace.units import MiB

CONFIDENCE: Final = 0.8
_DAY: Final = (
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +"
    r"\d{1,2} \d{2}:\d{2}:\d{2} \d{4}"
)
HEADER: Final = r"^\s*\S+\s+(?<time>" + _DAY + r")\s+\d+\.\d+(?:\.\d+)?\s*$"
GPU: Final = (
    r"^\s*\[(?<index>\d+)\]\s+(?<name>[^|]*?)\s*\|[^|]*\|\s*(?<used>\d+)\s*/\s*(?<total>\d+)"
    r"\s*MB\s*\|(?<procs>.*)$"
)
# A process with its pid: "user:command/pid(98M)" (-u -c -p), "command/pid(98M)" (-c -p).
_PROCESS: Final = r"(?:[^\s:()]+:)?(?<name>[^\s/()]+)/(?<pid>\d+)\((?<mem>\d+)M\)"
_SNIFF: Final = re.compile(r"(?m)" + GPU.replace("(?<", "(?P<"))


class GpustatParser:
    """The ``gpustat`` format."""

    name = "gpustat"
    description = "gpustat output: GPU memory used/total (MB that are MiB) and processes"

    def sniff(self, head: str, name: str) -> float:
        if "\x00" in head:
            return 0.0
        return CONFIDENCE if _SNIFF.search(head) else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        lines = source.numbered_lines(diag)
        return _read(lines, ctx, diag)


def _read(lines: pl.DataFrame, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
    tz = ctx.clock.tz or "UTC"
    stamp = pl.col("line").str.extract_groups(HEADER).struct.field("time")
    lines = lines.with_columns(
        local=stamp.str.replace_all(r"\s+", " ")
        .str.to_datetime(TIME_FORMAT, strict=False, time_unit="ns")
        .forward_fill(),
        header=stamp.is_not_null(),
    )
    gpus = (
        lines.with_columns(g=pl.col("line").str.extract_groups(GPU))
        .unnest("g")
        .filter(pl.col("index").is_not_null())
    )
    headers = lines.filter(pl.col("header")).height
    rest = lines.filter(~pl.col("header") & ~pl.col("n").is_in(gpus["n"].implode()))
    diag.lines_recognised += headers + gpus.height
    diag.skip("not a gpustat line", rest.height, first_line(rest["line"]))
    device = pl.col("index").cast(pl.Int32)
    memory = gpus.select(
        "n",
        "local",
        device=device,
        pid=pl.lit(None, pl.Int64),
        device_used_bytes=pl.col("used").cast(pl.Float64) * MiB,
        device_total_bytes=pl.col("total").cast(pl.Float64) * MiB,
    ).unpivot(
        on=["device_used_bytes", "device_total_bytes"],
        index=["n", "local", "device", "pid"],
        variable_name="metric",
        value_name="value",
    )
    processes = (
        gpus.select("n", "local", device=device, p=pl.col("procs").str.extract_all(_PROCESS))
        .explode("p")
        .drop_nulls("p")
        .with_columns(f=pl.col("p").str.extract_groups(_PROCESS))
        .unnest("f")
    )
    unnamed = int(gpus["procs"].str.count_matches(r"\(\d+M\)").sum() or 0) - processes.height
    if unnamed:
        diag.note(
            f"{unnamed} process(es) shown without a pid (`gpustat -p` shows it): their memory is "
            "not read per process",
            lost=True,
        )
    process_rows = processes.select(
        "n",
        "local",
        "device",
        pid=pl.col("pid").cast(pl.Int64),
        metric=pl.lit("process_used_bytes"),
        value=pl.col("mem").cast(pl.Float64) * MiB,
    )
    names = processes.select(
        "n",
        "local",
        "device",
        pid=pl.col("pid").cast(pl.Int64),
        device_ref=pl.lit(None, pl.String),
        name="name",
    )
    samples = pl.concat([memory, process_rows], how="vertical_relaxed")
    untimed = samples["local"].null_count() == samples.height
    if untimed:
        diag.note(
            "the paste has no gpustat header line (host, time, driver): its rows keep their "
            "order and no made-up time"
        )
        return ParseResult(
            samples=in_file_order(samples) if samples.height else None,
            events=process_events(in_file_order(names)) if names.height else None,
        )
    timed = samples.filter(pl.col("local").is_not_null())
    _skip_before_header(samples.height - timed.height, diag)
    if ctx.clock.tz is None:
        diag.note("gpustat prints local time without a zone; read as UTC (pass --tz ZONE)")
    placed_names = place_local_times(names.drop_nulls("local"), tz, SourceDiagnostics("", "", ""))
    return ParseResult(
        samples=place_local_times(timed, tz, diag),
        events=process_events(placed_names) if placed_names.height else None,
        clock={"tz": tz, "tz_assumed": ctx.clock.tz is None},
    )


def _skip_before_header(count: int, diag: SourceDiagnostics) -> None:
    if count:
        diag.note(f"{count} figure(s) before the first header line have no time; left out")


PARSER: Final = GpustatParser()
