"""The verdict's story, in the order an on-call engineer asks: what happened and when, which
requests, why (the numbers), what to change. An incident whose cause the inputs leave open says
what the failure states and what would decide it, and lists each class ruled out in the report's
words for the classes (not the analysis' identifiers)."""

from __future__ import annotations

from pathlib import Path

from oomtrace.analysis import analyze
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.report import ReportInputs, build_report
from oomtrace.report.verdict import build_verdict
from tests.factories import text_trace
from tests.unit.analysis.test_field_incidents5 import DEEPGEMM_29360, TGI_2572

SAMPLE = Path(__file__).resolve().parents[3] / "sample_logs" / "vllm-kv-exhaustion"

# https://github.com/xorbitsai/inference/issues/1036: llama-cpp-python (yi-34b Q4_K_M) on a
# 22 GB RTX 2080 Ti fails at once at n_ctx 4096 (2048 works); the thread's whole error.
VMM_1036 = (
    "CUDA error: out of memory\n"
    "  current device: 0, in function ggml_cuda_pool_malloc_vmm at /tmp/pip-install-6hyi80yc/"
    "llama-cpp-python_b0764d5e446b4564a68e6eb9d349b9c3/vendor/llama.cpp/ggml-cuda.cu:7812\n"
    "  cuMemCreate(&handle, reserve_size, &prop, 0)\n"
    "GGML_ASSERT: /tmp/pip-install-6hyi80yc/llama-cpp-python_b0764d5e446b4564a68e6eb9d349b9c3/"
    'vendor/llama.cpp/ggml-cuda.cu:241: !"CUDA error"\n'
)


def test_an_undecided_cause_says_what_would_decide_it(tmp_path: Path) -> None:
    findings = analyze(text_trace(tmp_path, "llama-cpp.log", VMM_1036))
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "unknown"
    verdict = build_verdict(primary.to_json())
    # THEN the line a person reads first has no rule identifiers, and says what to fetch
    cause = verdict.lines[1]
    assert cause.startswith(
        "Cause: The failure states no allocation size; the lines given do not decide it: the "
        "engine's log from its start to the failure (the phase), or nvidia-smi"
    )
    assert "no class fits" not in cause
    assert "foreign_memory" not in cause
    # AND the paragraph keeps every class's reason, named as the report names the classes
    assert "Ruled out: Another process on the GPU (no other process" in verdict.paragraph
    assert "Startup misfit (phase unknown" in verdict.paragraph
    assert "KV cache pool exhausted (no KV pool figure" in verdict.paragraph


def test_the_why_comes_between_the_culprits_and_the_fix() -> None:
    # GIVEN the shipped KV exhaustion (a vLLM 0.13 log and its nvidia-smi CSV)
    findings = analyze(load_any([SAMPLE], IngestOptions()))
    primary = findings.primary
    assert primary is not None
    remedies = [r.to_json() for r in findings.remedies if r.incident == primary.id]
    lines = build_verdict(primary.to_json(), remedies).lines
    # THEN four lines: what and when, who, why in the analysis' numbers, the fix
    assert len(lines) == 4
    assert lines[0].startswith("KV cache pool exhausted at ")
    assert lines[1].startswith("Culprits: cmpl-")
    assert lines[2].startswith("Why: The KV pool was 98.4% full at 14:05:10")
    assert lines[3].startswith("Fix (")
    # AND the paragraph under it does not say the why a second time
    assert "98.4% full" not in build_verdict(primary.to_json(), remedies).paragraph


def test_a_failure_with_no_request_does_not_point_at_culprits(tmp_path: Path) -> None:
    # GIVEN vllm#29360's warm-up OOM, which names no request, and TGI#2572's capture failure
    trace = text_trace(tmp_path, "vllm-29360.txt", DEEPGEMM_29360)
    report = build_report(ReportInputs(analyze(trace).to_json(), trace))
    text = report.section("cause").paragraphs[0]
    # THEN the cause section says no request was named, not that culprits were admitted
    assert "the culprits are the requests admitted" not in text
    assert "The inputs name no request at the failure" in text
    # AND the paragraph does not say "0.0% of the peak" is explained by requests there are not
    paragraph = report.verdict.paragraph
    assert "Named requests explain" not in paragraph
    assert "The inputs name no request at the peak: no memory is attributed to one." in paragraph
    # AND an OOM that states no sizes is a failure, not a refusal
    tgi = text_trace(tmp_path, "tgi-2572.log", TGI_2572)
    section = build_report(ReportInputs(analyze(tgi).to_json(), tgi)).section("cause")
    assert section.empty == "The failure states no sizes to draw."
