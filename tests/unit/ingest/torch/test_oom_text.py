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
    # the worker (pid 254 in its container) is listed by its host pid: the only process that
    # holds the 90.63 GiB + 120.54 MiB PyTorch had reserved is the one that failed
    assert (row["pid"], row["process_bytes"]) == (2752205, round(91.82 * GiB))
    assert samples["pid"].to_list() == [2752205]
    assert samples["device"].to_list() == [1]


def test_private_pool_and_allowed_clauses_do_not_hide_the_sizes() -> None:
    row = _one(PRIVATE_POOL)
    assert row["allocated_bytes"] == 60 * GiB
    assert row["reserved_unallocated_bytes"] == 9 * GiB
    assert row["process_bytes"] == round(77.59 * GiB)
    # the memory fraction's limit is not the device: the total stays the device's capacity
    assert row["total_bytes"] == round(79.10 * GiB)
    assert "70.00 GiB allowed by the process's memory fraction" in str(row["detail"])


def test_other_vendors_old_layout() -> None:
    row = _one(NPU)
    assert row["requested_bytes"] == 326 * MiB
    assert row["free_bytes"] == round(6.76 * MiB)


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: CUDA error: out of memory",
        # the driver API's error (noonghunna/club-3090#60, vLLM repacking GPTQ weights)
        "RuntimeError: CUDA driver error: out of memory",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "CUDA out of memory. Tried to allocate more than 1EB memory.",
        # PyTorch 0.x (pytorch/pytorch #1829)
        (
            "RuntimeError: cuda runtime error (2) : out of memory at "
            "/pytorch/torch/lib/THC/generic/THCStorage.cu:66"
        ),
        (
            "THCudaCheck FAIL file=/pytorch/torch/lib/THC/generic/THCStorage.cu line=66 error=2 : "
            "out of memory"
        ),
    ],
)
def test_sizeless_failures_are_ooms_with_null_sizes_never_zero(text: str) -> None:
    row = _one(text)
    assert row["kind"] == "oom"
    assert row["requested_bytes"] is None
    assert row["free_bytes"] is None
    assert "no size stated" in str(row["detail"])


def test_a_message_cut_short_where_it_was_pasted_keeps_the_size_it_states() -> None:
    # sgl-project/sglang #4730 quotes the message up to "... a total capaci"
    row = _one(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 616.00 MiB. GPU 0 has a "
        "total capaci"
    )
    assert (row["requested_bytes"], row["device"]) == (616 * MiB, 0)
    assert (row["total_bytes"], row["free_bytes"]) == (None, None)
    assert row["detail"] == "PyTorch OOM message cut short: only the requested size read"


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


# --- the process clauses: every process on the device, each with its pid ---------------------

# vllm-project/vllm#14452: a TP worker on a 16 GB card; vLLM prints "pid=" before every line.
THIS_PROCESS_IN_A_WORKER = (
    "(VllmWorker rank=0 pid=10672) ERROR 03-16 06:12:38 [multiproc_executor.py:375] "
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB. GPU 0 has a total "
    "capacity of 15.48 GiB of which 953.94 MiB is free. Including non-PyTorch memory, this "
    "process has 14.53 GiB memory in use. Of the allocated memory 12.19 GiB is allocated by "
    "PyTorch, with 81.88 MiB allocated in private pools (e.g., CUDA Graphs), and 368.65 MiB is "
    "reserved by PyTorch but unallocated."
)
# A vLLM container beside a leftover process (a public write-up of a Qwen3.5 deployment): vLLM's
# engine is pid 194 in its container, NVML lists it by its host pid 3112211.
TWO_LISTED_IN_A_CONTAINER = (
    "(EngineCore pid=194) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.03 GiB. "
    "GPU 0 has a total capacity of 23.52 GiB of which 904.25 MiB is free. Process 503076 has "
    "9.91 MiB memory in use. Process 3112211 has 22.61 GiB memory in use. Of the allocated memory "
    "21.95 GiB is allocated by PyTorch, and 183.56 MiB is reserved by PyTorch but unallocated."
)
# A diffusers reproduction on a shared 95 GiB card: two other processes, then "this process".
OTHERS_THEN_THIS_PROCESS = (
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 130.00 MiB. GPU 0 has a total "
    "capacity of 94.96 GiB of which 59.69 MiB is free. Process 502587 has 1.78 GiB memory in use. "
    "Process 745081 has 86.44 GiB memory in use. Including non-PyTorch memory, this process has "
    "6.62 GiB memory in use. Of the allocated memory 5.97 GiB is allocated by PyTorch, and 116.33 "
    "MiB is reserved by PyTorch but unallocated."
)
# An FSDP job's four ranks on one GPU (a verl run): three hold more than the failing one's
# reserve, so which one failed cannot be told.
FOUR_RANKS_ONE_GPU = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total "
    "capacity of 39.49 GiB of which 57.00 MiB is free. Process 2213429 has 5.49 GiB memory in use. "
    "Process 2213427 has 4.63 GiB memory in use. Process 2213428 has 18.89 GiB memory in use. "
    "Process 2213430 has 10.39 GiB memory in use. Of the allocated memory 4.98 GiB is allocated "
    "by PyTorch, and 28.38 MiB is reserved by PyTorch but unallocated."
)


def _processes(samples: pl.DataFrame) -> dict[int, int]:
    assert set(samples["metric"]) <= {"process_used_bytes"}
    return {int(p): int(v) for p, v in samples.select("pid", "value").iter_rows()}


def test_this_process_is_named_by_the_pid_its_line_prints() -> None:
    events, samples = extract_ooms(_lines(THIS_PROCESS_IN_A_WORKER))
    row = events.row(0, named=True)
    assert (row["pid"], row["process_bytes"]) == (10672, round(14.53 * GiB))
    assert row["allocated_bytes"] == round(12.19 * GiB)
    assert _processes(samples) == {10672: round(14.53 * GiB)}
    assert 'failing process: pid 10672 ("this process")' in str(row["detail"])


def test_a_pid_the_parser_knows_names_this_process_too() -> None:
    lines = _lines(OTHERS_THEN_THIS_PROCESS).with_columns(pid=pl.lit(41, pl.Int64))
    events, samples = extract_ooms(lines)
    assert events["pid"].to_list() == [41]
    assert _processes(samples)[41] == round(6.62 * GiB)


def test_in_a_container_the_failing_process_is_the_one_holding_pytorchs_reserve() -> None:
    events, samples = extract_ooms(_lines(TWO_LISTED_IN_A_CONTAINER))
    row = events.row(0, named=True)
    # 22.61 GiB is at least 21.95 GiB + 183.56 MiB; 9.91 MiB is not: NVML's pid, not the 194
    # the engine printed inside its container
    assert (row["pid"], row["process_bytes"]) == (3112211, round(22.61 * GiB))
    assert _processes(samples) == {503076: round(9.91 * MiB), 3112211: round(22.61 * GiB)}


def test_other_processes_and_this_process_without_a_pid() -> None:
    events, samples = extract_ooms(_lines(OTHERS_THEN_THIS_PROCESS))
    row = events.row(0, named=True)
    assert row["process_bytes"] == round(6.62 * GiB)
    assert row["pid"] is None
    assert "its pid not printed" in str(row["detail"])
    assert _processes(samples) == {502587: round(1.78 * GiB), 745081: round(86.44 * GiB)}


def test_several_candidates_name_no_failing_process() -> None:
    events, samples = extract_ooms(_lines(FOUR_RANKS_ONE_GPU))
    row = events.row(0, named=True)
    assert row["pid"] is None
    assert row["process_bytes"] is None
    assert _processes(samples) == {
        2213429: round(5.49 * GiB),
        2213427: round(4.63 * GiB),
        2213428: round(18.89 * GiB),
        2213430: round(10.39 * GiB),
    }


def test_old_layout_and_sizeless_lines_never_take_the_printing_pid() -> None:
    lines = _lines(OLD_HINT, "RuntimeError: CUDA error: out of memory").with_columns(
        pid=pl.lit(7, pl.Int64)
    )
    events, samples = extract_ooms(lines)
    assert events["pid"].to_list() == [None, None]
    assert samples.height == 0


# --- ROCm, the memory fraction's "allowed" figure, and the cudaMallocAsync refusal ----------

# lemonade-sdk/vllm-rocm#5: vLLM on gfx1151, behind a desktop launcher's prefix.
ROCM_SENTENCES = (
    "2026-05-08 11:47:02.257 [Error] (Process) (EngineCore pid=2651) torch.OutOfMemoryError: HIP "
    "out of memory. Tried to allocate 12.95 GiB. GPU 0 has a total capacity of 127.00 GiB of which "
    "18.55 GiB is free. Of the allocated memory 99.37 GiB is allocated by PyTorch, and 121.80 MiB "
    "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
# A rocm/pytorch container on a 512 MiB APU (ROCm issue 1756 thread), PyTorch 1.x wording.
ROCM_OLD = (
    "torch.cuda.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB (GPU 0; 512.00 MiB "
    "total capacity; 150.39 MiB already allocated; 312.00 MiB free; 168.00 MiB reserved in total "
    "by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
    "fragmentation.  See documentation for Memory Management and PYTORCH_HIP_ALLOC_CONF"
)
# pytorch/pytorch#111729: a memory fraction of 1.0 on a 12 GB card (GPU 3).
OLD_ALLOWED = (
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB (GPU 3; 11.93 GiB total "
    "capacity; 10.67 GiB already allocated; 515.38 MiB free; 11.93 GiB allowed; 10.92 GiB reserved "
    "in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb"
)


def test_rocm_sentences_and_old_layout_are_read_like_cuda() -> None:
    events, _ = extract_ooms(_lines(ROCM_SENTENCES, ROCM_OLD))
    new, old = events.to_dicts()
    assert new["requested_bytes"] == round(12.95 * GiB)
    assert new["total_bytes"] == 127 * GiB
    assert new["free_bytes"] == round(18.55 * GiB)
    assert new["allocated_bytes"] == round(99.37 * GiB)
    assert new["reserved_unallocated_bytes"] == round(121.80 * MiB)
    assert old["requested_bytes"] == 2 * MiB
    assert old["total_bytes"] == 512 * MiB
    assert old["free_bytes"] == 312 * MiB
    assert old["reserved_unallocated_bytes"] == round(168 * MiB) - round(150.39 * MiB)
    assert all("ROCm (HIP)" in d for d in events["detail"])


def test_rocm_sizeless_error_is_an_oom() -> None:
    row = _one("RuntimeError: HIP error: out of memory")
    assert row["requested_bytes"] is None
    assert row["detail"] == "HIP error: out of memory (no size stated); ROCm (HIP)"


def test_old_layout_allowed_figure_is_the_fractions_not_the_devices() -> None:
    row = _one(OLD_ALLOWED)
    assert row["device"] == 3
    assert row["total_bytes"] == round(11.93 * GiB)
    assert row["requested_bytes"] == 4 * GiB
    assert row["free_bytes"] == round(515.38 * MiB)
    assert row["allocated_bytes"] == round(10.67 * GiB)
    assert row["reserved_unallocated_bytes"] == round(10.92 * GiB) - round(10.67 * GiB)
    assert row["detail"] == (
        "PyTorch OOM message (old layout); 11.93 GiB allowed by the process's memory fraction"
    )


# huggingface/text-generation-inference#563: TGI's router panics with the shard's error, the
# refusal's newlines escaped inside one line.
TGI_PANIC = (
    "thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would "
    "exceed allowed memory. (out of memory)\\nCurrently allocated     : 16.08 GiB\\nRequested   "
    "            : 4.83 GiB\\nDevice limit            : 22.20 GiB\\nFree (according to CUDA): "
    "11.12 MiB\\nPyTorch limit (set by user-supplied memory fraction)\\n                        "
    ": 22.20 GiB\")', router/src/main.rs:216:18"
)
# The same refusal as a UI shows it, newlines turned into spaces (no memory fraction set).
REFUSAL_ONE_LINE = (
    "OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory) "
    "Currently allocated : 12.20 GiB Requested : 1.88 GiB Device limit : 16.00 GiB Free (according "
    "to CUDA): 0 bytes PyTorch limit (set by user-supplied memory fraction) : 17179869184.00 GiB"
)
# And as it is printed: six lines (AIFSH/ComfyUI-ChatTTS#9), the limit's value on its own line.
REFUSAL_LINES = (
    (
        "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of "
        "memory)"
    ),
    "Currently allocated     : 6.89 GiB",
    "Requested               : 320.00 MiB",
    "Device limit            : 23.69 GiB",
    "Free (according to CUDA): 2.94 MiB",
    "PyTorch limit (set by user-supplied memory fraction)",
    "                        : 17179869184.00 GiB",
)


def test_tgi_warmup_panic_refusal_with_escaped_newlines() -> None:
    row = _one(TGI_PANIC)
    assert row["device"] == 0
    assert row["requested_bytes"] == round(4.83 * GiB)
    assert row["allocated_bytes"] == round(16.08 * GiB)
    assert row["total_bytes"] == round(22.20 * GiB)
    assert row["free_bytes"] == round(11.12 * MiB)
    # the launcher's "Unable to warmup model" places the OOM in the start-up (analysis reads it)
    assert row["detail"] == (
        "PyTorch cudaMallocAsync refusal: allocation would exceed allowed memory; limit 22.20 GiB "
        "(the memory fraction); during the warm-up before serving"
    )


def test_refusal_joined_on_one_line_without_a_fraction() -> None:
    row = _one(REFUSAL_ONE_LINE)
    assert row["requested_bytes"] == round(1.88 * GiB)
    assert row["allocated_bytes"] == round(12.20 * GiB)
    assert row["total_bytes"] == 16 * GiB
    assert row["free_bytes"] == 0
    assert str(row["detail"]).endswith("no memory fraction set, so CUDA itself refused")


def test_refusal_on_its_six_lines_is_one_event() -> None:
    lines = _lines(*REFUSAL_LINES).with_columns(ts=pl.lit(at(0)).cast(pl.Datetime("ns", "UTC")))
    events, _ = extract_ooms(lines)
    (row,) = events.to_dicts()
    assert row["requested_bytes"] == 320 * MiB
    assert row["allocated_bytes"] == round(6.89 * GiB)
    assert row["total_bytes"] == round(23.69 * GiB)
    assert row["free_bytes"] == round(2.94 * MiB)
    assert str(row["detail"]).endswith("no memory fraction set, so CUDA itself refused")


def test_refusal_lines_after_other_output_are_not_joined_to_it() -> None:
    # a continuation-like line after some other line is not part of a refusal
    lines = _lines("INFO all good", "Requested               : 320.00 MiB")
    events, _ = extract_ooms(lines)
    assert events.height == 0
