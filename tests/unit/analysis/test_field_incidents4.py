"""Incidents from public threads (a fourth set) whose cause a person reads at once and the rules
misread, each rewritten from the thread named beside it in its real format (ids, figures,
prefixes and the order of the lines kept; unrelated lines left out): start-up phases only the
neighbouring lines state, NCCL's and cuBLAS's own allocations, PyTorch's OOM report failing in
NVML on a MIG slice, a container killed with exit code 137.
"""

from __future__ import annotations

from pathlib import Path

from oomtrace.analysis import analyze
from oomtrace.analysis.check_foreign import siblings
from oomtrace.analysis.findings import Findings, ProcessUse
from oomtrace.report.verdict import build_verdict
from tests.factories import text_trace

# https://github.com/vllm-project/vllm/issues/16343: vLLM 0.8.3 serving microsoft/phi-4 (14.7 B
# parameters, about 29 GB in bf16) on a 24 GB RTX 3090; the OOM (its first letter cut off in the
# thread) comes two lines after "Starting to load model", with no "Loading weights took" between.
PHI4_16343 = (
    "INFO 04-09 05:39:44 [api_server.py:1034] vLLM API server version 0.8.3\n"
    "INFO 04-09 05:39:54 [cuda.py:221] Using Flash Attention backend on V1 engine.\n"
    "INFO 04-09 05:39:54 [gpu_model_runner.py:1258] Starting to load model microsoft/phi-4...\n"
    "WARNING 04-09 05:39:54 [config.py:3785] `torch.compile` is turned on, but the model "
    "microsoft/phi-4 does not support it.\n"
    "orch.OutOfMemoryError: CUDA out of memory. Tried to allocate 350.00 MiB. GPU 0 has a total "
    "capacity of 23.68 GiB of which 212.81\n"
)
# https://github.com/vllm-project/vllm/issues/31273: v0.13.0 loading Qwen2.5-72B FP8 on a 141 GB
# H20; the OOM stands right before tqdm's shard progress at 1 of 37 (v0.12.0 loads it). The
# container's PID namespace prints the engine's own process as "Process 691170".
H20_31273 = (
    "(EngineCore_DP0 pid=556790) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "80.00 MiB. GPU 0 has a total capacity of 139.72 GiB of which 60.69 MiB is free. Process "
    "691170 has 139.65 GiB memory in use. Of the allocated memory 139.21 GiB is allocated by "
    "PyTorch, and 12.81 MiB is reserved by PyTorch but unallocated.\n"
    "\n"
    "Loading safetensors checkpoint shards:   3% Completed | 1/37 [00:02<01:39,  2.77s/it]\n"
    "\n"
    "(EngineCore_DP0 pid=556790) \n"
)
# https://github.com/vllm-project/vllm/issues/8903: Llama-3.2-11B-Vision, TP 4 on A100 80 GB; V0's
# worker wrapper names the method on the failure's own line (its first character cut in the
# thread). The fix that worked: --max-num-seqs 16.
MLLAMA_8903 = (
    "VllmWorkerProcess pid=214) ERROR 09-27 05:20:38 multiproc_worker_utils.py:233] Exception in "
    "worker VllmWorkerProcess while processing method determine_num_available_blocks: CUDA out of "
    "memory. Tried to allocate 19.63 GiB. GPU 3 has a total capacity of 79.15 GiB of which 17.73 "
    "GiB is free. Process 78729 has 61.41 GiB memory in use. Of the allocated memory 56.64 GiB is "
    "allocated by PyTorch, and 4.07 GiB is reserved by PyTorch but unallocated., Tra\n"
)
# https://github.com/vllm-project/vllm/issues/19865: DeepSeek-R1 TP 8 on B200 (vLLM 0.9.1, NCCL
# 2.26.2): rank 3's NCCL call fails for want of device memory, then the engine core dies.
NCCL_19865 = "".join(
    f"(VllmWorker rank=3 pid=15164) ERROR 06-19 07:06:13 [multiproc_executor.py:527] {line}\n"
    for line in (
        (
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            "c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.26.2"
        ),
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "Last error:",
        "Cuda failure 2 'out of memory'",
    )
) + (
    "ERROR 06-19 07:06:13 [core.py:515] EngineCore failed to start.\n"
    "ERROR 06-19 07:06:13 [core.py:515] Traceback (most recent call last):\n"
)
# https://github.com/NVIDIA/TensorRT-LLM/issues/1670: TensorRT-LLM under Triton on 8 x V100; NCCL's
# warnings alone, one rank's, repeated with blank lines between.
NCCL_1670 = (
    "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'\n\n"
    "VM-0-16-ubuntu:392:494 [2] enqueue.cc:54 NCCL WARN Cuda failure 'invalid resource handle'\n\n"
    "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'\n"
)
# https://github.com/QwenLM/Qwen3/issues/873: transformers over several GPUs (device_map); solved
# by running on one GPU with enough free memory.
CUBLAS_873 = (
    'File "lib/python3.9/site-packages/torch/nn/modules/linear.py", line 116, in forward\n'
    "    return F.linear(input, self.weight, self.bias)\n"
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
)
# https://github.com/vllm-project/vllm/issues/5107: Phi-3-medium-128k on an A100's MIG 3g.40gb
# slice; the whole error the thread shows.
MIG_5107 = (
    'RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "../c10/cuda/'
    'CUDACachingAllocator.cpp":844, please report a bug to PyTorch.\n'
)
# https://github.com/vectorch-ai/ScaleLLM/issues/38: Docker Compose's output; bash reports the
# entrypoint's job killed, Compose the exit code. Fixed with a larger shm_size.
KILLED_38 = (
    "scalellm          | ./entrypoint.sh: line 28:     7 Killed                  "
    'LD_LIBRARY_PATH=/app/lib:$LD_LIBRARY_PATH /app/bin/scalellm $ARGS "$@"\n'
    "scalellm exited with code 137\n"
    "\n"
)


def _findings(tmp_path: Path, name: str, text: str) -> Findings:
    return analyze(text_trace(tmp_path, name, text))


def _actions(findings: Findings) -> list[str]:
    return [r.action for r in findings.remedies]


def test_an_oom_right_after_vllm_starts_loading_the_model_is_the_weights(tmp_path: Path) -> None:
    # GIVEN "Starting to load model" two lines before the OOM, and no "Loading weights took"
    primary = _findings(tmp_path, "vllm-16343.txt", PHI4_16343).primary
    # THEN the weights did not fit, and the remedy is more GPUs or a quantized model
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert primary.reason.startswith("the model's weights did not fit device 0")


def test_an_oom_beside_the_shard_progress_is_the_weights_loading(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "vllm-31273.txt", H20_31273)
    primary = findings.primary
    assert primary is not None
    # THEN the loading, not a transient peak; the engine's own process is no other tenant
    assert primary.cls == "startup_misfit"
    assert primary.reason.startswith(
        "out of memory while loading the model's weights on device 0, at checkpoint shard 2 of 37"
    )
    assert "60.69 MiB free of 139.72 GiB" in primary.reason
    # AND the device full after 1 of 37 shards is not the weights' size (the thread: v0.12.0
    # loads the same 72 B FP8 model on the same GPU): more GPUs are not the fix
    assert "something other than these weights held the memory" in primary.reason
    assert not any("--tensor-parallel-size" in a for a in _actions(findings))
    assert _actions(findings)[0].startswith("find what held the device before the weights")


def test_the_method_on_a_v0_workers_failure_line_is_its_phase(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "vllm-8903.txt", MLLAMA_8903)
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert primary.reason.startswith("the start-up profiling run")
    assert "19.63 GiB, 17.73 GiB free of 79.15 GiB" in primary.reason
    assert "lower --max-num-seqs" in _actions(findings)


def test_nccls_out_of_memory_is_an_oom_of_its_own_buffers_at_start_up(tmp_path: Path) -> None:
    # GIVEN NCCL's "Cuda failure 2 'out of memory'", then "EngineCore failed to start"
    findings = _findings(tmp_path, "vllm-19865.txt", NCCL_19865)
    primary = findings.primary
    # THEN an OOM at start-up whose reason names NCCL's own buffers, not a death without a cause
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert primary.reason.startswith("NCCL could not allocate device memory for its own buffers")
    assert "the engine said it failed to start" in primary.reason
    assert "weights, cache and reserve" not in primary.reason
    assert not any("does not say why" in d for d in findings.trace.deaths)
    # AND the remedy leaves NCCL room outside the engine's share
    (first,) = _actions(findings)
    assert first.startswith("leave NCCL room on each GPU outside the engine's share")
    # AND the report explains NCCL's buffers, not the weights and the KV cache
    paragraph = build_verdict(findings.to_json()["incidents"][0], ()).paragraph
    assert paragraph.startswith("The engine could not start: NCCL's own buffers")
    assert "the model weights, the KV cache and the runtime reserve" not in paragraph


def test_nccls_warnings_alone_are_read_as_its_oom(tmp_path: Path) -> None:
    primary = _findings(tmp_path, "trtllm-1670.txt", NCCL_1670).primary
    assert primary is not None
    assert primary.reason.startswith("NCCL could not allocate device memory")


def test_cublas_and_the_nvml_assert_say_whose_allocation_failed(tmp_path: Path) -> None:
    cublas = _findings(tmp_path, "qwen-873.txt", CUBLAS_873).primary
    mig = _findings(tmp_path, "vllm-5107.txt", MIG_5107).primary
    assert cublas is not None
    assert cublas.reason.startswith("cuBLAS could not create its handle and workspace")
    # PyTorch's report of the OOM failing in NVML is the OOM itself, not an unknown format
    assert mig is not None
    assert mig.reason.startswith("an allocation failed for want of device memory")
    assert "MIG slice" in mig.reason


def test_a_containers_job_killed_with_exit_137_is_a_host_memory_death(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "scalellm-38.txt", KILLED_38)
    # THEN no GPU OOM, one death naming the container's memory first
    assert findings.incidents == ()
    (death,) = findings.trace.deaths
    assert "was killed" in death
    assert "not device memory" in death
    assert "shared memory" in death


# https://github.com/vllm-project/vllm/issues/8731: Qwen2.5-32B TP 4 with a 7B draft on 40 GB
# A100s; GPU 0's OOM lists three "processes" of consecutive ids, 1.62 GiB each: the engine's own
# other workers' contexts on GPU 0, not another tenant.
SIBLINGS_8731 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 72.00 MiB. GPU 0 has a total "
    "capacity of 39.56 GiB of which 60.81 MiB is free. Process 3179876 has 1.62 GiB memory in "
    "use. Process 3179877 has 1.62 GiB memory in use. Including non-PyTorch memory, this process "
    "has 34.61 GiB memory in use. Process 3179875 has 1.62 GiB memory in use. Of the allocated "
    "memory 28.75 GiB is allocated by PyTorch, with 28.60 MiB allocated in private pools (e.g., "
    "CUDA Graphs), and 384.74 MiB is reserved by PyTorch but unallocated.\n"
)
# https://github.com/huggingface/text-generation-inference/issues/655: TGI with --num-shard on
# the cudaMallocAsync allocator; memory grew with each request (the maintainers: fixed by the
# native allocator). Its six-line refusal, after the frame that asked.
ASYNC_655 = (
    "    value_layer = torch.cat((past_value, value_layer), dim=1)\n"
    "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of "
    "memory)\n"
    "Currently allocated     : 9.64 GiB\n"
    "Requested               : 1.49 MiB\n"
    "Device limit            : 39.39 GiB\n"
    "Free (according to CUDA): 3.06 MiB\n"
    "PyTorch limit (set by user-supplied memory fraction)\n"
    "                        : 39.39 GiB\n"
)
# https://github.com/ggml-org/llama.cpp/issues/13414: llama-server with Qwen2.5-VL on a 10 GB
# RTX 3080; a 3 MB image's projector buffer (4,514.05 MiB) right after "processing image".
IMAGE_13414 = (
    "srv  process_chun: processing image...\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4514.05 MiB on device 0: cudaMalloc "
    "failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 4733328896\n"
)


def test_other_processes_of_consecutive_ids_and_one_size_are_the_engines_workers(
    tmp_path: Path,
) -> None:
    findings = _findings(tmp_path, "vllm-8731.txt", SIBLINGS_8731)
    primary = findings.primary
    assert primary is not None
    assert "most likely the engine's own workers" in primary.reason
    # THEN no remedy moves them off the GPU: the engine's share leaves them room
    (first, *_) = _actions(findings)
    assert first.startswith("leave room on GPU 0 for the engine's own worker processes (4.86 GiB)")
    assert not any(a.startswith("move ") for a in _actions(findings))


def test_an_async_allocator_refusal_far_beyond_what_is_allocated_names_its_pool(
    tmp_path: Path,
) -> None:
    primary = _findings(tmp_path, "tgi-655.txt", ASYNC_655).primary
    assert primary is not None
    assert "29.75 GiB in use beyond the 9.64 GiB PyTorch had allocated" in primary.reason
    assert "PYTORCH_CUDA_ALLOC_CONF=backend:native" in primary.reason


def test_an_image_through_llama_cpps_encoder_gets_the_image_bound(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "lcpp-13414.txt", IMAGE_13414)
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "transient_peak"
    assert primary.reason.startswith("the encoding of a request's image or video")
    assert "4.41 GiB" in primary.reason
    (first, *_) = _actions(findings)
    assert "--image-max-tokens" in first
    assert "--no-mmproj-offload" in first


# https://github.com/noonghunna/club-3090/issues/32: `docker logs --tail 100` of a TP-2 engine
# under WSL2; the excerpt keeps only the engine core's end (the worker's OOM was cut off).
WORKER_INIT_32 = (
    "(EngineCore pid=51) ERROR 05-02 19:37:59 [core.py:1136]     raise e from None\n"
    "(EngineCore pid=51) ERROR 05-02 19:37:59 [core.py:1136] Exception: WorkerProc "
    "initialization failed due to an exception in a background process. See stack trace for "
    "root cause.\n"
    "(EngineCore pid=51) Traceback (most recent call last):\n"
)
# Docker Compose's exit line as ScaleLLM#38 shows it, after a vLLM start-up line under Compose's
# prefix as https://github.com/zai-org/GLM-4/issues/19 shows it (vLLM 0.4.2).
COMPOSE_137 = (
    "vllm_server_aiorder-vllm_server_aiorder-1  | INFO 06-05 14:36:55 llm_engine.py:103] "
    "Initializing an LLM engine (v0.4.2) with config: model='/aioder/llm_model', "
    "max_seq_len=131072, tensor_parallel_size=1\n"
    "vllm_server_aiorder-vllm_server_aiorder-1 exited with code 137\n"
)


def test_a_worker_that_failed_to_initialise_is_the_engines_death_at_start_up(
    tmp_path: Path,
) -> None:
    # GIVEN only the engine core's last words: nothing to analyse before, a death now
    findings = _findings(tmp_path, "club3090-32.txt", WORKER_INIT_32)
    (death,) = findings.trace.deaths
    assert "-05-02 19:37:59.000 UTC (EngineCore failed to start)" in death
    assert "the log does not say why" in death


def test_composes_exit_137_after_a_vllm_log_is_a_container_memory_death(tmp_path: Path) -> None:
    findings = _findings(tmp_path, "compose-137.log", COMPOSE_137)
    assert findings.incidents == ()
    (death,) = findings.trace.deaths
    assert "the container's main process was killed" in death
    assert "not device memory" in death


def test_replicas_of_another_model_are_not_the_engines_workers() -> None:
    # GIVEN the figures of vllm#8731's three contexts, and two other processes launched together
    # that each hold a model's weights (5 GiB, consecutive ids)
    def use(pid: int, gib: float) -> ProcessUse:
        return ProcessUse(pid, round(gib * 2**30), None, 0.0, "oom_event")

    contexts = [use(3179876, 1.62), use(3179877, 1.62), use(3179875, 1.62)]
    replicas = [use(4100, 5.0), use(4101, 5.0)]
    scattered = [use(3179876, 1.62), use(12, 1.62)]
    # THEN only the contexts read as the engine's own workers
    assert siblings(contexts) is not None
    assert siblings(replicas) is None
    assert siblings(scattered) is None
