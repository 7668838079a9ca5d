"""PyTorch's message without its head ("CUDA out of memory. "): a paste that begins mid-message,
or a record a terminal wrapped there, is read wherever the whole message is (the PyTorch-log
reader, the vLLM reader's literals), sizes and all; the same words without PyTorch's sentence
around them are no failure."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest.torch.oom_text import extract_ooms
from oomtrace.units import GiB
from tests.factories import text_trace

# https://github.com/rhymes-ai/Aria/issues/24: vLLM's worker on four 22 GiB GPUs; the message from
# "Tried to allocate" on, as a paste that begins mid-message keeps it
_TAIL = (
    "Tried to allocate 1.88 GiB. GPU 3 has a total capacity of 21.96 GiB of which 1.29 GiB is "
    "free. Including non-PyTorch memory, this process has 0 bytes memory in use. Of the "
    "allocated memory 19.02 GiB is allocated by PyTorch, and 1.32 GiB is reserved by PyTorch "
    "but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
)
_WORKER = "(VllmWorkerProcess pid=2421) ERROR 10-14 12:32:47 multiproc_worker_utils.py:233] "


def _sizes(ooms: pl.DataFrame) -> list[tuple[object, ...]]:
    return ooms.select("device", "requested_bytes", "total_bytes", "free_bytes").rows()


def test_a_paste_that_begins_mid_message_is_an_oom(tmp_path: Path) -> None:
    trace = text_trace(tmp_path, "paste.txt", _TAIL)
    assert trace.manifest.sources[0].parser == "pytorch-log"
    ooms = trace.events.filter(pl.col("kind") == "oom")
    assert _sizes(ooms) == [(3, round(1.88 * GiB), round(21.96 * GiB), round(1.29 * GiB))]
    assert ooms["allocated_bytes"].to_list() == [round(19.02 * GiB)]


def test_a_vllm_record_wrapped_after_the_head_keeps_its_sizes(tmp_path: Path) -> None:
    # the worker's record as a narrow terminal wrapped it after "CUDA out of memory."
    text = (
        f"{_WORKER}torch.OutOfMemoryError: CUDA out of memory.\n{_TAIL}{_WORKER}\n"
        f"{_WORKER}The above exception was the direct cause of the following exception:\n"
    )
    trace = text_trace(tmp_path, "vllm.log", text)
    assert trace.manifest.sources[0].parser == "vllm-log"
    ooms = trace.events.filter(pl.col("kind") == "oom")
    # one failure, told by its sizes (the head's size-less line is the same failure)
    assert _sizes(ooms) == [(3, round(1.88 * GiB), round(21.96 * GiB), round(1.29 * GiB))]
    assert ooms["ts"].dt.replace_time_zone(None).dt.strftime("%m-%d %H:%M:%S").to_list() == [
        "10-14 12:32:47"
    ]


def test_the_same_words_outside_pytorchs_sentence_are_no_oom() -> None:
    lines = pl.DataFrame(
        {
            "ts": [datetime(2025, 1, 1, tzinfo=UTC)] * 3,
            "text": [
                "Volume /dev/sda has a total capacity of 500.00 GiB of which 20.00 GiB is free.",
                "Tried to allocate 2.00 GiB for the page cache.",
                "GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
            ],
        }
    )
    events, _ = extract_ooms(lines)
    assert events.height == 0
