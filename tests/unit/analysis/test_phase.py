"""Failures whose cause a person reads off the lines around them: the phase (start-up profiling,
loading the weights, a compute buffer while serving) and an engine's own count of its KV pool.
Each excerpt is rewritten from the public thread named beside it (ids, sizes and line structure
kept; unrelated lines left out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Incident
from oomtrace.report import ReportOptions, build_report
from oomtrace.report.inputs import from_findings_object
from oomtrace.report.verdict import build_verdict
from oomtrace.units import parse_bytes
from tests.factories import text_trace
from tests.unit.ingest.torch.test_oom_phase import (
    LLAMA_KV_UPDATE,
    LLAMA_WEIGHTS,
    VLLM_CAPTURE,
    VLLM_DUMMY_SAMPLER,
)

# ggml-org/llama.cpp#26297 (a comment): llama-server's newer lines (time since start, level),
# the compute buffers of a 50k context refused while the context is made.
LLAMA_GRAPH_RESERVE = (
    "1.06.520.077 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 51748.72 MiB on device "
    "1: cudaMalloc failed: out of memory\n"
    "1.06.520.084 E ggml_gallocr_reserve_n_impl: failed to allocate CUDA1 buffer of size "
    "54262464512\n"
    "1.06.520.086 E graph_reserve: failed to allocate compute buffers\n"
    "1.06.520.107 W sched_reserve: compute buffer allocation failed, retrying without pipeline "
    "parallelism\n"
    "1.07.304.130 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 50176, kv_unified "
    "= 'false'\n"
)
# sgl-project/sglang#4602: the KV-pool OOM as pasted (SGLang 0.4, --page-size 64), its figures
# on the lines after it.
SGLANG_PAGED = (
    "`RuntimeError: Decode out of memory. Try to lower your batch size.\n"
    "Try to allocate 148 tokens.\n"
    "Avaliable tokens: 2048\n"
    "self.token_to_kv_pool_allocator.available_size()=2048\n"
    "self.tree_cache.evictable_size()=0`\n"
)
# The same failure in a log with SGLang's prefix and its server_args (page_size=64), the batch
# line before it as 0.4 prints it.
SGLANG_PAGED_LOG = (
    "[2025-03-20 08:00:00 TP0] server_args=ServerArgs(model_path='/models/DeepSeek-R1', "
    "tp_size=8, mem_fraction_static=0.9, max_running_requests=None, page_size=64, dp_size=1)\n"
    "[2025-03-20 08:05:12 TP0] Decode batch. #running-req: 148, #token: 30976, token usage: "
    "0.94, gen throughput (token/s): 1210.55, #queue-req: 0\n"
    "[2025-03-20 08:05:13 TP0] Decode out of memory. Try to lower your batch size.\n"
    + SGLANG_PAGED.split("\n", 1)[1].replace("`", "")
)


def _primary(tmp_path: Path, name: str, text: str) -> Incident:
    incident = analyze(text_trace(tmp_path, name, text)).primary
    assert incident is not None
    return incident


@pytest.mark.parametrize(
    ("text", "device", "reason"),
    [
        # the weights of one device (llama.cpp 20431)
        (LLAMA_WEIGHTS, 0, "the model's weights did not fit device 0: loading them asked for 141."),
        # the compute buffers of a 50k context (llama.cpp 26297)
        (LLAMA_GRAPH_RESERVE, 1, "the reservation of the compute buffers at start-up needed "),
        # vLLM's profiling run, its dummy sampler pass (vllm 27508)
        (
            VLLM_DUMMY_SAMPLER,
            0,
            (
                "the start-up profiling run's dummy sampler pass (logits of a full batch) needed "
                "786.00 MiB, 140.75 MiB free of 79.11 GiB"
            ),
        ),
        # the CUDA graph capture in a timed vLLM log (vllm 30515's frames)
        (VLLM_CAPTURE, 0, "the CUDA graph capture at start-up needed 786.00 MiB"),
    ],
    ids=["weights", "graph-reserve", "dummy-sampler", "graph-capture"],
)
def test_a_start_up_phase_is_a_startup_misfit_named_with_its_figures(
    tmp_path: Path, text: str, device: int, reason: str
) -> None:
    incident = _primary(tmp_path, "excerpt.log", text)
    assert (incident.cls, incident.device) == ("startup_misfit", device)
    assert incident.reason.startswith(reason)


def test_a_compute_buffer_rebuilt_while_serving_is_a_transient_peak(tmp_path: Path) -> None:
    incident = _primary(tmp_path, "llama.txt", LLAMA_KV_UPDATE)
    # not start-up (the lines say while serving), and not the KV pool: a step's buffer
    assert incident.cls == "transient_peak"
    assert incident.reason.startswith(
        "a re-allocation of the compute buffers while serving (a KV cache update, or a batch "
        "larger than the one reserved at start, such as an image's) asked for 9.63 GiB and failed"
    )
    startup = next(c for c in incident.checks if c.cls == "startup_misfit")
    assert not startup.matched
    assert startup.reason == (
        "the lines around the OOM place it in a re-allocation of the compute buffers while "
        "serving (a KV cache update, or a batch larger than the one reserved at start, such as "
        "an image's)"
    )


_POOL_ROOM = (
    "the engine counted 2,048 tokens available in its KV pool (free and evictable) for the 148 it "
    "asked, and still failed: by its count the pool had room; "
)


@pytest.mark.parametrize(
    ("name", "text", "pages"),
    [
        # pasted alone: the page size is not known
        ("sglang.md", SGLANG_PAGED, "with a page size above 1 (--page-size) a step takes whole"),
        # in a log with its server_args: the pages are counted
        (
            "sglang.log",
            SGLANG_PAGED_LOG,
            (
                "with a page size of 64 a decode step takes a whole page for each request that "
                "fills its last one, up to 148 pages (9,472 tokens), and 2,048 tokens are 32 pages"
            ),
        ),
    ],
    ids=["pasted", "log"],
)
def test_a_kv_pool_with_the_tokens_asked_is_not_exhausted(
    tmp_path: Path, name: str, text: str, pages: str
) -> None:
    incident = _primary(tmp_path, name, text)
    assert incident.cls == "unknown"
    assert incident.reason.startswith(_POOL_ROOM + pages)
    kv = next(c for c in incident.checks if c.cls == "kv_exhaustion")
    assert not kv.matched


def test_an_untimed_transient_peak_does_not_claim_the_kv_cache_had_room(tmp_path: Path) -> None:
    # GIVEN a PyTorch OOM pasted alone (vllm#27508's message, without its traceback)
    incident = _primary(tmp_path, "oom.txt", VLLM_DUMMY_SAMPLER.splitlines()[-2] + "\n")
    assert incident.cls == "transient_peak"
    # THEN the report's explanation does not say what the KV cache held: nothing showed it
    paragraph = build_verdict(incident.to_json()).paragraph
    assert "still had room" not in paragraph
    assert "Nothing in the inputs shows how full the KV cache was then." in paragraph


def test_the_report_draws_a_phased_misfit_as_the_allocation_that_failed(tmp_path: Path) -> None:
    # The dummy sampler's 786 MiB is the allocation that failed, not a KV cache "as configured",
    # and the 140.75 MiB free is not the KV cache the engine had (vllm 27508).
    trace = text_trace(tmp_path, "excerpt.log", VLLM_DUMMY_SAMPLER)
    report = build_report(from_findings_object(analyze(trace), trace), ReportOptions())
    cause = next(s for s in report.sections if s.key == "cause")
    parts = dict(cause.charts[0].data.select("part", "value").iter_rows())
    assert parts == {
        "held when it failed": pytest.approx(
            parse_bytes("79.11 GiB") - parse_bytes("140.75 MiB"), rel=1e-3
        ),
        "the allocation that failed": parse_bytes("786.00 MiB"),
    }
    assert "KV cache" not in cause.paragraphs[0]
    assert cause.paragraphs[0].startswith("What the start-up profiling run's dummy sampler pass")
