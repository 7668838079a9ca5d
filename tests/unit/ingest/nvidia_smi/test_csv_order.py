"""A one-off ``--query-gpu`` paste that names no GPU: its rows are the GPUs in index order where
the command shown queried every GPU, and of unknown device otherwise."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from tests.factories import file_at

MiB = 1 << 20
MTIME = datetime(2020, 11, 15, 12, 0, tzinfo=UTC)
# https://github.com/aristocratos/bpytop/issues/26, as pasted (the command behind a prompt and
# `time`, the header, two GPUs, then time's report)
COMMAND = (
    "~ $  time nvidia-smi {select}--query-gpu=gpu_name,fan.speed,memory.total,memory.used,"
    "utilization.gpu,temperature.gpu,power.draw,clocks.gr,clocks.mem --format=csv\n"
)
HEADER = (
    "name, fan.speed [%], memory.total [MiB], memory.used [MiB], utilization.gpu [%], "
    "temperature.gpu, power.draw [W], clocks.current.graphics [MHz], "
    "clocks.current.memory [MHz]\n"
)
ROWS = """\
GeForce GTX 1080 Ti, 29 %, 11175 MiB, 2856 MiB, 36 %, 60, 106.56 W, 1936 MHz, 5508 MHz
GeForce GTX 1060 6GB, 29 %, 6078 MiB, 4 MiB, 0 %, 49, 5.68 W, 139 MHz, 405 MHz

real\t0m0,022s
user\t0m0,001s
sys\t0m0,011s
"""
OUTPUT = HEADER + ROWS


def _ingest(tmp_path: Path, text: str) -> Trace:
    return ingest_paths([file_at(tmp_path / "smi.txt", MTIME, text=text)], IngestOptions())


def _used(trace: Trace) -> list[tuple[object, ...]]:
    frame = trace.samples.filter(pl.col("metric") == "device_used_bytes")
    return frame.select("device", "value").rows()


def test_the_rows_of_a_query_of_every_gpu_are_the_gpus_in_order(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, COMMAND.format(select="") + OUTPUT)
    assert _used(trace) == [(0, 2856.0 * MiB), (1, 4.0 * MiB)]
    totals = trace.samples.filter(pl.col("metric") == "device_total_bytes")
    assert totals.select("device", "value").rows() == [(0, 11175.0 * MiB), (1, 6078.0 * MiB)]
    (diag,) = trace.manifest.sources
    assert any("index order" in note for note in diag.notes)


def test_a_query_of_chosen_gpus_leaves_the_device_unknown(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, COMMAND.format(select="-i 1,3 ") + OUTPUT)
    assert _used(trace) == [(None, 2856.0 * MiB), (None, 4.0 * MiB)]


def test_without_the_command_the_device_is_unknown(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, OUTPUT)
    assert _used(trace) == [(None, 2856.0 * MiB), (None, 4.0 * MiB)]
    (diag,) = trace.manifest.sources
    assert any("their device is unknown" in note for note in diag.lost)
