"""Incidents from public threads (an eighth set) whose cause a person reads at once and the rules
misread, each rewritten from the thread named beside it in its real format (prefixes, figures and
the order of the lines kept; unrelated lines left out): a GPU fault in the kernel log with no
engine death, a log that names no request, a death with no OOM text, a failure while loading the
weights with tqdm's shard progress beside it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.analysis import analyze
from oomtrace.analysis.check_startup import phase_reason, shard_figures
from oomtrace.analysis.findings import Findings
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.report.verdict import build_verdict
from oomtrace.terminal.findings_text import render_summary

# https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1151: "Key log - Xid 79 with zero
# precursor" (journalctl -k, the host name cut by the reporter), the driver's three lines.
XID79_1151 = (
    "May 18 19:02:39 kernel: NVRM: GPU at PCI:0000:2b:00: "
    "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae\n"
    "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"
    "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.\n"
)
# nvidia-smi's CSV of the same GPU beside it (its bus id as nvidia-smi prints it): the memory the
# GPU held up to the fault.
SMI_2B = (
    "timestamp, index, pci.bus_id, memory.used [MiB], memory.total [MiB]\n"
    "2026/05/18 19:02:30.000, 0, 00000000:2B:00.0, 15210 MiB, 16303 MiB\n"
    "2026/05/18 19:02:35.000, 0, 00000000:2B:00.0, 15236 MiB, 16303 MiB\n"
)
# https://pastebin.com/fTNHmgzB (a kernel log of an MMU fault): the driver's Xid 31 line.
XID31 = (
    "May 13 17:19:01 hyperion kernel: NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr "
    "10000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of type "
    "FAULT_PDE ACCESS_TYPE_READ\n"
)


def _findings(tmp_path: Path, files: dict[str, str]) -> Findings:
    node = tmp_path / "gpu-node"
    node.mkdir(parents=True)
    for name, text in files.items():
        (node / name).write_text(text, encoding="utf-8")
    return analyze(load_any([node], IngestOptions(year=2026, tz="UTC")))


def test_an_xid_79_with_no_engine_death_is_a_gpu_fault(tmp_path: Path) -> None:
    # GIVEN the kernel's Xid 79 and nvidia-smi's memory figures, and no engine log at all
    findings = _findings(tmp_path, {"kern.log": XID79_1151, "gpu.csv": SMI_2B})
    primary = findings.primary
    # THEN an incident of its own kind, not "no incident" and not an OOM
    assert primary is not None
    assert primary.cls == "gpu_fault"
    assert primary.anchor == "xid"
    assert primary.reason.startswith(
        "the driver reported Xid 79 on the GPU at 0000:2b:00: the GPU fell off the bus"
    )
    assert "not a lack of memory" in primary.reason
    assert "device memory in use was 14.88 GiB of 15.92 GiB just before it" in primary.reason
    assert primary.culprits == ()
    # AND the fix is the one a person gives for Xid 79: drain, reset, check power and the slot
    (fix,) = findings.remedies
    assert fix.action.startswith("drain the node and reset the GPU or reboot")
    assert "power supply" in fix.action
    assert fix.setting is None
    assert "analyzing-xid-catalog" in fix.detail
    # AND the report says the GPU failed, with the memory at the fault, and no coverage figure
    verdict = build_verdict(findings.to_json()["incidents"][0], ())
    assert verdict.label == "GPU fault (Xid)"
    assert verdict.paragraph.startswith("The GPU itself failed")
    assert "Device memory in use when the driver reported it: 14.88 GiB" in verdict.paragraph
    assert "coverage" not in [f.key for f in verdict.figures]


def test_an_xid_31_is_the_work_on_the_gpu_faulting(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"kern.log": XID31})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "gpu_fault"
    assert "Xid 31 on the GPU at 0000:08:00: a GPU memory page fault (MMU fault)" in primary.reason
    (fix,) = findings.remedies
    assert fix.action.startswith("restart the engine; if the same Xid comes back on this GPU")


def test_the_terminal_says_the_log_names_no_request_instead_of_a_zero_coverage(
    tmp_path: Path,
) -> None:
    # GIVEN an incident whose inputs name no request (a kernel log and nvidia-smi)
    findings = _findings(tmp_path, {"kern.log": XID79_1151, "gpu.csv": SMI_2B})
    text = render_summary(findings)
    # THEN no 0 % coverage, but what is missing and what names requests
    assert "coverage:" not in text
    assert "0.0%" not in text
    assert "the inputs name no request" in text
    assert "--enable-log-requests" in text


# https://github.com/vllm-project/vllm/issues/42362: Kimi-K2.6 on vLLM 0.20.2; the stats lines
# before the EngineDeadError (the engine core's own traceback is not in the excerpt).
DEAD_42362 = (
    "(APIServer pid=1) INFO 05-12 01:47:42 [loggers.py:271] Engine 000: Avg prompt throughput: "
    "68.4 tokens/s, Avg generation throughput: 58.6 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 33.5%, Prefix cache hit rate: 96.4%, MM cache hit rate: 98.1%\n"
    '(APIServer pid=1) INFO:     10.1.6.81:39662 - "GET /metrics HTTP/1.1" 200 OK\n'
    "(APIServer pid=1) INFO 05-12 01:47:52 [loggers.py:271] Engine 000: Avg prompt throughput: "
    "0.0 tokens/s, Avg generation throughput: 92.3 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 33.7%, Prefix cache hit rate: 96.4%, MM cache hit rate: 98.1%\n"
    "(APIServer pid=1) ERROR 05-12 01:47:58 [async_llm.py:480] AsyncLLM output_handler failed.\n"
    "(APIServer pid=1) ERROR 05-12 01:47:58 [async_llm.py:480] vllm.v1.engine.exceptions."
    "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
    "cause.\n"
)


def test_a_death_with_no_oom_text_states_the_memory_last_seen(tmp_path: Path) -> None:
    # GIVEN the engine's stats lines, then its death, and no OOM text; nvidia-smi beside it
    smi = (
        "timestamp, index, pci.bus_id, memory.used [MiB], memory.total [MiB]\n"
        "2026/05/12 01:47:40.000, 0, 00000000:3B:00.0, 76000 MiB, 81559 MiB\n"
        "2026/05/12 01:47:55.000, 0, 00000000:3B:00.0, 76010 MiB, 81559 MiB\n"
    )
    findings = _findings(tmp_path, {"vllm.log": DEAD_42362, "gpu.csv": smi})
    # THEN the death, what is missing, and the memory and KV cache last seen before it
    (death,) = findings.trace.deaths
    assert death.startswith("the engine on gpu-node died at 2026-05-12 01:47:58.000 UTC")
    assert "the log does not say why" in death
    assert "device memory in use was 74.23 GiB of 79.65 GiB at 01:47:55" in death
    assert "the KV cache was 33.7% full at 01:47:52" in death
    text = render_summary(findings)
    assert "No incident" not in text
    assert "the engine died" in text


def test_a_death_with_only_the_engines_own_figures(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"vllm.log": DEAD_42362})
    (death,) = findings.trace.deaths
    assert "device memory" not in death
    assert death.endswith(
        "the KV cache was 33.7% full at 01:47:52 (the last figures the inputs hold)"
    )


# https://pastebin.com/xJaypMZt: an older driver's fall off the bus, then an Xid 3 the fall causes.
FALLEN_OLD = (
    "Jan 18 11:38:05 localhost kernel: [ 269.516977] NVRM: GPU at 0000:01:00.0 has fallen off "
    "the bus.\n"
    "Jan 18 11:38:05 localhost kernel: [ 269.516986] NVRM: os_pci_init_handle: invalid context!\n"
    "Jan 18 11:38:05 localhost kernel: [ 269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC "
    "00000007 M 00001ffc Data ffffffff\n"
)


def test_a_chain_of_xids_is_told_by_its_gravest(tmp_path: Path) -> None:
    # GIVEN the fall off the bus and an Xid 3 in the same second; and Xid 69s before an Xid 31
    fallen = _findings(tmp_path / "a", {"kern.log": FALLEN_OLD})
    faults = _findings(tmp_path / "b", {"kern.log": XID69_31})
    # THEN one incident each, told by the fall and by the MMU fault, not by the first line
    assert [i.cls for i in fallen.incidents] == ["gpu_fault"]
    assert fallen.incidents[0].reason.startswith("the driver reported Xid 79 on the GPU at 0000:01")
    assert fallen.remedies[0].action.startswith("drain the node")
    assert [i.cls for i in faults.incidents] == ["gpu_fault"]
    assert "Xid 31" in faults.incidents[0].reason


# https://pastebin.com/fTNHmgzB: Xid 69 class errors for a dozen seconds, then the MMU fault.
XID69_31 = (
    "May 13 17:18:47 hyperion kernel: NVRM: Xid (PCI:0000:08:00): 69, Class Error: ChId 003b, "
    "Class 0000c197, Offset 00002040, Data 00004b30, ErrorCode 0000000c\n"
    "May 13 17:18:57 hyperion kernel: NVRM: Xid (PCI:0000:08:00): 69, Class Error: ChId 003b, "
    "Class 0000c197, Offset 00001618, Data 00000004, ErrorCode 0000000d\n" + XID31
)

# https://github.com/huggingface/text-generation-inference/issues/1067: TGI's warm-up refusal.
TGI_1067 = (
    '  File "/opt/conda/lib/python3.9/site-packages/text_generation_server/models/'
    'flash_causal_lm.py", line 755, in warmup\n'
    "    raise RuntimeError(\n"
    "RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease "
    "`--max-batch-prefill-tokens`\n"
    "\n"
    "2023-09-26T21:48:00.969072Z ERROR text_generation_launcher: Method Warmup encountered an "
    "error.\n"
)


def test_tgis_warm_up_refusal_is_told_as_the_prefill_not_the_cache(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"tgi.log": TGI_1067})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert "KV cache cannot hold one request" not in primary.reason
    assert "not enough memory to handle 4096 prefill tokens" in primary.reason
    assert findings.remedies[0].action.startswith("lower --max-batch-prefill-tokens")


# https://github.com/vllm-project/vllm/issues/31273: the same failure as vLLM prints it (v0.13.0,
# the engine core's prefix and time), tqdm's progress printed after it without any prefix.
H20_31273_LOG = (
    "(EngineCore_DP0 pid=556790) INFO 12-24 08:50:30 [gpu_model_runner.py:3559] Starting to load "
    "model /models/Qwen2.5-72B-Instruct-FP8...\n"
    "(EngineCore_DP0 pid=556790) ERROR 12-24 08:50:35 [core.py:866]     output = torch.empty("
    "shape, device=input.device, dtype=out_dtype)\n"
    "(EngineCore_DP0 pid=556790) ERROR 12-24 08:50:35 [core.py:866] torch.OutOfMemoryError: CUDA "
    "out of memory. Tried to allocate 80.00 MiB. GPU 0 has a total capacity of 139.72 GiB of "
    "which 60.69 MiB is free. Process 691170 has 139.65 GiB memory in use. Of the allocated "
    "memory 139.21 GiB is allocated by PyTorch, and 12.81 MiB is reserved by PyTorch but "
    "unallocated.\n"
    "\n"
    "Loading safetensors checkpoint shards:   3% Completed | 1/37 [00:02<01:39,  2.77s/it]\n"
    "\n"
    "(EngineCore_DP0 pid=556790) Process EngineCore_DP0:\n"
)


def test_the_shard_progress_is_kept_on_a_vllm_logs_failure(tmp_path: Path) -> None:
    # GIVEN vLLM's own log: the failure in the engine core's lines, tqdm's progress in none
    (tmp_path / "vllm.log").write_text(H20_31273_LOG, encoding="utf-8")
    trace = load_any([tmp_path / "vllm.log"], IngestOptions(year=2025, tz="UTC"))
    # THEN the event keeps how far the loading had come, and the verdict says where it stopped
    (detail,) = trace.events.filter(pl.col("kind") == "oom")["detail"].to_list()
    assert detail.endswith(
        "during the loading of the model's weights; with 1 of 37 checkpoint shards loaded"
    )
    primary = analyze(trace).primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert "at checkpoint shard 2 of 37 (1 loaded)" in primary.reason
    assert "the model would need 5.05 TiB" in primary.reason


def test_a_device_filled_by_the_shards_is_told_to_spread_the_weights() -> None:
    # GIVEN (the rule alone) a failure at shard 20 of 37 with the device full: the weights so
    # far are what filled it
    event = {
        "phase": "load_weights",
        "device": 0,
        "requested_bytes": 2 * 2**30,
        "free_bytes": 2**30,
        "total_bytes": 80 * 2**30,
        "detail": "PyTorch OOM message; with 19 of 37 checkpoint shards loaded",
    }
    reason = phase_reason(event)
    assert reason is not None
    assert reason.startswith(
        "out of memory while loading the model's weights on device 0, at checkpoint shard 20 of 37"
    )
    assert "something other" not in reason
    assert dict(shard_figures(event))["extrapolated_weights_bytes"] is None


# https://github.com/NVIDIA/TensorRT-LLM/issues/5950: DS-V3 W4FP8, TP 8 on H20 96 GB; 1.0.0rc2
# cannot create the executor's additional resources (rc1 can).
TRTLLM_5950 = (
    "RuntimeError: Executor creation failed due to insufficient GPU memory.\n"
    "\n"
    "The following component could not be created: Additional executor resources\n"
    "Total GPU memory (GiB): 95.00\n"
    "Free GPU memory before component creation attempt (GiB): 16.95\n"
    "\n"
    "Previously created components and free GPU memory before/after creation (GiB):\n"
    "Model: 94.30 / 47.83\n"
    "Sampler: 47.83 / 47.83\n"
    "Initial KV cache (temporary for KV cache size estimation): 47.83 / 45.67\n"
)
# https://github.com/NVIDIA/TensorRT-LLM/issues/2398: T5 on a 24 GB GPU; the process holds the
# device, PyTorch none of it.
TRTLLM_2398 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total "
    "capacity of 22.19 GiB of which 1.50 MiB is free. Process 885415 has 22.18 GiB memory in use. "
    "Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch "
    "but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
)


def test_tensorrt_llms_executor_creation_is_a_start_up_misfit(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"trtllm.log": TRTLLM_5950})
    primary = findings.primary
    assert primary is not None
    # THEN the start-up (the executor is created once), not "unknown"
    assert primary.cls == "startup_misfit"
    (fix,) = findings.remedies
    assert fix.action.startswith("lower max_num_tokens or max_batch_size")
    assert "could not create its Additional executor resources in the 16.95 GiB left" in fix.detail


def test_a_process_whose_memory_pytorch_does_not_hold_filled_the_device(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"trtllm.log": TRTLLM_2398})
    primary = findings.primary
    assert primary is not None
    # THEN not a transient step's last straw alone: the process's memory outside PyTorch
    assert primary.cls == "foreign_memory"
    assert primary.reason.startswith(
        "22.18 GiB of the 22.18 GiB process 885415 held on the 22.19 GiB device was outside "
        "PyTorch's allocator (PyTorch held 0 B)"
    )
    assert "kv_cache_free_gpu_mem_fraction" in findings.remedies[0].action


# https://github.com/ollama/ollama/issues/6860: four 12 GiB GPUs and a small fifth one; the
# compute buffers of the pipeline-parallel context do not fit on the fifth (device 4).
OLLAMA_6860 = (
    "llama_new_context_with_model: KV self size  = 5120.00 MiB, K (f16): 2560.00 MiB, V (f16): "
    "2560.00 MiB\n"
    "llama_new_context_with_model:  CUDA_Host  output buffer size =     0.49 MiB\n"
    "llama_new_context_with_model: pipeline parallelism enabled (n_copies=4)\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc "
    "failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate CUDA4 buffer of size 150995968\n"
    "llama_new_context_with_model: failed to allocate compute buffers\n"
)


def test_llama_cpp_failing_on_one_gpu_of_several_is_told_to_rebalance(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"ollama.log": OLLAMA_6860})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert primary.reason.startswith("the reservation of the compute buffers")
    # THEN the first fix is the failing GPU's share, then the micro-batch
    actions = [r.action for r in findings.remedies]
    assert actions[0].startswith("give CUDA4 a smaller share of the model (-ts/--tensor-split)")
    assert actions[1].startswith("lower -ub")


# https://github.com/NVIDIA/NVSentinel/issues/155: dmesg (seconds since boot, no time of day) of a
# 570 driver's fall off the bus, over three lines and without an Xid.
DMESG_155 = (
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
    "               NVRM: fallen off the bus and is not responding to commands.\n"
    "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
)


def test_a_kernel_log_without_times_still_tells_the_fault(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"dmesg.txt": DMESG_155})
    primary = findings.primary
    # THEN a GPU fault, not "no incident": the log's order is enough
    assert primary is not None
    assert primary.cls == "gpu_fault"
    assert primary.peak_ts is None
    assert primary.reason.startswith("the driver reported Xid 79 on the GPU at 0000:b3:00.0")
    assert findings.remedies[0].action.startswith("drain the node")
