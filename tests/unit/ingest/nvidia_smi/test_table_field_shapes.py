"""nvidia-smi tables in shapes met in public threads, each rewritten here with its figures and
layout kept (the thread is named above each)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from tests.factories import file_at

MiB = 1 << 20
MTIME = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _ingest(tmp_path: Path, text: str) -> Trace:
    path = file_at(tmp_path / "smi.txt", MTIME, text=text)
    return ingest_paths([path], IngestOptions())


def _rows(trace: Trace, metric: str) -> list[tuple[object, ...]]:
    frame = trace.samples.filter(pl.col("metric") == metric).sort("device")
    return frame.select("device", "value").rows()


# Driver 415 on a GeForce (github.com/keylase/nvidia-patch/issues/89): dmon and pmon refused, then
# the table, whose display-active cell says N/A instead of On/Off.
DRIVER_415 = """\
# nvidia-smi dmon
Not supported on the device(s)
Failed to process command line

# nvidia-smi
Fri Apr  5 11:58:55 2019
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 415.27       Driver Version: 415.27       CUDA Version: 10.0     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  GeForce GT 640      Off  | 00000000:01:00.0 N/A |                  N/A |
| 30%   30C    P0    N/A /  N/A |      0MiB /  1999MiB |     N/A      Default |
+-------------------------------+----------------------+----------------------+
"""


def test_a_gpu_row_whose_display_active_cell_is_na_is_read(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, DRIVER_415)
    assert _rows(trace, "device_total_bytes") == [(0, 1999.0 * MiB)]
    assert _rows(trace, "device_used_bytes") == [(0, 0.0)]
    assert set(trace.samples["ts"]) == {datetime(2019, 4, 5, 11, 58, 55, tzinfo=UTC)}
