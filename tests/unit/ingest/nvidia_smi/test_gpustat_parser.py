"""gpustat's one line per GPU: memory used and total in MB that are MiB, the processes it shows
with their pids, each snapshot at its header's time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from tests.unit.ingest.nvidia_smi.report_files import MiB, ingest_report, metric_rows

# gpustat -p on two H100s, in the layout of gpustat 1.1 (a degree sign, user:command/pid(memM));
# the figures are illustrative
WATCHED = """\
node-7                    Tue Sep 15 10:00:00 2026  580.126.09
[0] NVIDIA H100 80GB HBM3 | 41°C,  95 % | 79102 / 81559 MB | alice:python3/48211(78000M) root(2M)
[1] NVIDIA H100 80GB HBM3 | 30°C,   0 % |     4 / 81559 MB |
node-7                    Tue Sep 15 10:00:05 2026  580.126.09
[0] NVIDIA H100 80GB HBM3 | 38°C,   0 % |     4 / 81559 MB |
[1] NVIDIA H100 80GB HBM3 | 30°C,   0 % |     4 / 81559 MB |
"""


def test_four_gpus_under_a_prompt_in_mb_that_are_mib(tmp_path: Path) -> None:
    trace = ingest_report(tmp_path, "gpustat-515-four-gpus.txt")
    at = datetime(2022, 8, 22, 15, 23, 57, tzinfo=UTC)
    assert metric_rows(trace, "device_used_bytes") == [(at, d, None, 103.0 * MiB) for d in range(4)]
    assert metric_rows(trace, "device_total_bytes") == [
        (at, d, None, 16384.0 * MiB) for d in range(4)
    ]
    (diag,) = trace.manifest.sources
    assert diag.parser == "gpustat"
    assert diag.lines_read == 6 == diag.lines_recognised + diag.lines_skipped
    assert diag.clock["tz_assumed"] is True


def test_a_watch_is_a_series_and_processes_with_pids_are_read(tmp_path: Path) -> None:
    trace = ingest_report(tmp_path, "watch.txt", WATCHED, tz="Europe/Berlin")
    first = datetime(2026, 9, 15, 8, 0, 0, tzinfo=UTC)  # 10:00:00 CEST
    second = datetime(2026, 9, 15, 8, 0, 5, tzinfo=UTC)
    assert metric_rows(trace, "device_used_bytes") == [
        (first, 0, None, 79102.0 * MiB),
        (first, 1, None, 4.0 * MiB),
        (second, 0, None, 4.0 * MiB),
        (second, 1, None, 4.0 * MiB),
    ]
    assert metric_rows(trace, "process_used_bytes") == [(first, 0, 48211, 78000.0 * MiB)]
    names = trace.events.filter(pl.col("kind") == "process")
    assert names.select("device", "pid", "detail").rows() == [(0, 48211, "python3")]
    (diag,) = trace.manifest.sources
    assert any("without a pid" in note for note in diag.lost)
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped


def test_a_paste_without_its_header_keeps_its_order(tmp_path: Path) -> None:
    rows = "".join(WATCHED.splitlines(keepends=True)[1:3])
    trace = ingest_report(tmp_path, "rows.txt", rows)
    assert trace.samples["ts"].null_count() == trace.samples.height == 5
