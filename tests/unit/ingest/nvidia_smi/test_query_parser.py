"""``nvidia-smi -q`` reports as pasted into bug reports or logged with ``-l``: per-GPU frame
buffer memory (total, reserved, used, free), the processes with pid, name and memory, each report
at its Timestamp, and the GPUs' bus ids."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths, sniff
from oomtrace.ingest.text.input_file import InputFile
from tests.factories import file_at
from tests.unit.ingest.nvidia_smi.report_files import DATA, MTIME, MiB, ingest_report, metric_rows


def test_a_driver_375_report_pasted_after_a_remark(tmp_path: Path) -> None:
    # https://github.com/paradoxxxzero/gnome-shell-system-monitor-applet/issues/356
    trace = ingest_report(tmp_path, "query-375-one-gpu.txt")
    at = datetime(2017, 8, 15, 16, 0, 35, tzinfo=UTC)
    assert metric_rows(trace, "device_total_bytes") == [(at, 0, None, 1995.0 * MiB)]
    assert metric_rows(trace, "device_used_bytes") == [(at, 0, None, 1934.0 * MiB)]
    assert metric_rows(trace, "device_free_bytes") == [(at, 0, None, 61.0 * MiB)]
    # BAR1's Total/Used/Free are no device memory
    assert trace.samples.height == 3
    (diag,) = trace.manifest.sources
    assert diag.parser == "nvidia-smi-query"
    assert diag.lines_read == 20 == diag.lines_recognised + diag.lines_skipped
    assert diag.clock["tz_assumed"] is True


def test_a_loop_of_two_reports_on_two_gpus_with_processes(tmp_path: Path) -> None:
    trace = ingest_report(tmp_path, "query-535-loop-two-gpus.txt", tz="Europe/Berlin")
    first = datetime(2026, 3, 30, 12, 2, 11, tzinfo=UTC)  # 14:02:11 CEST
    second = datetime(2026, 3, 30, 12, 2, 16, tzinfo=UTC)
    assert metric_rows(trace, "device_used_bytes") == [
        (first, 0, None, 72310.0 * MiB),
        (first, 1, None, 4.0 * MiB),
        (second, 0, None, 4.0 * MiB),
        (second, 1, None, 4.0 * MiB),
    ]
    assert {r[3] for r in metric_rows(trace, "device_reserved_bytes")} == {527.0 * MiB}
    # Xorg's memory is N/A: no sample, but its name is kept
    assert metric_rows(trace, "process_used_bytes") == [(first, 0, 48211, 72290.0 * MiB)]
    names = trace.events.filter(pl.col("kind") == "process").sort("ts")
    assert names.select("device", "pid", "detail").rows() == [
        (0, 48211, "VLLM::EngineCore"),
        (0, 1394, "/usr/lib/xorg/Xorg"),
    ]
    (diag,) = trace.manifest.sources
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped
    assert diag.skipped["process memory figure that states no size"].count == 1


def test_the_bus_ids_place_rows_that_name_a_gpu_by_bus_id(tmp_path: Path) -> None:
    report = file_at(tmp_path / "q.txt", MTIME, copy_of=DATA / "query-535-loop-two-gpus.txt")
    apps = file_at(
        tmp_path / "apps.csv",
        MTIME,
        text="timestamp, gpu_bus_id, pid, used_gpu_memory [MiB]\n"
        "2026/03/30 14:02:11.500, 00000000:65:00.0, 777, 100 MiB\n",
    )
    trace = ingest_paths([report, apps], IngestOptions(tz="Europe/Berlin"))
    row = trace.samples.filter(pl.col("pid") == 777)
    assert row["device"].to_list() == [1]


def test_a_report_without_its_timestamp_keeps_file_order_without_a_time(
    tmp_path: Path,
) -> None:
    text = (
        "GPU 00000000:01:00.0\n    FB Memory Usage\n        Total : 24576 MiB\n"
        "        Used : 23001 MiB\n        Free : 1575 MiB\n"
    )
    trace = ingest_report(tmp_path, "bare.txt", text)
    used = trace.samples.filter(pl.col("metric") == "device_used_bytes")
    assert used["value"].to_list() == [23001.0 * MiB]
    assert used["ts"].to_list() == [None]
    assert used["clock"].cast(pl.String).to_list() == ["untimed"]


def test_sniffed_as_a_report_and_a_table_is_not() -> None:
    path = DATA / "query-375-one-gpu.txt"
    parser = sniff(InputFile(path, path.name), explicit=True).parser
    assert parser is not None
    assert parser.name == "nvidia-smi-query"
    table = DATA / "table-535-five-gpus.txt"
    parser = sniff(InputFile(table, table.name), explicit=True).parser
    assert parser is not None
    assert parser.name == "nvidia-smi-table"


# Driver 270 (2011) on a Tesla M2090, `nvidia-smi -i 0 -q -d MEMORY,UTILIZATION,...`
# (https://github.com/HeKun-NVIDIA/AI-Blog/blob/main/83.nvidia-smi/nvidia-smi.md): the block
# opens "GPU 0:2:0", the section is "Memory Usage" and its sizes are in "Mb", which is MiB.
DRIVER_270 = """\
==============NVSMI LOG==============

Timestamp                       : Mon Dec  5 22:32:00 2011

Driver Version                  : 270.41.19

Attached GPUs                   : 2

GPU 0:2:0
    Memory Usage
        Total                   : 5375 Mb
        Used                    : 1904 Mb
        Free                    : 3470 Mb
    Compute Mode                : Default
    Utilization
        Gpu                     : 67 %
        Memory                  : 42 %
"""


def test_driver_270s_memory_usage_in_mb_is_device_memory(tmp_path: Path) -> None:
    trace = ingest_report(tmp_path, "q270.txt", DRIVER_270)
    at = datetime(2011, 12, 5, 22, 32, tzinfo=UTC)
    assert metric_rows(trace, "device_total_bytes") == [(at, 0, None, 5375.0 * MiB)]
    assert metric_rows(trace, "device_used_bytes") == [(at, 0, None, 1904.0 * MiB)]
    assert metric_rows(trace, "device_free_bytes") == [(at, 0, None, 3470.0 * MiB)]
    assert "device memory figure that states no size" not in trace.manifest.sources[0].skipped
