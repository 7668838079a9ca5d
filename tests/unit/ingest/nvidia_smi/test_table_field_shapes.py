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


# Driver 550 on two GPUs as a reply shows it (github.com/deepinv/deepinv/issues/563): every "/"
# of the power and memory cells lost in the paste.
NO_SLASHES = """\
Thu Jun 26 00:31:04 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.144.03             Driver Version: 550.144.03     CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA RTX A4000               Off |   00000000:51:00.0 Off |                  Off |
| 41%   42C    P2             34W  140W |   15444MiB  16376MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA RTX A5000               Off |   00000000:9C:00.0 Off |                  Off |
| 30%   38C    P8             19W  230W |   15477MiB  24564MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""


def test_a_memory_cell_that_lost_its_slash_is_used_and_total(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, NO_SLASHES)
    assert _rows(trace, "device_used_bytes") == [(0, 15444.0 * MiB), (1, 15477.0 * MiB)]
    assert _rows(trace, "device_total_bytes") == [(0, 16376.0 * MiB), (1, 24564.0 * MiB)]


def _by_source(trace: Trace, metric: str) -> dict[str, list[tuple[object, ...]]]:
    frame = trace.samples.filter(pl.col("metric") == metric).sort("device", "value")
    out: dict[str, list[tuple[object, ...]]] = {}
    for source, device, value in frame.select("source", "device", "value").iter_rows():
        out.setdefault(source.split("#")[-1] if "#" in source else "", []).append((device, value))
    return out


# Driver 570, an A100 80GB split into MIG GPU instances, with MPS
# (github.com/ztouchnetworks/k8s-dra-driver-gpu, README): the GPU row is the whole device, each
# row of the MIG devices box one GPU instance's own memory with its BAR1 line under it.
MIG_570 = """\
Mon Jun 23 15:43:26 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.148.08             Driver Version: 570.148.08     CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA A100 80GB PCIe          On  |   00000000:B6:00.0 Off |                   On |
| N/A   57C    P0            223W /  300W |    5728MiB /  81920MiB |     N/A      Default |
|                                         |                        |              Enabled |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| MIG devices:                                                                            |
+------------------+----------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |
|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |
|==================+==================================+===========+=======================|
|  0    1   0   0  |            1442MiB / 40192MiB    | 42      0 |  3   0    2    0    0 |
|                  |                 6MiB / 65535MiB  |           |                       |
+------------------+----------------------------------+-----------+-----------------------+
|  0   13   0   2  |            1376MiB /  9728MiB    | 14      0 |  1   0    0    0    0 |
|                  |                 4MiB / 16383MiB  |           |                       |
+------------------+----------------------------------+-----------+-----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|=========================================================================================|
|    0    1    0          3817640    M+C   /tmp/sample                             648MiB |
|    0   13    0          3817658      C   /tmp/sample                             664MiB |
+-----------------------------------------------------------------------------------------+
"""


def test_mig_instances_are_parts_of_their_gpu_kept_apart_by_source(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, MIG_570)
    used = _by_source(trace, "device_used_bytes")
    total = _by_source(trace, "device_total_bytes")
    assert used == {
        "": [(0, 5728.0 * MiB)],
        "mig=1": [(0, 1442.0 * MiB)],
        "mig=13": [(0, 1376.0 * MiB)],
    }
    assert total == {
        "": [(0, 81920.0 * MiB)],
        "mig=1": [(0, 40192.0 * MiB)],
        "mig=13": [(0, 9728.0 * MiB)],
    }
    assert _rows(trace, "process_used_bytes") == [(0, 648.0 * MiB), (0, 664.0 * MiB)]
    (diag,) = trace.manifest.sources
    # the BAR1 lines are mapped address space, read and set aside
    assert (
        diag.skipped["MIG instance's BAR1 line (mapped address space, not device memory)"].count
        == 2
    )
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped


# The MIG devices box alone, as pasted (github.com/XuehaiPan/nvitop/pull/8, driver 470 era), and
# a 450-era box without BAR1 lines whose compute instances share one GPU instance (NVIDIA's MIG
# user guide, "three BlackScholes" example): the shared memory is stated once.
MIG_BOX_ONLY = """\
+-----------------------------------------------------------------------------+
| MIG devices:                                                                |
+------------------+----------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |
|      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|
|==================+======================+===========+=======================|
|  1    3   0   0  |  14366MiB / 19968MiB | 28      0 |  2   0    1    0    0 |
|                  |      4MiB / 32767MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+
|  1    5   0   1  |   9826MiB / 19968MiB | 28      0 |  2   0    1    0    0 |
|                  |      2MiB / 32767MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+
|  2    3   0   0  |  15210MiB / 19968MiB | 28      0 |  2   0    1    0    0
"""
MIG_SHARED_CI = """\
+-----------------------------------------------------------------------------+
| MIG devices:                                                                |
+------------------+----------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |
|      ID  ID  Dev |                      | SM     Unc| CE  ENC  DEC  OFA  JPG|
|==================+======================+===========+=======================|
|  0    1   0   0  |    476MiB / 20224MiB | 14      0 |  3   0    2    0    0 |
+------------------+                      +-----------+-----------------------+
|  0    1   1   1  |                      | 14      0 |  3   0    2    0    0 |
+------------------+                      +-----------+-----------------------+
|  0    1   2   2  |                      | 14      0 |  3   0    2    0    0 |
+------------------+----------------------+-----------+-----------------------+
"""


def test_a_mig_box_pasted_alone_is_read_untimed(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, MIG_BOX_ONLY)
    assert trace.manifest.sources[0].parser == "nvidia-smi-table"
    assert _by_source(trace, "device_used_bytes") == {
        "mig=3": [(1, 14366.0 * MiB), (2, 15210.0 * MiB)],
        "mig=5": [(1, 9826.0 * MiB)],
    }


def test_compute_instances_sharing_a_gpu_instance_state_its_memory_once(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, MIG_SHARED_CI)
    assert _by_source(trace, "device_used_bytes") == {"mig=1": [(0, 476.0 * MiB)]}
    assert _by_source(trace, "device_total_bytes") == {"mig=1": [(0, 20224.0 * MiB)]}
    assert any("share their GPU instance's memory" in n for n in trace.manifest.sources[0].notes)


# Driver R610 on two idle B200s (github.com/sgl-project/sglang/issues/27487, June 2026): the header
# names the kernel-mode driver and the CUDA user-mode driver, the paste stops at a rule.
DRIVER_610 = """\
```text
Sun Jun  7 08:16:57 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 610.43.02              KMD Version: 610.43.02     CUDA UMD Version: 13.3     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA B200                    On  |   00000000:63:00.0 Off |                    0 |
| N/A   26C    P0            139W / 1000W |       0MiB / 183359MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA B200                    On  |   00000000:68:00.0 Off |                    0 |
| N/A   30C    P0            142W / 1000W |       0MiB / 183359MiB |      0%      Default |
+----
```
"""


def test_a_610_header_naming_the_kmd_and_umd_versions_is_a_table(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, DRIVER_610)
    assert trace.manifest.sources[0].parser == "nvidia-smi-table"
    assert _rows(trace, "device_total_bytes") == [(0, 183359.0 * MiB), (1, 183359.0 * MiB)]
    assert _rows(trace, "device_used_bytes") == [(0, 0.0), (1, 0.0)]
