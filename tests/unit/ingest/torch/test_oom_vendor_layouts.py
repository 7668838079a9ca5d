"""Intel XPU, Apple MPS and JAX/XLA out-of-memory messages, and old ones that lost their head, as
users pasted them, become oom events."""

from __future__ import annotations

import polars as pl

from oomtrace.ingest.torch.oom_text import OOM_SHAPES, extract_ooms
from oomtrace.units import GiB, KiB, MiB
from tests.factories import at

# intel/intel-extension-for-pytorch#846: an Arc A770 that cannot report its free memory; the
# sentences layout then has no "of which F is free" clause. Two tries, one per prompt line.
XPU_NO_FREE = [
    ">>> a = torch.zeros([1024,1024,1024,2], dtype=torch.float32, device='xpu')",
    (
        "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total "
        "capacity of 15.11 GiB. Of the allocated memory 0 bytes is allocated by PyTorch, and "
        "0 bytes is reserved by PyTorch but unallocated. Please use `empty_cache` to release all "
        "unoccupied cached memory."
    ),
    ">>> a = torch.zeros([1024,1024,1024,1], dtype=torch.float32, device='xpu')",
    (
        "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total "
        "capacity of 15.11 GiB. Of the allocated memory 0 bytes is allocated by PyTorch, and "
        "0 bytes is reserved by PyTorch but unallocated. Please use `empty_cache` to release all "
        "uno"
    ),
]
# intel/intel-extension-for-pytorch#629: IPEX's old layout has no "F free;" clause; the same
# size failed twice, the second time with 176 MiB held. The 4 GB single-block refusal before
# them is a platform limit, not an out-of-memory.
IPEX_OLD = [
    (
        "RuntimeError: Current platform can NOT allocate memory block with size larger than 4GB! "
        "Tried to allocate 6.85 GiB (GPU  0; 15.56 GiB total capacity; 0 bytes already allocated; "
        "0 bytes reserved in total by PyTorch)"
    ),
    (
        "RuntimeError: XPU out of memory. Tried to allocate 1.71 GiB (GPU 0; 15.56 GiB total "
        "capacity; 0 bytes already allocated; 0 bytes reserved in total by PyTorch)"
    ),
    (
        "RuntimeError: XPU out of memory. Tried to allocate 1.71 GiB (GPU 0; 15.56 GiB total "
        "capacity; 176.00 MiB already allocated; 176.00 MiB reserved in total by PyTorch)"
    ),
]
# intel/torch-xpu-ops#3011: the XPU sentences layout with a KiB figure.
XPU_KIB = (
    "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 4.66 GiB. GPU 0 has a total "
    "capacity of 5.65 GiB of which 5.65 GiB is free. Of the allocated memory 195.50 KiB is "
    "allocated by PyTorch, and 1.81 MiB is reserved by PyTorch but unallocated."
)
# Comfy-Org/ComfyUI#7440 (torch >= 2.3 units) and lllyasviel/Fooocus#1139 (older builds write
# GB/MB for sizes divided by 1024).
MPS_BINARY = (
    "MPS backend out of memory (MPS allocated: 9.57 GiB, other allocations: 17.35 GiB, max "
    "allowed: 27.20 GiB). Tried to allocate 292.50 MiB on private pool. Use "
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may "
    "cause system failure)."
)
MPS_OLD_UNITS = (
    "RuntimeError: MPS backend out of memory (MPS allocated: 8.89 GB, other allocations: 172.98 "
    "MB, max allowed: 9.07 GB). Tried to allocate 6.25 MB on private pool. Use "
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may "
    "cause system failure)."
)


def _events(*texts: str) -> pl.DataFrame:
    lines = pl.DataFrame(
        {"ts": [at(i) for i in range(len(texts))], "text": list(texts)},
        schema={"ts": pl.Datetime("ns", "UTC"), "text": pl.String},
    )
    return extract_ooms(lines)[0]


def test_xpu_sentences_without_a_free_clause_keep_the_capacity() -> None:
    events = _events(*XPU_NO_FREE)
    assert events["requested_bytes"].to_list() == [8 * GiB, 4 * GiB]
    assert events["total_bytes"].to_list() == [round(15.11 * GiB)] * 2
    assert events["allocated_bytes"].to_list() == [0, 0]
    # the device did not say what was free: unknown, never 0
    assert events["free_bytes"].to_list() == [None, None]
    assert events["device"].to_list() == [0, 0]


def test_ipex_old_layout_without_free_and_a_second_try_that_held_more() -> None:
    events = _events(*IPEX_OLD)
    assert events["requested_bytes"].to_list() == [round(1.71 * GiB)] * 2
    assert events["allocated_bytes"].to_list() == [0, 176 * MiB]
    assert events["total_bytes"].to_list() == [round(15.56 * GiB)] * 2
    assert events["free_bytes"].to_list() == [None, None]


def test_xpu_kib_figures() -> None:
    row = _events(XPU_KIB).row(0, named=True)
    assert row["allocated_bytes"] == round(195.5 * KiB)
    assert row["reserved_unallocated_bytes"] == round(1.81 * MiB)
    assert row["free_bytes"] == round(5.65 * GiB)


def test_mps_refusal_reads_the_request_and_what_mps_held_not_a_capacity() -> None:
    row = _events(MPS_BINARY).row(0, named=True)
    assert row["requested_bytes"] == round(292.5 * MiB)
    assert row["allocated_bytes"] == round(9.57 * GiB)
    # the watermark is a limit, not the device: it is told, not taken as the total
    assert row["total_bytes"] is None
    assert row["free_bytes"] is None
    assert row["device"] is None
    assert "27.20 GiB allowed by the watermark" in str(row["detail"])


def test_mps_old_units_are_binary() -> None:
    row = _events(MPS_OLD_UNITS).row(0, named=True)
    assert row["requested_bytes"] == round(6.25 * MiB)
    assert row["allocated_bytes"] == round(8.89 * GiB)


def test_the_mps_head_counts_as_a_recognised_oom_line() -> None:
    assert pl.Series([MPS_BINARY]).str.contains(OOM_SHAPES).item()


def test_an_old_message_that_lost_its_head_is_read() -> None:
    # ShannonAI/Self_Explaining_Structures_Improve_NLP_Models#6: the whole report is the
    # parenthesis, "CUDA out of memory." cut off
    text = (
        "Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already "
        "allocated; 2.88 MiB free; 1.25 GiB reserved in total by PyTorch)"
    )
    assert pl.Series([text]).str.contains(OOM_SHAPES).all()
    (row,) = (
        _events(text)
        .select("device", "requested_bytes", "total_bytes", "allocated_bytes", "free_bytes")
        .rows()
    )
    assert row == (0, 20 * MiB, round(1.96 * GiB), round(1.24 * GiB), round(2.88 * MiB))


def test_the_headless_form_counts_only_at_the_start_of_a_line() -> None:
    # IPEX's 4 GB refusal prints the same parenthesis after its own sentence (see IPEX_OLD)
    text = (
        "RuntimeError: Current platform can NOT allocate memory block with size larger than "
        "4GB! Tried to allocate 6.85 GiB (GPU 0; 15.56 GiB total capacity; 0 bytes already "
        "allocated; 0 bytes reserved in total by PyTorch)"
    )
    assert _events(text).height == 0


def test_jax_xla_resource_exhausted_gives_the_request_in_bytes() -> None:
    # patrickbryant1/AFProfile#8 (jaxlib's XlaRuntimeError, then XLA's buffer-assignment stats);
    # google-deepmind/alphafold#197 (older jaxlib: "Resource exhausted")
    lines = [
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
            "trying to allocate 4770354232 bytes."
        ),
        "BufferAssignment OOM Debugging.",
        "                 total allocation:   14.44GiB",
        "RuntimeError: Resource exhausted: Out of memory while trying to allocate 12582912 bytes.",
    ]
    events = _events(*lines)
    assert events.select("device", "requested_bytes").rows() == [
        (None, 4770354232),
        (None, 12582912),
    ]
    assert events["detail"].str.contains("JAX/XLA").all()
