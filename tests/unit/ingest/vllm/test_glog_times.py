"""PyTorch's own lines inside a vLLM log print their own year-less time (c10's logging:
``[rank1]:[W812 16:00:28.643448608 CUDACachingAllocator.cpp:3933] ...``): the vLLM reader takes
it, as the PyTorch-log reader does, rather than the time of the vLLM header line before them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from tests.factories import file_at

MTIME = datetime(2026, 8, 12, 18, 0, tzinfo=UTC)
# vLLM's profiling lines as https://github.com/vllm-project/vllm/issues/15598 prints them; the
# allocator's warning as https://github.com/pytorch/pytorch/issues/193195 quotes it (vLLM at
# start-up under torch 2.13)
PROFILE = (
    "{p}INFO 08-12 15:59:50 [worker.py:267] Memory profiling takes 4.26 seconds\n"
    "{p}INFO 08-12 16:00:01 [worker.py:267] the current vLLM instance can use total_gpu_memory "
    "(44.53GiB) x gpu_memory_utilization (0.98) = 43.64GiB\n"
)
RETRY = (
    "{p}[rank1]:[W812 16:00:28.643448608 CUDACachingAllocator.cpp:3933] memory allocation failed "
    "with OOM on device 1 while trying to allocate 20971520 bytes (free: 15794176, total: "
    "150111977472).\n"
)
AFTER = "{p}INFO 08-12 16:00:40 [worker.py:267] Memory profiling takes 1.02 seconds\n"


def _events(tmp_path: Path, prefix: str) -> pl.DataFrame:
    text = (PROFILE + RETRY + AFTER).format(p=prefix)
    trace = ingest_paths([file_at(tmp_path / "vllm.log", MTIME, text=text)], IngestOptions())
    assert trace.manifest.sources[0].parser == "vllm-log"
    return trace.events.select("ts", "kind", "device")


def test_a_c10_line_keeps_its_own_time(tmp_path: Path) -> None:
    # not 16:00:01, the header line's before it
    assert _events(tmp_path, "").rows() == [
        (datetime(2026, 8, 12, 16, 0, 28, tzinfo=UTC), "warning", 1)
    ]


def test_behind_a_process_prefix_too(tmp_path: Path) -> None:
    assert _events(tmp_path, "(VllmWorkerProcess pid=2421) ").rows() == [
        (datetime(2026, 8, 12, 16, 0, 28, tzinfo=UTC), "warning", 1)
    ]


def test_the_oom_after_it_takes_its_time(tmp_path: Path) -> None:
    # https://github.com/OpenBMB/MiniCPM-V/issues/504: a c10 line after the OOM; the OOM, with
    # no time of its own, keeps the header's before it, and the c10 time does not move it
    text = (
        "INFO 08-22 09:49:30 [worker.py:267] Memory profiling takes 4.26 seconds\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
        "has a total capacity of 23.55 GiB of which 1.87 GiB is free. Process 1809110 has 4.37 "
        "GiB memory in use. Including non-PyTorch memory, this process has 17.29 GiB memory in "
        "use. Of the allocated memory 16.75 GiB is allocated by PyTorch, and 95.97 MiB is "
        "reserved by PyTorch but unallocated.\n"
        "[rank0]:[W822 09:49:35.946254597 ProcessGroupNCCL.cpp:1168] Warning: WARNING: process "
        "group has NOT been destroyed before we destruct ProcessGroupNCCL.\n"
    )
    path = file_at(tmp_path / "vllm.log", datetime(2026, 8, 23, tzinfo=UTC), text=text)
    trace = ingest_paths([path], IngestOptions())
    ooms = trace.events.filter(pl.col("kind") == "oom")
    assert ooms["ts"].to_list() == [datetime(2026, 8, 22, 9, 49, 30, tzinfo=UTC)]
