"""Incidents from public threads (a fifth set) whose cause a person reads at once and the rules
misread, each excerpt as the thread shows it (ids, figures, prefixes and the order of the lines
kept; unrelated lines left out): a step's allocation failing on a device the engine had already
filled (the last straw, not the cause), with the headroom to leave when the log does not state
the engine's share, and one allocation larger than the whole device.
"""

from __future__ import annotations

from pathlib import Path

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Findings
from tests.factories import text_trace

# https://github.com/vllm-project/vllm/issues/29360: Qwen3-Coder-480B-FP8 on 8 x H20 96 GB; the
# DeepGEMM warm-up runs after the KV cache took the rest of the device (the fix,
# vllm-project/vllm#57258, moves it before the profiling). Process 53397 is the rank itself.
DEEPGEMM_29360 = (
    "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815]     out = "
    "torch.empty((MAX_M, n), device=device, dtype=torch.bfloat16)\n"
    "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815] "
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 666.00 MiB. GPU 3 has a total "
    "capacity of 95.10 GiB of which 145.94 MiB is free. Process 53397 has 94.95 GiB memory in "
    "use. Of the allocated memory 92.33 GiB is allocated by PyTorch, and 32.77 MiB is reserved by "
    "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management (https://pytorch.org/docs/stable/notes/cuda.html#environment-"
    "variables)\n"
)
# https://github.com/huggingface/text-generation-inference/issues/2301: Llama 3.1 70B on
# 4 x A6000 48 GB under docker compose; TGI's warm-up takes the log-softmax of a whole prefill's
# logits. The compose prefix and the shard's own pid as the thread shows them.
TGI_2301 = (
    "tgi-llama3.1-70b-1  | 2024-08-20T11:52:04.171911Z  INFO text_generation_launcher: Using "
    "Attention = flashinfer\n"
    "tgi-llama3.1-70b-1  | Traceback (most recent call last):\n"
    "tgi-llama3.1-70b-1  |     prefill_logprobs_tensor = torch.log_softmax(out, -1)\n"
    "tgi-llama3.1-70b-1  | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.93 "
    "GiB. GPU 2 has a total capacity of 47.53 GiB of which 1.18 GiB is free. Process 790346 has "
    "46.33 GiB memory in use.\n"
)
# https://github.com/MoonshotAI/Kimi-VL/issues/54: vllm serve with --limit-mm-per-prompt
# image=64 on 8 x A100 80 GB; solved by installing flash_attn (the fallback attention builds the
# whole score matrix).
KIMI_54 = (
    "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 1029.51 GiB. "
    "GPU 0 has a total capacity of 79.35 GiB of which 19.23 GiB is free. Process 145882 has "
    "60.12 GiB memory in use. Of the allocated memory 58.52 GiB is allocated by PyTorch, and "
    "310.01 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
    "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html"
    "#environment-variables)', please check the stack trace above for the root cause\n"
)

# https://github.com/huggingface/text-generation-inference/issues/2572: Llama-3.1-405B FP8 on
# 8 x H100; TGI's warm-up captures CUDA graphs and the capture runs out of memory.
TGI_2572 = (
    '  File "/opt/conda/lib/python3.10/site-packages/torch/cuda/graphs.py", line 82, in '
    "capture_end\n"
    "    super().capture_end()\n"
    "RuntimeError: CUDA error: out of memory\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "2024-09-25T15:04:34.598137Z ERROR warmup{max_input_length=500 max_prefill_tokens=550 "
    "max_total_tokens=13107 max_batch_size=None}:warmup: text_generation_client: "
    "router/client/src/lib.rs:46: Server error: CANCELLED\n"
)


def _findings(tmp_path: Path, name: str, text: str) -> Findings:
    return analyze(text_trace(tmp_path, name, text))


def test_an_allocation_on_a_full_device_is_the_last_straw_not_the_cause(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "vllm-29360.txt", DEEPGEMM_29360)
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "transient_peak"
    # THEN what filled the device is said first, the 666 MiB after it as what came last
    assert primary.reason.startswith(
        "the device was full: 94.96 GiB of 95.10 GiB in use (92.33 GiB allocated by PyTorch), "
        "145.94 MiB free; a temporary allocation of 666.00 MiB did not fit in the headroom left"
    )
    assert "the last straw" in primary.reason
    # AND the fix is headroom, by how much though the log states no share: 520.06 MiB lacked
    # is 0.5 % of the device, and 1 % for the allocator, rounded up to the hundredth
    (fix,) = findings.remedies
    assert fix.action == "lower --gpu-memory-utilization by 0.02 or more"
    assert fix.value is None
    assert "lacked 520.06 MiB" in fix.detail


def test_the_headroom_fix_names_tgis_own_share_where_its_lines_name_tgi(
    tmp_path: Path,
) -> None:
    # GIVEN TGI's warm-up OOM read by the PyTorch-log reader, which names the engine from
    # TGI's own lines (its shard's and launcher's)
    findings = _findings(tmp_path, "tgi-2301.log", TGI_2301)
    primary = findings.primary
    assert primary is not None
    assert primary.reason.startswith("the device was full: 46.35 GiB of 47.53 GiB in use")
    # THEN the share is named in TGI's spelling alone: 2.75 GiB lacked of 47.53 GiB
    (fix,) = findings.remedies
    assert fix.action == "lower --cuda-memory-fraction by 0.07 or more"


def test_an_allocation_larger_than_the_device_asks_what_made_it(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "kimi-vl-54.txt", KIMI_54)
    primary = findings.primary
    assert primary is not None
    # THEN not "the device was full": 19 GiB were free, the ask was 13 devices
    assert primary.reason.startswith("a single allocation of 1.01 TiB asked for more than")
    assert "larger than the whole device" in primary.reason
    # AND no share of the device is offered: what asked for it must change
    (fix,) = findings.remedies
    assert fix.action == "find what asked for one allocation larger than the device"
    assert fix.setting is None
    assert "13.0 x the 79.35 GiB device" in fix.detail


def test_a_capture_fix_names_each_engines_flags_where_no_engine_is_named(tmp_path: Path) -> None:
    # GIVEN the traceback alone (the router's warm-up line, TGI's own, left out)
    traceback = TGI_2572.split("2024-09-25T", maxsplit=1)[0]
    findings = _findings(tmp_path, "tgi-2572.log", traceback)
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert primary.reason.startswith("the CUDA graph capture at start-up failed")
    # THEN a TGI reader finds its own flags beside vLLM's
    assert [r.action for r in findings.remedies] == [
        (
            "lower --gpu-memory-utilization (SGLang: --mem-fraction-static; TGI: "
            "--cuda-memory-fraction)"
        ),
        "or start with --enforce-eager (SGLang: --disable-cuda-graph; TGI: --cuda-graphs 0)",
    ]


def test_a_capture_fix_in_tgis_log_names_tgis_flags(tmp_path: Path) -> None:
    # GIVEN the router's warm-up span after the traceback: the log is TGI's
    findings = _findings(tmp_path, "tgi-2572.log", TGI_2572)
    assert findings.primary is not None
    assert findings.primary.cls == "startup_misfit"
    # THEN TGI's own flags alone
    assert [r.action for r in findings.remedies] == [
        "lower --cuda-memory-fraction",
        "or start with --cuda-graphs 0",
    ]


# https://github.com/vllm-project/vllm/issues/546 (vLLM 0.6.3): two long generations fill the
# pool, 98 wait; the first preemption (by SWAP) and the engine stops. Its stats lines, every five
# seconds, saw the pool at 86.1 % last.
SWAP_546 = (
    "INFO 10-28 11:16:34 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation "
    "throughput: 7220.5 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 98 reqs, GPU KV "
    "cache usage: 73.8%, CPU KV cache usage: 0.0%.\n"
    "INFO 10-28 11:16:39 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation "
    "throughput: 7154.5 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 98 reqs, GPU KV "
    "cache usage: 86.1%, CPU KV cache usage: 0.0%.\n"
    "WARNING 10-28 11:16:41 scheduler.py:1483] Sequence group chat-7e630abf1a8b4c8a88775b1e98a54cf2"
    " is preempted by PreemptionMode.SWAP mode because there is not enough KV cache space. This "
    "can affect the end-to-end performance. Increase gpu_memory_utilization or "
    "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1\n"
)


def test_a_preemption_after_the_last_stats_line_is_the_pool_running_full(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "vllm-546.log", SWAP_546)
    # THEN not "no incident": the engine said its pool ran out two seconds after its last
    # stats line saw it at 86.1 %
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "kv_exhaustion"
    assert primary.anchor == "preemption"
    # AND the reason names the request taken back and the last fill the stats saw
    assert primary.reason.startswith(
        "1 preemption (chat-7e630abf1a8b4c8a88775b1e98a54cf2): the engine ran out of KV cache"
    )
    assert "saw the pool 86.1% full at 11:16:39: it filled between two of them" in primary.reason
    # AND with no pool size or request length stated, the fix names the two ways out, no value
    (fix,) = findings.remedies
    assert fix.action.startswith("give the KV pool more room (raise --gpu-memory-utilization")
    assert fix.value is None


def test_a_warm_up_named_by_its_frame_gets_each_engines_warm_up_fix(tmp_path: Path) -> None:
    # GIVEN vllm#29360's failing rank with its innermost frame (DeepGEMM's _warmup, after the KV
    # cache took the engine's share): the share is what to lower, by what the warm-up lacked
    frame = (
        "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815]   File "
        '"/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/deep_gemm_warmup.py"'
        ", line 262, in _warmup\n"
    )
    findings = _findings(tmp_path, "vllm-29360.txt", frame + DEEPGEMM_29360)
    assert findings.primary is not None
    assert findings.primary.cls == "startup_misfit"
    (fix,) = findings.remedies
    assert fix.action == "lower --gpu-memory-utilization by 0.02 or more"
    assert fix.detail.startswith("the warm-up after the KV cache lacked 520.06 MiB")
    # AND TGI#2301's warm-up frame: TGI's warm-up prefill is what to shrink (the thread's fix)
    tgi = TGI_2301.replace(
        "tgi-llama3.1-70b-1  |     prefill",
        'tgi-llama3.1-70b-1  |   File "/opt/conda/lib/python3.10/site-packages/'
        'text_generation_server/models/flash_causal_lm.py", line 1251, in warmup\n'
        "tgi-llama3.1-70b-1  |     prefill",
    )
    findings = _findings(tmp_path, "tgi-2301.log", tgi)
    assert findings.primary is not None
    assert findings.primary.cls == "startup_misfit"
    assert findings.remedies[0].action.startswith("lower --max-batch-prefill-tokens")


# https://github.com/vllm-project/vllm/issues/15617 (0.8.2 after 0.7.3): the KV refusal of one
# try, then, 51 minutes later with other settings, the sampler warm-up's OOM of the next
VLLM_15617 = (
    "ERROR 03-27 16:43:19 [core.py:343] ValueError: To serve at least one request with the "
    "models's max seq len (116160), (4.43 GB KV cache is needed, which is larger than the "
    "available KV cache memory (3.48 GB). Try increasing gpu_memory_utilization or decreasing "
    "max_model_len when initializing the engine.\n"
    "ERROR 03-27 17:34:18 [core.py:343] RuntimeError: CUDA out of memory occurred when warming "
    "up sampler with 1024 dummy requests. Please try lowering max_num_seqs or "
    "gpu_memory_utilization when initializing the engine.\n"
)


def test_a_refusal_explains_its_own_start_not_a_later_ones_failure(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "vllm-15617.log", VLLM_15617)
    first, second = sorted(findings.incidents, key=lambda i: i.peak_ts)
    assert first.cls == second.cls == "startup_misfit"
    assert "refused to start" in first.reason
    # THEN the later OOM is its own start's sampler warm-up, not the earlier refusal
    assert "refused" not in second.reason
    assert "dummy sampler pass" in second.reason
    actions = [r.action for r in findings.remedies if r.incident == second.id]
    assert actions == ["lower --max-num-seqs from 1024"]
