"""An nvidia-smi table printed inside a log the ``pytorch-log`` parser reads (TGI's
``text-generation-launcher --env`` report): its GPUs' memory is read by the table reader's rules,
beside the log's own lines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace

# https://github.com/huggingface/text-generation-inference/issues/1156: TGI 1.1 on a vGPU slice
# of an A100 (OpenShift), the launcher's `--env` report; nvidia-smi's box is indented by three
# blanks and the paste ends mid-row
ENV_REPORT = """\
root@tgi-deployment-5f6c7d:/usr/src# text-generation-launcher --env
2023-10-16T06:54:22.050932Z  INFO text_generation_launcher: Runtime environment:
Target: x86_64-unknown-linux-gnu
Cargo version: 1.70.0
Commit sha: 3af1a1140141245c20df20a787831ec71b124eae
Docker label: sha-3af1a11
nvidia-smi:
Mon Oct 16 06:54:22 2023
   +---------------------------------------------------------------------------------------+
   | NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
   |-----------------------------------------+----------------------+----------------------+
   | GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
   | Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
   |                                         |                      |               MIG M. |
   |=========================================+======================+======================|
   |   0  GRID A100D-20C                 On  | 00000000:02:00.0 Off |                    0 |
   | N/A   N/A    P0              N/A /  N/A |   4433MiB / 20480MiB |      0%      Default |
   |                                         |                      |             Disabl
"""


def _ingest(tmp_path: Path, text: str) -> Trace:
    path = tmp_path / "tgi.log"
    path.write_text(text)
    return ingest_paths([path], IngestOptions(year=2023))


def test_the_table_in_tgis_env_report_gives_the_gpus_memory(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, ENV_REPORT)
    source = trace.manifest.sources[0]
    assert source.parser == "pytorch-log"
    memory = dict(trace.samples.select("metric", "value").iter_rows())
    assert memory == {"device_used_bytes": 4433 * 2**20, "device_total_bytes": 20480 * 2**20}
    assert trace.samples.get_column("device").to_list() == [0, 0]
    # at the time line nvidia-smi printed above its box
    assert set(trace.samples.get_column("ts")) == {datetime(2023, 10, 16, 6, 54, 22, tzinfo=UTC)}
    # time line, header box, GPU row and its memory line; the rest of the report is not used
    assert source.lines_recognised == 4
    assert source.lines_recognised + sum(s.count for s in source.skipped.values()) == 18


def test_an_oom_after_the_report_is_read_beside_the_table(tmp_path: Path) -> None:
    oom = (
        "2023-10-16T06:55:10.120000Z ERROR warmup{max_input_length=1024}: "
        "text_generation_client: router/client/src/lib.rs:33: Server error: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 20.00 GiB of which 1.02 GiB "
        "is free. Of the allocated memory 14.61 GiB is allocated by PyTorch, and 1.90 GiB is "
        "reserved by PyTorch but unallocated.\n"
    )
    trace = _ingest(tmp_path, ENV_REPORT + oom)
    assert trace.events.filter(pl.col("kind") == "oom").height == 1
    assert trace.samples.filter(pl.col("metric") == "device_total_bytes").height == 1


def test_a_table_without_its_time_line_inside_a_log_is_left_out_counted(tmp_path: Path) -> None:
    text = ENV_REPORT.replace("Mon Oct 16 06:54:22 2023\n", "")
    trace = _ingest(tmp_path, text)
    assert trace.samples.height == 0
    source = trace.manifest.sources[0]
    assert any("without nvidia-smi's time line, inside another log" in n for n in source.notes)
