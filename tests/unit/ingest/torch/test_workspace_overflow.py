"""FlashInfer's attention workspace overflowing, read by every reader that meets it as an event
of its own kind (``workspace_overflow``), never an OOM: the buffer's name, the bytes asked and
the bytes the workspace had left where the message states them. Each excerpt names its thread."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest.torch.oom_text import extract_ooms
from tests.factories import text_trace

# https://github.com/sgl-project/sglang/issues/2102: the scheduler's traceback (the frames as the
# thread shows them, elided after the third) and FlashInfer's message before flashinfer#1357
SGLANG_2102 = (
    "[2024-11-20 16:40:55 TP0] Traceback (most recent call last):\n"
    '  File "/root/miniconda3/envs/sglang-backend/lib/python3.10/site-packages/sglang/srt/'
    'managers/scheduler.py", line 1196, in run_scheduler_process\n'
    "    scheduler.event_loop_normal()\n"
    '  File "/root/miniconda3/envs/sglang-backend/lib/python3.10/site-packages/torch/utils/'
    '_contextlib.py", line 116, in decorate_context\n'
    "    return func(*args, **kwargs)\n"
    '  File "/root/miniconda3/envs/sglang-backend/lib/python3.10/site-packages/sglang/srt/'
    'managers/scheduler.py", line 325, in event_loop_normal\n'
    "RuntimeError: Failed to allocate memory for batch_prefill_tmp_v with size 435814400 and "
    "alignment 16 in AlignedAllocator\n"
)
# https://github.com/vllm-project/vllm/issues/40023: the message after flashinfer#1357, with
# FlashInfer's own head, wrapped over four lines as the thread pastes it (CUDA graph capture)
VLLM_40023 = (
    "RuntimeError: Error in function 'aligned_alloc' at /workspace/include/flashinfer/"
    "allocator.h:49:\n"
    "  Buffer overflow when allocating memory for batch_prefill_tmp_v\n"
    "  with size 536346624 and alignment 16,\n"
    "  but only 413138944 bytes available in AlignedAllocator.\n"
    "  Increase the workspace buffer size.\n"
)
# https://github.com/vllm-project/vllm/issues/25342: one line, after the header's path
VLLM_25342 = (
    "site-packages/flashinfer/data/include/flashinfer/allocator.h:49: Buffer overflow when "
    "allocating memory for batch_prefill_tmp_v with size 283115520 and alignment 16, but only "
    "268435456 bytes available in AlignedAllocator. Increase the workspace buffer size.\n"
)


def _overflows(tmp_path: Path, name: str, text: str) -> pl.DataFrame:
    trace = text_trace(tmp_path, name, text)
    assert trace.events.filter(pl.col("kind") == "oom").height == 0
    return trace.events.filter(pl.col("kind") == "workspace_overflow")


def test_sglangs_traceback_is_one_overflow_not_an_oom(tmp_path: Path) -> None:
    trace = text_trace(tmp_path, "sglang.log", SGLANG_2102)
    assert trace.manifest.sources[0].parser == "sglang-log"
    (row,) = trace.events.to_dicts()
    assert row["kind"] == "workspace_overflow"
    assert row["ts"] == datetime(2024, 11, 20, 16, 40, 55, tzinfo=UTC)
    assert (row["requested_bytes"], row["free_bytes"]) == (435_814_400, None)
    assert "batch_prefill_tmp_v (alignment 16 bytes)" in row["detail"]


def test_the_wrapped_message_is_read_whole_with_what_was_left(tmp_path: Path) -> None:
    rows = _overflows(tmp_path, "paste.txt", VLLM_40023)
    assert rows.select("requested_bytes", "free_bytes").rows() == [(536_346_624, 413_138_944)]
    assert rows["detail"][0].startswith(
        "FlashInfer attention workspace overflow: batch_prefill_tmp_v"
    )


def test_the_one_line_form_after_the_headers_path(tmp_path: Path) -> None:
    rows = _overflows(tmp_path, "paste.txt", VLLM_25342)
    assert rows.select("requested_bytes", "free_bytes").rows() == [(283_115_520, 268_435_456)]


def test_vllms_prefixed_records_keep_the_process(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/40381's prefix and frames (EngineCore pid=269),
    # its message in the one-line form of vllm#25342 (the thread's own is cut off in the store)
    prefix = "(EngineCore pid=269) ERROR 04-20 16:11:21 [core.py:1108] "
    text = "".join(
        prefix + line + "\n"
        for line in (
            "EngineCore failed to start.",
            "Traceback (most recent call last):",
            (
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/abstract.py", '
                "line 136, in determine_available_memory"
            ),
            "RuntimeError: Error in function 'aligned_alloc' at /workspace/include/flashinfer/"
            "allocator.h:49: " + VLLM_25342.split(": ", 1)[1].strip(),
        )
    )
    trace = text_trace(tmp_path, "vllm.log", text)
    assert trace.manifest.sources[0].parser == "vllm-log"
    rows = trace.events.filter(pl.col("kind") == "workspace_overflow")
    assert rows.select("pid", "requested_bytes", "free_bytes").rows() == [
        (269, 283_115_520, 268_435_456)
    ]
    # the frame above it (determine_available_memory) places it in the start-up's profiling run
    assert rows["phase"].to_list() == ["profile_run"]
    assert trace.events.filter(pl.col("kind") == "oom").height == 0


def test_tensor_parallel_ranks_repeating_it_count_once() -> None:
    # pie-project/pie#414's form ("only 0 bytes available"), printed by two ranks in one second
    line = (
        "Buffer overflow when allocating memory for batch_prefill_tmp_s with size 2359296 and "
        "alignment 16, but only 0 bytes available in AlignedAllocator. Increase the workspace "
        "buffer size."
    )
    ts = datetime(2026, 6, 13, tzinfo=UTC)
    events, _ = extract_ooms(pl.DataFrame({"ts": [ts, ts], "text": [line, line]}))
    assert events.select("kind", "requested_bytes", "free_bytes").rows() == [
        ("workspace_overflow", 2_359_296, 0)
    ]


def test_the_words_elsewhere_are_no_overflow(tmp_path: Path) -> None:
    # another allocator's words, the class named in prose, and a real OOM beside them
    text = (
        "2024-11-20 16:40:55 ERROR Failed to allocate memory for tensor with size 1024 and "
        "alignment 64 in our pool\n"
        "2024-11-20 16:40:56 INFO the AlignedAllocator docs say: increase the workspace buffer "
        "size\n"
        "2024-11-20 16:40:57 WARNING CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; "
        "15.78 GiB total capacity; 14.5 GiB already allocated; 3.00 MiB free; 14.9 GiB reserved "
        "in total by PyTorch)\n"
    )
    trace = text_trace(tmp_path, "app.log", text)
    assert trace.events["kind"].to_list() == ["oom"]
