"""Allocations an allocator failed and retried (PyTorch 2.13's caching-allocator warning,
TensorFlow's stream executor): memory pressure, one ``warning`` event per streak on a device,
never an ``oom``; the failure, where one follows, is the framework's own error."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from oomtrace.units import MiB
from tests.factories import file_at

MTIME = datetime(2026, 8, 12, 18, 0, tzinfo=UTC)
# https://github.com/pytorch/pytorch/issues/193195 (vLLM at start-up under torch 2.13)
WARNING = (
    "[rank1]:[W812 16:00:28.643448608 CUDACachingAllocator.cpp:3933] memory allocation failed "
    "with OOM on device {device} while trying to allocate {size} bytes (free: {free}, total: "
    "150111977472).\n"
)


def _ingest(tmp_path: Path, text: str) -> Trace:
    return ingest_paths([file_at(tmp_path / "server.log", MTIME, text=text)], IngestOptions())


def _kinds(trace: Trace) -> list[tuple[object, ...]]:
    return trace.events.select("kind", "device", "requested_bytes", "free_bytes").rows()


def test_the_caching_allocators_warning_is_memory_pressure_not_an_oom(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, WARNING.format(device=1, size=20971520, free=15794176))
    assert _kinds(trace) == [("warning", 1, 20971520, 15794176)]
    (row,) = trace.events.rows(named=True)
    assert row["total_bytes"] == 150111977472
    assert row["detail"].startswith("PyTorch's caching allocator could not get device memory once")
    (diag,) = trace.manifest.sources
    assert diag.lines_recognised == diag.lines_read == 1


def test_a_streak_per_device_and_the_oom_that_follows_stays_one(tmp_path: Path) -> None:
    lines = [
        WARNING.format(device=1, size=size, free=free)
        for size, free in ((20971520, 15794176), (41943040, 9437184), (20971520, 12582912))
    ]
    lines.append(WARNING.format(device=0, size=2097152, free=1048576))
    lines.append(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a "
        "total capacity of 139.80 GiB of which 1.00 MiB is free. Including non-PyTorch memory, "
        "this process has 139.79 GiB memory in use. Of the allocated memory 137.00 GiB is "
        "allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated.\n"
    )
    trace = _ingest(tmp_path, "".join(lines))
    # (all at the warnings' one printed time: the order among them is no statement)
    assert sorted(_kinds(trace)) == [
        ("oom", 0, 2 * MiB, 1 * MiB),
        ("warning", 0, 2097152, 1048576),
        ("warning", 1, 41943040, 9437184),
    ]
    streak = trace.events.filter(pl.col("device") == 1)
    assert "3 times" in streak["detail"][0]


def test_the_warnings_own_time_is_read_without_a_year(tmp_path: Path) -> None:
    # c10's logging prints "[W812 16:00:28.643448608 ...]": August 12, no year, the month
    # unpadded; the year is the file's (its modification time, MTIME), the zone UTC unless told
    lines = WARNING.format(device=1, size=20971520, free=15794176) + WARNING.replace(
        "16:00:28.643448608", "16:00:31.000000001"
    ).format(device=1, size=41943040, free=9437184)
    trace = _ingest(tmp_path, lines)
    assert trace.events["ts"].to_list() == [datetime(2026, 8, 12, 16, 0, 28, 643448, tzinfo=UTC)]
    (diag,) = trace.manifest.sources
    assert any("year-less timestamps" in note for note in diag.notes)
    assert trace.manifest.clock["year_assumed"] is True


def test_tensorflows_retries_are_one_warning(tmp_path: Path) -> None:
    # https://github.com/talmolab/sleap/issues/2142: the BFC allocator says "this is not a failure"
    text = "".join(
        f"2025-03-17 17:48:09.{ms}: I tensorflow/stream_executor/cuda/cuda_driver.cc:739] failed "
        f"to allocate {shown} ({size} bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
        for ms, shown, size in (
            ("854267", "2.12G", 2282521344),
            ("935580", "4.00G", 4294967296),
            ("987532", "4.00G", 4294967296),
        )
    )
    trace = _ingest(tmp_path, text)
    assert _kinds(trace) == [("warning", None, 4294967296, None)]
    assert trace.events["ts"][0] == datetime(2025, 3, 17, 17, 48, 9, 854267, tzinfo=UTC)


def test_torch_memory_savers_cuda_error_2_is_an_oom_without_sizes(tmp_path: Path) -> None:
    # https://github.com/fzyzcjy/torch_memory_saver/issues/99 (SGLang resuming its KV cache)
    text = (
        "[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp "
        "func=resume line=172\n"
    )
    trace = _ingest(tmp_path, text)
    assert _kinds(trace) == [("oom", None, None, None)]
    assert trace.events.filter(pl.col("kind") == "oom")["total_bytes"].to_list() == [None]


def test_the_expandable_segments_warning_wrapped_in_two(tmp_path: Path) -> None:
    # PyTorch 2.13 with expandable segments, as a run's notes quote it (an A40, two lines)
    text = (
        "    expandable_segments: memory mapping failed with OOM on device 0\n"
        "    while trying to map 20971520 bytes (free: 20250624, total: 51043958784)\n"
    )
    trace = _ingest(tmp_path, text)
    assert _kinds(trace) == [("warning", 0, 20971520, 20250624)]
    assert trace.events["total_bytes"].to_list() == [51043958784]
    (diag,) = trace.manifest.sources
    assert diag.lines_recognised == diag.lines_read == 2


def test_a_warning_wrapped_before_its_figures_then_the_engines_failure(tmp_path: Path) -> None:
    # vLLM's CUDA graph capture on a 22 GiB card, as a deployment's notes quote it
    text = (
        "Capturing CUDA graphs (FULL):  57%|#####     | 20/35\n"
        "[rank0] memory allocation failed with OOM on device 0 while trying to allocate "
        "2097152 bytes\n"
        "        (free: 2031616, total: 23661248512)\n"
        "RuntimeError: Engine core initialization failed.\n"
    )
    trace = _ingest(tmp_path, text)
    assert _kinds(trace) == [("warning", 0, 2097152, 2031616)]
    assert trace.events["detail"][0].startswith("PyTorch's caching allocator")


def test_in_a_vllm_log_the_warnings_are_read_by_vllms_reader(tmp_path: Path) -> None:
    # pytorch/pytorch#193195: vLLM at start-up under torch 2.13 prints the warning thousands of
    # times between its own records (the worker's C++ log has no vLLM header nor process prefix)
    head = "(EngineCore_DP0 pid=413) INFO 08-12 16:00:{s:02d} [gpu_worker.py:298] "
    text = (
        head.format(s=20)
        + "Model loading took 14.99 GiB memory and 20.1 seconds\n"
        + WARNING.format(device=1, size=20971520, free=15794176)
        + WARNING.format(device=1, size=41943040, free=9437184)
        + head.format(s=29)
        + "Available KV cache memory: 9.38 GiB\n"
    )
    trace = _ingest(tmp_path, text)
    (source,) = trace.manifest.sources
    assert source.parser == "vllm-log"
    assert _kinds(trace) == [("warning", 1, 41943040, 9437184)]
    (row,) = trace.events.rows(named=True)
    assert row["total_bytes"] == 150111977472
    assert row["detail"].startswith(
        "PyTorch's caching allocator could not get device memory 2 times"
    )
    assert source.lines_recognised == source.lines_read == 4
