"""FlashInfer's attention workspace overflowing, end to end: `oomtrace ingest`, `analyze` and
`report` tell an incident of its own (``workspace_overflow``), its fix the engine's own knob for
the workspace or its prefill chunk, never a memory share or more devices."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from oomtrace.cli import cli
from tests.unit.ingest.torch.test_workspace_overflow import SGLANG_2102, VLLM_40023

# The memory summary of a recent SGLang (its chunk: the format of
# oomtrace/ingest/sglang/line_patterns.py), a prefill batch line, then the scheduler's traceback
# ending in the message of https://github.com/vllm-project/vllm/issues/40023 (FlashInfer after
# flashinfer#1357) on one line: a constructed log in the real formats, the figures the threads'.
SGLANG_CHUNKED = (
    "[2025-12-29 18:33:04 TP0] max_total_num_tokens=473854, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=3730, context_len=40960, "
    "available_gpu_mem=2.39 GB\n"
    "[2025-12-29 18:40:11 TP0] Prefill batch. #new-seq: 6, #new-token: 8192, #cached-token: 0, "
    "token usage: 0.10, #running-req: 20, #queue-req: 4\n"
    "[2025-12-29 18:40:11 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/flashinfer/prefill.py", line 1790, in plan\n'
    "    self._plan_info = self._cached_module.plan(\n"
    + " ".join(line.strip() for line in VLLM_40023.splitlines()[:1])
    + " "
    + " ".join(line.strip() for line in VLLM_40023.splitlines()[1:])
    + "\n"
)


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _trace(tmp_path: Path, text: str) -> Path:
    log = tmp_path / "server.log"
    log.write_text(text, encoding="utf-8")
    out = tmp_path / "trace"
    _invoke("ingest", str(log), "-o", str(out))
    return out


def test_sglangs_overflow_is_an_incident_of_its_own(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/2102
    trace = _trace(tmp_path, SGLANG_2102)
    out = _invoke("analyze", str(trace))
    assert (
        "PRIMARY  workspace_overflow at 2024-11-20 16:40:55.000 UTC on server (anchored on "
        "FlashInfer's attention workspace overflowing)"
    ) in out
    assert (
        "FlashInfer's attention workspace (fixed size) was too small for a prefill batch: "
        "batch_prefill_tmp_v asked 415.62 MiB; a fixed buffer ran out, not the device's memory"
    ) in out
    # SGLang's own knob: its 384 MiB default plus the whole ask, rounded up to 128 MiB
    assert "raise FlashInfer's workspace: SGLANG_FLASHINFER_WORKSPACE_SIZE=939524096" in out
    assert "--attention-backend triton" in out
    for wrong in ("--mem-fraction-static", "gpu-memory-utilization", "tensor-parallel", "GPUs"):
        assert wrong not in out
    document = json.loads(_invoke("analyze", str(trace), "--json"))
    (incident,) = document["incidents"]
    assert incident["class"] == "workspace_overflow"
    check = next(c for c in incident["checks"] if c["class"] == "workspace_overflow")
    assert check["figures"]["requested_bytes"] == 435_814_400
    assert check["figures"]["buffer"] == "batch_prefill_tmp_v"


def test_the_chunk_the_log_states_is_lowered_to_what_the_workspace_had(tmp_path: Path) -> None:
    trace = _trace(tmp_path, SGLANG_CHUNKED)
    out = _invoke("analyze", str(trace))
    assert "with only 394.00 MiB of the workspace left" in out
    # 8192 tokens x 413138944 / 536346624, in multiples of 16
    assert "set --chunked-prefill-size 6304" in out
    # 384 MiB + 511.5 MiB asked, rounded up to 896 MiB
    assert "SGLANG_FLASHINFER_WORKSPACE_SIZE=939524096" in out


def test_the_report_tells_it_in_every_format(tmp_path: Path) -> None:
    trace = _trace(tmp_path, SGLANG_2102)
    findings = tmp_path / "findings.json"
    findings.write_text(_invoke("analyze", str(trace), "--json"), encoding="utf-8")
    texts = {}
    for fmt in ("markdown", "json", "html"):
        path = tmp_path / f"report.{fmt}"
        _invoke("report", str(trace), "--findings", str(findings), "--format", fmt, "-o", str(path))
        texts[fmt] = path.read_text(encoding="utf-8")
    markdown = texts["markdown"]
    assert "**Attention workspace too small at 2024-11-20T16:40:55.000Z**" in markdown
    assert "## What ran out: FlashInfer's fixed attention workspace" in markdown
    assert "a larger memory share or more GPUs would not" in markdown
    assert "- **batch_prefill_tmp_v asked**: 415.62 MiB" in markdown
    document = json.loads(texts["json"])
    assert document["verdict"]["class"] == "workspace_overflow"
    assert "Attention workspace too small" in texts["html"]
    assert "SGLANG_FLASHINFER_WORKSPACE_SIZE=939524096" in texts["html"]


def test_a_paste_without_times_is_read_in_its_order_with_both_engines_knobs(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm/issues/40023, the message alone: no engine named
    trace = _trace(tmp_path, VLLM_40023)
    out = _invoke("analyze", str(trace))
    assert "PRIMARY  workspace_overflow at no time (the input prints none)" in out
    assert "batch_prefill_tmp_v asked 511.50 MiB with only 394.00 MiB of the workspace left" in out
    assert (
        "vllm: raise FlashInfer's workspace: VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=1073741824"
        in out
    )
    assert "sglang: raise FlashInfer's workspace: SGLANG_FLASHINFER_WORKSPACE_SIZE=939524096" in out


def test_the_request_in_the_batch_is_named_and_its_tokens_size_the_chunk(tmp_path: Path) -> None:
    # the sample vLLM log of sample_logs/vllm-foreign-process up to its failure, which here is
    # the one-line overflow of https://github.com/vllm-project/vllm/issues/40023 instead
    sample = Path(__file__).parents[3] / "sample_logs" / "vllm-foreign-process" / "vllm.log"
    lines = sample.read_text(encoding="utf-8").splitlines(keepends=True)
    failed = next(i for i, line in enumerate(lines) if "torch.OutOfMemoryError" in line)
    prefix = lines[failed].split("torch.OutOfMemoryError")[0]
    message = " ".join(line.strip() for line in VLLM_40023.splitlines()[:4])
    trace = _trace(tmp_path, "".join(lines[:failed]) + prefix + message + "\n")
    out = _invoke("analyze", str(trace))
    assert "too small for a prefill batch of 7,912 tokens" in out
    assert "1  cmpl-daad1f86ab955efae5aa5669eb5d6fca-0    7,912" in out
    # 7,912 tokens x 413138944 / 536346624, in multiples of 16
    assert "lower the prefill chunk: set --max-num-batched-tokens 6080" in out
    assert "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=1073741824" in out
    assert "sglang" not in out.lower()
