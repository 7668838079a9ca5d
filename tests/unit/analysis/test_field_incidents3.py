"""Incidents from public threads whose cause a person reads at once and the rules misread, each
rewritten from the thread named beside it in its real format (ids, figures, prefixes and the
order of the lines kept; unrelated lines left out): an engine's death printed before the OOM
that killed it, a profiling run's OOM that lacked no bytes, a CUDA graph capture failing in
PyTorch's ``capture_end``, and the settings a start-up misfit read off its phase gets.
"""

from __future__ import annotations

from pathlib import Path

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Findings, Remedy
from oomtrace.analysis.kvmodel import kv_model
from oomtrace.analysis.remedy_base import RemedyFacts
from oomtrace.analysis.remedy_startup import phase_remedies
from oomtrace.ingest import IngestOptions, load_any

# https://github.com/vllm-project/vllm/issues/16107: vLLM 0.8 V0 behind Docker's timestamps; a
# chat request asking prompt logprobs of a multimodal model while serving. The server prints the
# engine's death a few milliseconds before the engine's own record of the OOM that killed it.
LOGPROBS_16107 = (
    "2025-04-06T07:44:23.516775945Z CRITICAL 04-06 00:44:23 [launcher.py:116] MQLLMEngine is "
    "already dead, terminating server process\n"
    '2025-04-06T07:44:23.516946348Z INFO:     100.64.0.34:52776 - "POST /v1/chat/completions '
    'HTTP/1.1" 500 Internal Server Error\n'
    "2025-04-06T07:44:23.525311320Z ERROR 04-06 00:44:23 [engine.py:160] OutOfMemoryError('CUDA "
    "out of memory. Tried to allocate 6.33 GiB. GPU 0 has a total capacity of 79.25 GiB of which "
    "1.26 GiB is free. Process 357573 has 77.97 GiB memory in use. Of the allocated memory 77.05 "
    "GiB is allocated by PyTorch, and 429.22 MiB is reserved by PyTorch but unallocated.')\n"
    "2025-04-06T07:44:23.525322080Z ERROR 04-06 00:44:23 [engine.py:160] Traceback (most recent "
    "call last):\n"
    '2025-04-06T07:44:23.525331017Z ERROR 04-06 00:44:23 [engine.py:160]   File "/usr/local/lib/'
    'python3.12/dist-packages/vllm/engine/multiprocessing/engine.py", line 158, in start\n'
)
# https://github.com/vllm-project/vllm/issues/12529: V1's profiling run on a 7.75 GiB desktop
# GPU; 1.16 GiB asked with 1.17 GiB free, 1.56 GiB held by the desktop's other processes. The
# thread's fix: a lower --max-num-seqs (V1 had raised its default to 1024).
PROFILE_12529 = (
    "ERROR 03-13 09:00:43 [core.py:330]     available_gpu_memory = "
    "self.model_executor.determine_available_memory()\n"
    'ERROR 03-13 09:00:43 [core.py:330]   File "/home/u/vllm/vllm/v1/executor/abstract.py", '
    "line 66, in determine_available_memory\n"
    'ERROR 03-13 09:00:43 [core.py:330]     output = self.collective_rpc("determine_available_'
    'memory")\n'
    "ERROR 03-13 09:00:43 [core.py:330] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 1.16 GiB. GPU 0 has a total capacity of 7.75 GiB of which 1.17 GiB is free. "
    "Including non-PyTorch memory, this process has 5.02 GiB memory in use. Of the allocated "
    "memory 4.81 GiB is allocated by PyTorch, and 18.97 MiB is reserved by PyTorch but "
    "unallocated.\n"
    "CRITICAL 03-13 09:00:43 [core_client.py:260] Got fatal signal from worker processes, "
    "shutting down. See stack trace above for root cause issue.\n"
)
# https://github.com/vllm-project/vllm/issues/19186: --gpu-memory-utilization set high, the
# compiled backend's CUDA graph capture fails in PyTorch's capture_end (rank 3 of 4); the fix
# was a lower utilisation.
_SITE = '  File "/usr/local/lib/python3.10/site-packages/'
CAPTURE_19186 = "".join(
    f"(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] {line}\n"
    for line in (
        _SITE + 'vllm/compilation/backends.py", line 681, in __call__',
        "    with torch.cuda.graph(cudagraph, pool=self.graph_pool):",
        _SITE + 'torch/cuda/graphs.py", line 186, in __exit__',
        "    self.cuda_graph.capture_end()",
        _SITE + 'torch/cuda/graphs.py", line 84, in capture_end',
        "    super().capture_end()",
        "RuntimeError: CUDA error: out of memory",
    )
)
# https://github.com/abetlen/llama-cpp-python/issues/1944: DeepSeek-V3 671B Q2_K_L on 4 x A100;
# the context defaulted to the model's own, and its KV cache asked 200 GiB of device 0.
KV_1944 = (
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 204800.00 MiB on device 0: "
    "cudaMalloc failed: out of memory\n"
    "llama_kv_cache_init: failed to allocate buffer for kv cache\n"
    "llama_init_from_model: llama_kv_cache_init() failed for self-attention cache\n"
)
# https://github.com/ggml-org/llama.cpp/issues/16725: a 70B IQ4_XS model on ROCm; the compute
# buffers asked 14,136 MiB.
RESERVE_16725 = (
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 14136.04 MiB on device 0: "
    "cudaMalloc failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296\n"
    "graph_reserve: failed to allocate compute buffers\n"
    "llama_init_from_model: failed to initialize the context: failed to allocate compute pp "
    "buffers\n"
)
# https://github.com/vllm-project/vllm/issues/27508 (field corpus vllm-v1-oom-process-gptoss):
# the dummy sampler pass's logits, 786 MiB = 1,024 sequences x gpt-oss's 201,088-token
# vocabulary x 4 bytes (V1's default --max-num-seqs on an 80 GB GPU), 140.75 MiB free.
SAMPLER_27508 = (
    "(EngineCore_DP0 pid=8884)                                   "
    "sampling_metadata=dummy_metadata)\n"
    '(EngineCore_DP0 pid=8884)   File "/opt/conda/lib/python3.13/site-packages/vllm/v1/sample/'
    'sampler.py", line 86, in forward\n'
    "(EngineCore_DP0 pid=8884)     logits = logits.to(torch.float32)\n"
    "(EngineCore_DP0 pid=8884) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "786.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 140.75 MiB is free. Process "
    "3270336 has 78.96 GiB memory in use. Of the allocated memory 68.83 GiB is allocated by "
    "PyTorch, and 331.08 MiB is reserved by PyTorch but unallocated.\n"
)


def _findings(tmp_path: Path, name: str, text: str) -> Findings:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return analyze(load_any([path], IngestOptions()))


def _classed(tmp_path: Path, name: str, text: str, cls: str) -> Findings:
    """The findings of ``text``, whose primary incident is of class ``cls``."""
    findings = _findings(tmp_path, name, text)
    assert findings.primary is not None
    assert findings.primary.cls == cls
    return findings


def _actions(remedies: tuple[Remedy, ...]) -> list[str]:
    return [r.action for r in remedies]


def test_a_death_printed_before_its_own_oom_is_not_a_start(tmp_path: Path) -> None:
    # GIVEN vLLM's server announcing the engine dead 9 ms before the engine's OOM record
    findings = _findings(tmp_path, "vllm-16107.txt", LOGPROBS_16107)
    incident = findings.primary
    assert incident is not None
    # THEN the death is not taken for a start-up: the 6.33 GiB allocation is judged by its own
    # figures, a request's transient peak while serving
    assert incident.cls == "transient_peak"
    assert "6.33 GiB" in incident.reason
    assert "1.26 GiB free" in incident.reason
    startup = next(c for c in incident.checks if c.cls == "startup_misfit")
    assert not startup.matched


def test_a_profiling_run_that_lacked_no_bytes_is_not_blamed_on_others(tmp_path: Path) -> None:
    # GIVEN V1's profiling run failing 1.16 GiB with 1.17 GiB free, others holding 1.56 GiB
    findings = _findings(tmp_path, "vllm-12529.txt", PROFILE_12529)
    incident = findings.primary
    assert incident is not None
    # THEN the others' memory is not what it lacked: the start-up misfit of the profiling run
    assert incident.cls == "startup_misfit"
    assert incident.reason.startswith("the start-up profiling run (a dummy batch that sizes")
    foreign = next(c for c in incident.checks if c.cls == "foreign_memory")
    assert not foreign.matched
    # AND its remedies are the settings that size the dummy batch, with no value the figures
    # cannot give (the free memory covered the allocation on paper)
    assert _actions(findings.remedies) == ["lower --max-num-seqs", "lower --max-num-batched-tokens"]
    assert all(r.value is None for r in findings.remedies)
    assert "none of the free memory was in one piece" in findings.remedies[0].detail


def test_a_capture_failing_in_capture_end_is_the_start_up_graph_capture(tmp_path: Path) -> None:
    # GIVEN the capture's CUDA error, no size stated, inside torch.cuda.graph's capture_end
    findings = _findings(tmp_path, "vllm-19186.txt", CAPTURE_19186)
    incident = findings.primary
    assert incident is not None
    # THEN the phase is the CUDA graph capture at start-up
    assert incident.cls == "startup_misfit"
    assert incident.reason.startswith("the CUDA graph capture at start-up failed")
    # AND the remedies are a smaller share of the device, or no graphs, with what is missing
    assert _actions(findings.remedies) == [
        "lower --gpu-memory-utilization",
        "or start with --enforce-eager",
    ]
    assert "states no figure" in findings.remedies[0].detail


def test_llama_cpp_start_up_misfits_get_the_setting_their_buffer_grows_with(
    tmp_path: Path,
) -> None:
    # GIVEN llama.cpp failing its KV cache, then its compute buffers, at start-up
    kv = _findings(tmp_path, "lcpp-1944.txt", KV_1944)
    reserve = _findings(tmp_path, "lcpp-16725.txt", RESERVE_16725)
    # THEN the KV cache's remedy is the context, the compute buffers' the micro-batch, each
    # saying that the log states neither the setting nor the free memory
    assert _actions(kv.remedies) == ["lower -c"]
    assert "200.00 GiB" in kv.remedies[0].detail
    assert "states neither -c nor the free memory" in kv.remedies[0].detail
    assert _actions(reserve.remedies) == ["lower -ub"]
    assert "13.80 GiB" in reserve.remedies[0].detail


def test_the_dummy_sampler_gets_the_max_num_seqs_that_fits(tmp_path: Path) -> None:
    # GIVEN the dummy sampler pass's 786 MiB with 140.75 MiB free
    path = tmp_path / "vllm-27508.txt"
    path.write_text(SAMPLER_27508, encoding="utf-8")
    trace = load_any([path], IngestOptions())
    findings = analyze(trace)
    incident = findings.primary
    assert incident is not None
    assert incident.cls == "startup_misfit"
    # THEN without the setting in the log, the share of it that fits is said
    assert _actions(findings.remedies) == ["lower --max-num-seqs"]
    assert "at most 17% of its current value fits" in findings.remedies[0].detail
    # AND with the setting stated (1,024), the value is computed: 1024 x 140.75 / 786 = 183
    check = next(c for c in incident.checks if c.cls == "startup_misfit")
    facts = RemedyFacts({"max_num_seqs": 1024}, kv_model(trace.manifest, trace.samples), None)
    (fits,) = phase_remedies(incident, check, facts)
    assert (fits.action, fits.value) == ("set --max-num-seqs 183", "183")


# https://github.com/liunian-Jay/MU-GOT/issues/17: vLLM 0.6 sizes its GPU and CPU blocks (the
# CPU blocks pin host memory for swapping), then the shell reports the process "Killed".
KILLED_MUGOT17 = (
    "INFO 11-20 10:45:55 model_runner.py:680] Starting to load model /home/u/GOT_weights...\n"
    "INFO 11-20 10:45:57 model_runner.py:692] Loading model weights took 1.9900 GB\n"
    "INFO 11-20 10:45:57 gpu_executor.py:102] # GPU blocks: 12453, # CPU blocks: 2730\n"
    "Killed\n"
)


def test_a_process_the_shell_reports_killed_is_a_host_memory_death(tmp_path: Path) -> None:
    # GIVEN a vLLM start-up ending in the shell's "Killed", no OOM of the device
    findings = _findings(tmp_path, "vllm-mugot17.txt", KILLED_MUGOT17)
    # THEN no GPU OOM is made of it: the death names host memory as the first suspect
    assert findings.incidents == ()
    (death,) = findings.trace.deaths
    assert "was killed at" in death
    assert "for want of host memory (RAM), not device memory" in death
    assert "does not say why" not in death


# https://github.com/vllm-project/vllm/issues/15598: vLLM 0.8 V0 over Ray (two nodes), 44.53 GiB
# GPUs at --gpu-memory-utilization 0.98; the graph capture's 2 MiB fails with 448 KiB free on
# another node's worker (its own capture line is not in the excerpt). vLLM's advice in the log,
# and the thread's fix: a lower utilisation.
RAY_15598 = (
    "(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] the "
    "current vLLM instance can use total_gpu_memory (44.53GiB) x gpu_memory_utilization (0.98) = "
    "43.64GiB [repeated 30x across cluster]\n"
    "(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] model "
    "weights take 20.64GiB; non_torch_memory takes 0.28GiB; PyTorch activation peak memory takes "
    "1.52GiB; the rest of the memory reserved for KV Cache is 21.20GiB. [repeated 30x across "
    "cluster]\n"
    "(RayWorkerWrapper pid=206994, ip=192.168.10.25) ERROR 03-27 10:29:13 [worker_base.py:620] "
    "Error executing metho\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 6 has a total "
    "capacity of 44.53 GiB of which 448.00 KiB is free.\n"
)


def test_a_start_up_oom_in_no_stated_phase_gets_the_utilisation_that_leaves_it_room(
    tmp_path: Path,
) -> None:
    # GIVEN a start-up OOM (the engine's start-up figures, nothing served) at utilisation 0.98
    findings = _classed(tmp_path, "vllm-15598.txt", RAY_15598, "startup_misfit")
    # THEN the remedy is the utilisation that leaves the 1.56 MiB it lacked, as a bound
    (share,) = findings.remedies
    assert share.action == "set --gpu-memory-utilization 0.97 at most"
    assert "lacked 1.56 MiB of the 44.53 GiB device" in share.detail


# https://github.com/Comfy-Org/ComfyUI/issues/3278: PyTorch's cudaMallocAsync refusal pasted
# bare (no time) on a 24 GiB RTX 3090; the maintainer's reading: the browser and other programs
# hold about 2 GiB of the card.
COMFY_3278 = (
    "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of "
    "memory)\n"
    "Currently allocated     : 21.55 GiB\n"
    "Requested               : 952.00 MiB\n"
    "Device limit            : 24.00 GiB\n"
    "Free (according to CUDA): 0 bytes\n"
    "PyTorch limit (set by user-supplied memory fraction)\n"
    "                        : 17179869184.00 GiB\n"
)


def test_a_bare_async_allocator_refusal_keeps_its_limit_and_free_memory(tmp_path: Path) -> None:
    # GIVEN the six-line refusal in a paste that prints no time
    incident = _findings(tmp_path, "comfy-3278.txt", COMFY_3278).primary
    assert incident is not None
    # THEN every figure is read (its lines are placed a second apart, in order): the 2.45 GiB
    # outside PyTorch's allocation is named beside the allocation that failed, after what
    # filled the device (nothing was free: the 952 MiB was the last straw)
    assert incident.reason.startswith(
        "the device was full: 24.00 GiB of 24.00 GiB in use (21.55 GiB allocated by PyTorch), "
        "0 B free; a temporary allocation of 952.00 MiB did not fit"
    )
    assert "2.45 GiB in use outside PyTorch's allocator" in incident.reason


# https://github.com/vllm-project/vllm/issues/10533: a second vLLM 0.6 engine (14B, share 0.20)
# started beside a running 72B one (share 0.75) on one 80 GB A100: the second refuses; vLLM 0.6
# counted the first one's 68 GiB inside the second one's share.
TWO_10533 = (
    "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine.\n"
    "\n"
    "Memory profiling results: total_gpu_memory=79.15GiB initial_memory_usage=68.01GiB "
    "peak_torch_memory=\n"
)


def test_nothing_left_for_the_kv_cache_gets_a_larger_share_and_the_other_process(
    tmp_path: Path,
) -> None:
    findings = _classed(tmp_path, "vllm-10533.txt", TWO_10533, "startup_misfit")
    # THEN the remedy is vLLM's own (a larger share), with the other process named as the
    # first thing to look for, and no value the log cannot give
    (share,) = findings.remedies
    assert share.action == "raise --gpu-memory-utilization"
    assert share.value is None
    assert "where another process holds the device" in share.detail


# https://github.com/basalam/product-catalog-generator/issues/10 (field corpus
# vllm-kvinsufficient-bare): vLLM 0.2.7's refusal pasted alone, no time.
KV_REFUSAL_BASALAM10 = (
    "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that "
    "can be stored in KV cache (3664). Try increasing gpu_memory_utilization or decreasing "
    "max_model_len when initializing the engine.\n"
)
# https://github.com/huggingface/text-generation-inference/issues/755 (field corpus
# tgi-warmup-prefill-755): Llama 70B GPTQ's warm-up refusal.
TGI_WARMUP_755 = (
    'Error: Warmup(Generation("Not enough memory to handle 4096 prefill tokens. You need to '
    'decrease `--max-batch-prefill-tokens`"))\n'
)


def test_an_untimed_refusal_gets_the_length_its_own_words_state(tmp_path: Path) -> None:
    # GIVEN the refusal without a time: the cache holds 3,664 tokens, the model's length 4,096
    findings = _findings(tmp_path, "vllm-basalam10.md", KV_REFUSAL_BASALAM10)
    # THEN the length that fits is read off its own words, as with times
    (length,) = findings.remedies
    assert (length.action, length.value) == ("set --max-model-len 3664", "3664")


def test_a_tgi_warm_up_refusal_gets_tgis_own_setting(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "tgi-755.txt", TGI_WARMUP_755)
    (prefill,) = findings.remedies
    assert prefill.action == "lower --max-batch-prefill-tokens below 4,096"
    assert prefill.value is None


# https://github.com/deepseek-ai/DeepSeek-VL2/issues/90: loading a model's shards, "Killed", and
# the kernel's account from dmesg (the cgroup line shortened).
DMESG_DSVL2_90 = (
    "Loading checkpoint shards:  75%|#######     | 3/4 [00:08<00:02,  2.83s/it]Killed\n"
    "\n"
    "sudo dmesg | tail -n 20\n"
    "\n"
    "[26002.108918] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=user.slice,"
    "mems_allowed=0,global_oom,task=python,pid=576419,uid=1000\n"
    "[26002.109061] Out of memory: Killed process 576419 (python) total-vm:78521468kB, "
    "anon-rss:54398260kB, file-rss:2628kB, shmem-rss:0kB, UID:1000 pgtables:119448kB "
    "oom_score_adj:0\n"
)


def test_the_kernels_oom_kill_is_a_host_memory_death_not_a_gpu_oom(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "dmesg-dsvl2-90.txt", DMESG_DSVL2_90)
    # THEN no GPU incident: the death says what the kernel killed and that host memory ran out
    assert findings.incidents == ()
    (death,) = findings.trace.deaths
    assert "the kernel's OOM killer killed process 576419 (python)" in death
    assert "holding 51.88 GiB of host memory" in death
    assert "the host's memory (RAM) ran out, not the device's" in death


# https://github.com/vllm-project/vllm/issues/586: the engine's Ray actor lost; Ray's account.
RAY_LOST_586 = (
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker "
    "exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There "
    "are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to "
    "high memory usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly "
    "due to SIGSEGV or other unexpected errors.\n"
    "The actor never ran - it was cancelled before it started running.\n"
)
# Ray's memory monitor's own kill (the wording of ray-project/ray's docs, "Out-Of-Memory
# Prevention"; figures of a 62.51 GB node, as printed for a model's workers).
RAY_MONITOR_KILL = (
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 192.168.1.103, ID: db89649fe400) where the actor (actor ID: "
    "2e3a77fe4c59, name=RayWorkerWrapper.__init__, pid=3048142, memory used=49.21GB) was "
    "running was 59.84GB / 62.51GB (0.957347), which exceeds the memory usage threshold of "
    "0.95. Ray killed this worker (ID: a4f59754f807) because it was the most recently "
    "scheduled task.\n"
)


def test_a_ray_worker_lost_to_the_oom_killer_is_a_host_memory_death(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "ray-586.txt", RAY_LOST_586)
    # THEN no GPU incident: the death names host memory, Ray's first cause
    assert findings.incidents == ()
    (death,) = findings.trace.deaths
    assert "a Ray worker died with no word" in death
    assert "host memory (RAM)" in death


def test_ray_memory_monitor_kill_names_the_process_and_the_nodes_memory(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "ray-monitor.txt", RAY_MONITOR_KILL)
    assert findings.incidents == ()
    (death,) = findings.trace.deaths
    # 49.21 GB = 49,210,000,000 bytes = 45.83 GiB; 59.84 GB and 62.51 GB likewise
    assert "Ray's memory monitor killed process 3048142 (RayWorkerWrapper.__init__)" in death
    assert "holding 45.83 GiB of host memory" in death
    assert "at 55.73 GiB of 58.22 GiB" in death
    assert "not the device's" in death


def test_a_ray_memory_monitor_kill_without_the_tasks_figures_keeps_the_nodes(
    tmp_path: Path,
) -> None:
    text = (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "Memory on the node was 60.81GB / 61.36GB, which exceeds the memory usage threshold of "
        "0.99.\n"
    )
    (death,) = _findings(tmp_path, "ray-node.txt", text).trace.deaths
    assert "Ray's memory monitor killed a worker: the node's memory (RAM) was at 56.63 GiB" in death
