"""PyTorch OOM messages of every generation become oom events with exact byte sizes."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomtrace.ingest.torch.oom_text import extract_ooms
from oomtrace.schema import conform
from oomtrace.units import GiB, MiB
from tests.factories import at

OLD_CACHED = (
    "RuntimeError: CUDA out of memory. Tried to allocate 8.94 GiB (GPU 0; 15.90 GiB total "
    "capacity; 8.94 GiB already allocated; 6.34 GiB free; 0 bytes cached)"
)
OLD_HINT = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 26.00 MiB (GPU 0; 23.69 "
    "GiB total capacity; 20.89 GiB already allocated; 23.69 MiB free; 22.11 GiB reserved in total "
    "by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
    "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)
TYPO_21 = (
    "CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacty of 23.69 GiB of "
    "which 7.11 GiB is free. Process 2006998 has 256.00 MiB memory in use. Including non-PyTorch "
    "memory, this process has 16.31 GiB memory in use. Of the allocated memory 16.01 GiB is "
    "allocated by PyTorch, and 7.47 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See "
    "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)
CURRENT_IN_VLLM_WORKER = (
    "(VllmWorker rank=1 pid=254) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "1.25 GiB. GPU 1 has a total capacity of 93.02 GiB of which 1.18 GiB is free. Process 2752205 "
    "has 91.82 GiB memory in use. Of the allocated memory 90.63 GiB is allocated by PyTorch, and "
    "120.54 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
    "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#"
    "environment-variables)"
)
PRIVATE_POOL = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of "
    "which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.59 GiB memory in "
    "use. 70.00 GiB allowed; Of the allocated memory 60.00 GiB is allocated by PyTorch, with 4.00 "
    "GiB allocated in private pools (e.g., CUDA Graphs), and 9.00 GiB is reserved by PyTorch but "
    "unallocated."
)
NPU = (
    "NPU out of memory. Tried to allocate 326.00 MiB (NPU 0; 60.96 GiB total capacity; 57.81 GiB "
    "already allocated; 57.81 GiB current active; 6.76 MiB free; 58.78 GiB reserved in total by "
    "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb"
)


def _lines(*texts: str) -> pl.DataFrame:
    return pl.DataFrame(
        {"ts": [at(i) for i in range(len(texts))], "text": list(texts)},
        schema={"ts": pl.Datetime("ns", "UTC"), "text": pl.String},
    )


def _one(text: str) -> dict[str, object]:
    events, _ = extract_ooms(_lines(text))
    assert events.height == 1
    return events.row(0, named=True)


def test_oldest_cached_layout() -> None:
    row = _one(OLD_CACHED)
    assert row["requested_bytes"] == round(8.94 * GiB)
    assert row["total_bytes"] == round(15.90 * GiB)
    assert row["free_bytes"] == round(6.34 * GiB)
    assert row["allocated_bytes"] == round(8.94 * GiB)
    assert row["reserved_unallocated_bytes"] is None
    assert row["device"] == 0


def test_old_layout_with_hint_derives_reserved_but_unallocated() -> None:
    row = _one(OLD_HINT)
    assert row["requested_bytes"] == 26 * MiB
    assert row["free_bytes"] == round(23.69 * MiB)
    assert row["reserved_unallocated_bytes"] == round(22.11 * GiB) - round(20.89 * GiB)


def test_torch_21_typo_layout_and_the_other_process() -> None:
    events, samples = extract_ooms(_lines(TYPO_21))
    row = events.row(0, named=True)
    assert row["requested_bytes"] == 8 * GiB
    assert row["total_bytes"] == round(23.69 * GiB)
    assert row["process_bytes"] == round(16.31 * GiB)
    assert row["allocated_bytes"] == round(16.01 * GiB)
    assert row["reserved_unallocated_bytes"] == round(7.47 * MiB)
    assert samples.select("pid", "metric", "value").to_dicts() == [
        {"pid": 2006998, "metric": "process_used_bytes", "value": float(256 * MiB)}
    ]


def test_current_layout_behind_a_worker_prefix_on_gpu_1() -> None:
    events, samples = extract_ooms(_lines(CURRENT_IN_VLLM_WORKER))
    row = events.row(0, named=True)
    assert row["device"] == 1
    assert row["requested_bytes"] == round(1.25 * GiB)
    assert row["process_bytes"] is None
    assert samples["pid"].to_list() == [2752205]
    assert samples["device"].to_list() == [1]


def test_private_pool_and_allowed_clauses_do_not_hide_the_sizes() -> None:
    row = _one(PRIVATE_POOL)
    assert row["allocated_bytes"] == 60 * GiB
    assert row["reserved_unallocated_bytes"] == 9 * GiB
    assert row["process_bytes"] == round(77.59 * GiB)


def test_other_vendors_old_layout() -> None:
    row = _one(NPU)
    assert row["requested_bytes"] == 326 * MiB
    assert row["free_bytes"] == round(6.76 * MiB)


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "CUDA out of memory. Tried to allocate more than 1EB memory.",
    ],
)
def test_sizeless_failures_are_ooms_with_null_sizes_never_zero(text: str) -> None:
    row = _one(text)
    assert row["kind"] == "oom"
    assert row["requested_bytes"] is None
    assert row["free_bytes"] is None
    assert "no size stated" in str(row["detail"])


def test_the_same_failure_printed_twice_counts_once_but_two_devices_count_twice() -> None:
    wrapped = f"RuntimeError: Worker failed with error '{TYPO_21}', please check the stack trace"
    on_gpu1 = TYPO_21.replace("GPU 0", "GPU 1")
    events, _ = extract_ooms(_lines(TYPO_21, wrapped, on_gpu1))
    assert events["device"].to_list() == [0, 1]


def test_the_events_conform_to_the_canonical_table() -> None:
    events, samples = extract_ooms(_lines(OLD_HINT, CURRENT_IN_VLLM_WORKER))
    conform("events", events.with_columns(node=pl.lit("n"), source=pl.lit("s")))
    conform("samples", samples.with_columns(node=pl.lit("n"), source=pl.lit("s")))


def test_lines_without_an_oom_give_empty_frames_of_the_right_shape() -> None:
    events, samples = extract_ooms(_lines("INFO all good", "memory is fine"))
    assert events.height == 0
    assert samples.height == 0
    conform("events", events.with_columns(node=pl.lit("n"), source=pl.lit("s")))


@settings(max_examples=50)
@given(st.lists(st.text(max_size=200), max_size=20))
def test_arbitrary_text_never_raises(texts: list[str]) -> None:
    extract_ooms(_lines(*texts))
