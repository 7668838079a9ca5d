"""SGLang's start-up refusal for want of KV room and llama.cpp server's KV cache filling up, each
rewritten from the public thread named beside it in its real format (prefixes, figures and the
order of the lines kept): what they are read as, and the setting each gets.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Findings
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.trace import Trace

# https://github.com/sgl-project/sglang/issues/4330: EAGLE speculative decoding on an L40S; at
# --mem-fraction-static 0.84 the server stops in model_runner.py's init_memory_pool (the draft
# model is not budgeted). The traceback's last line, pasted alone.
REFUSAL_4330 = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
# https://github.com/sgl-project/sglang/issues/7691: DeepSeek-R1 with DP 8 on ROCm; after the
# weights the profiled KV room is negative, each rank saying so.
_RANKS = (0, 7, 6, 4, 5, 3, 1, 2)
PROFILED_7691 = (
    "[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, "
    "dtype=torch.bfloat16, avail mem=21.73 GB, mem usage=166.59 GB.\n"
) + "".join(
    f"[2025-07-02 07:41:59 DP{r} TP{r}] max_total_tokens=131072 is larger than the profiled "
    "value -561981. Use the profiled value instead.\n"
    for r in _RANKS
)
# https://github.com/ggml-org/llama.cpp/issues/4185: llama.cpp's server under docker compose
# (2023 build): no free cell for the slot's batch, halved down to 1, then the decode fails.
_LCPP = "llama.cpp-gpu  | "
KVSLOTS_4185 = "".join(
    f"{_LCPP}{line}\n"
    for line in (
        "system prompt updated",
        "slot 0 is processing [task id: 812]",
        "slot 0 : kv cache rm - [24, end)",
        *(
            "update_slots : failed to find free space in the KV cache, retrying with smaller "
            f"n_batch = {n}"
            for n in (256, 128, 64, 32, 16, 8, 4, 2, 1)
        ),
        "update_slots : failed to decode the batch, n_batch = 1, ret = 1",
    )
)
# The same server's later wording (tools/server/server.cpp): the retries recover.
KV_RETRY_RECOVERED = (
    "srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch "
    "size, off = 0, n_batch = 256, ret = 1\n"
    "srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch "
    "size, off = 0, n_batch = 128, ret = 1\n"
)


def _trace(tmp_path: Path, name: str, text: str) -> Trace:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_any([path], IngestOptions())


def _findings(tmp_path: Path, name: str, text: str) -> Findings:
    return analyze(_trace(tmp_path, name, text))


def _events(tmp_path: Path, name: str, text: str) -> pl.DataFrame:
    return _trace(tmp_path, name, text).events.filter(pl.col("kind") != "engine_start")


def test_sglangs_not_enough_memory_is_its_refusal_with_its_share_to_raise(
    tmp_path: Path,
) -> None:
    events = _events(tmp_path, "sgl-4330.txt", REFUSAL_4330)
    assert events["kind"].to_list() == ["startup_no_kv_memory"]
    findings = _findings(tmp_path, "sgl-4330.txt", REFUSAL_4330)
    assert findings.primary is not None
    assert findings.primary.cls == "startup_misfit"
    (share,) = findings.remedies
    assert share.action == "raise --mem-fraction-static"
    assert share.setting == "--mem-fraction-static"
    assert "SGLang's own advice" in share.detail
    assert "vLLM before 0.7" not in share.detail


def test_a_negative_profiled_value_is_no_kv_room_once_for_all_ranks(tmp_path: Path) -> None:
    events = _events(tmp_path, "sgl-7691.txt", PROFILED_7691)
    (row,) = events.to_dicts()
    assert row["kind"] == "startup_no_kv_memory"
    assert "-561981 tokens" in row["detail"]
    assert "max_total_tokens=131072" in row["detail"]
    findings = _findings(tmp_path, "sgl-7691.txt", PROFILED_7691)
    assert findings.primary is not None
    assert findings.primary.cls == "startup_misfit"
    assert [r.setting for r in findings.remedies] == ["--mem-fraction-static"]


def test_a_positive_profiled_value_is_only_a_cap_not_a_refusal(tmp_path: Path) -> None:
    text = (
        "[2026-02-11 06:45:01] max_total_tokens=131072 is larger than the profiled value 50756. "
        "Use the profiled value instead.\n"
    )
    trace = _trace(tmp_path, "sgl-cap.txt", PROFILED_7691.splitlines(keepends=True)[0] + text)
    assert "startup_no_kv_memory" not in trace.events["kind"].to_list()


def test_llama_cpp_kv_cache_full_for_its_slots_is_kv_exhaustion(tmp_path: Path) -> None:
    events = _events(tmp_path, "lcpp-4185.txt", KVSLOTS_4185)
    (row,) = events.to_dicts()
    assert row["kind"] == "oom"
    assert "after 9 retries with smaller batches, down to n_batch = 1" in row["detail"]
    findings = _findings(tmp_path, "lcpp-4185.txt", KVSLOTS_4185)
    assert findings.primary is not None
    assert findings.primary.cls == "kv_exhaustion"
    (context,) = findings.remedies
    assert context.setting == "-c"
    assert context.action == "raise -c (--ctx-size) or lower -np (--parallel)"


def test_llama_cpp_retries_that_found_room_are_a_warning_not_a_failure(tmp_path: Path) -> None:
    events = _events(tmp_path, "lcpp-retry.txt", KV_RETRY_RECOVERED)
    (row,) = events.to_dicts()
    assert row["kind"] == "warning"
    assert "2 retries with smaller batches, down to n_batch = 128" in row["detail"]
