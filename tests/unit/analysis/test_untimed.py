"""A trace none of whose inputs prints a time: a PyTorch OOM pasted into an issue form, a
launcher's last line, a traceback without its logger prefix. Nothing to align, nothing to
misjoin: the rows are analysed on their own, in their order, and no time is made up.

Each excerpt is rewritten from the public thread named beside it, in its real format (numbers,
pids and wording kept; prose and unrelated lines left out).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import dumps
from oomtrace.cli import cli
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.trace import Trace
from oomtrace.units import GiB, MiB

# awslabs/keys_values#92: litgpt's rank 0 fails in torch.cat; PyTorch lists the three other
# ranks' processes on GPU 0 before and after "this process".
LITGPT_RANK0 = (
    "```\n"
    '[rank0]:   File "/home/ubuntu/venv/lib/python3.12/site-packages/litgpt/lora.py", line 355, '
    "in conv1d\n"
    "[rank0]:     return torch.cat(\n"
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 572.00 MiB. GPU 0 has "
    "a total capacity of 39.49 GiB of which 321.31 MiB is free. Process 3721648 has {other} "
    "memory in use. Including non-PyTorch memory, this process has 37.46 GiB memory in use. "
    "Process 1374765 has {other} memory in use. Process 1374763 has {other} memory in use. "
    "Process 1374764 has {other} memory in use. Of the allocated memory 36.04 GiB is allocated "
    "by PyTorch, and 321.37 MiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n"
    "```\n"
)
# ROCm/legacy-rocm-build#4358's message as ROCm prints it, without InvokeAI's timed lines.
HIP_CONV = (
    '  File "/home/mcon/AMD/.venv/lib/python3.11/site-packages/torch/nn/modules/conv.py", line '
    "549, in _conv_forward\n"
    "    return F.conv2d(\n"
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.50 GiB. GPU 0 has a total "
    "capacity of 15.98 GiB of which 1.40 GiB is free. Of the allocated memory 1.26 GiB is "
    "allocated by PyTorch, and 152.50 MiB is reserved by PyTorch but unallocated. If reserved "
    "but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.\n"
)
# pytorch/pytorch#175431: a HIP OOM of 2 MiB on an MI300X GPU with 203 GiB free.
HIP_PLENTY = (
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 MiB. GPU 7 has a total "
    "capacity of 287.98 GiB of which 203.49 GiB is free. Of the allocated memory 68.63 GiB is "
    "allocated by PyTorch, and 14.93 GiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.\n"
)
# huggingface/text-generation-inference#755: the thread's title is the launcher's last line.
TGI_WARMUP = (
    'Lllama 70B chat GPTQ fails with `Error: Warmup(Generation("Not enough memory to handle 4096 '
    'prefill tokens. You need to decrease `--max-batch-prefill-tokens`"))`\n'
)
# sgl-project/sglang#26265: the scheduler's traceback pasted with only [TP0] left, cut inside
# the KV allocator.
SGLANG_DEATH = (
    "```\n"
    "[TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File ".../sglang/srt/managers/scheduler.py", line 4546, in run_scheduler_process\n'
    "    scheduler.run_event_loop()\n"
    '  File ".../sglang/srt/mem_cache/common.py", line 412, in alloc_paged_token_slots_extend\n'
    "    raise RuntimeError(error_m\n"
)

# ollama/ollama#6860: llama.cpp creating its context (LangChain's LlamaCpp): the KV cache stated,
# then the compute buffer's cudaMalloc failing on device 4.
LLAMA_CONTEXT = (
    "llama_new_context_with_model: KV self size  = 5120.00 MiB, K (f16): 2560.00 MiB, V (f16): "
    "2560.00 MiB\n"
    "llama_new_context_with_model:  CUDA_Host  output buffer size =     0.49 MiB\n"
    "llama_new_context_with_model: pipeline parallelism enabled (n_copies=4)\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc "
    "failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate CUDA4 buffer of size 150995968\n"
    "llama_new_context_with_model: failed to allocate compute buffers\n"
)
# ggml-org/llama.cpp#20431: loading the weights, one 141 GiB buffer refused; no start-up figure
# before it, no free memory stated.
LLAMA_LOAD = (
    "load_tensors: loading model tensors, this can take a while... (mmap = true, direct_io = "
    "false)\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc "
    "failed: out of memory\n"
    "alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624\n"
)


def ingest(tmp_path: Path, name: str, text: str) -> Trace:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_any([path], IngestOptions())


def test_a_pasted_oom_is_analysed_in_its_order_without_a_time(tmp_path: Path) -> None:
    # GIVEN rank 0's OOM as pasted into the thread: no time anywhere
    trace = ingest(tmp_path, "rank0.txt", LITGPT_RANK0.format(other="414.00 MiB"))
    assert trace.events["ts"].null_count() == trace.events.height == 1
    # WHEN analysed
    findings = analyze(trace)
    # THEN the OOM is judged by its own figures: the device full, the allocation larger than
    # what was free the last straw; the three others' 414 MiB each listed but too small to be
    # the cause
    incident = findings.primary
    assert incident is not None
    assert incident.cls == "transient_peak"
    assert incident.reason.startswith(
        "the device was full: 39.18 GiB of 39.49 GiB in use (36.04 GiB allocated by PyTorch), "
        "321.31 MiB free; a temporary allocation of 572.00 MiB did not fit"
    )
    assert sorted(p.pid for p in incident.processes) == [1374763, 1374764, 1374765, 3721648]
    assert {p.bytes for p in incident.processes} == {414 * MiB}
    assert incident.capacity_bytes == round(39.49 * GiB)
    # no time is made up: the times are null and a note says why and where the row stands
    assert (incident.start, incident.peak_ts, incident.window_start) == (None, None, None)
    assert incident.time_note == (
        "no time (the input prints none); its row is 1 of 1 in the log's order"
    )
    assert findings.trace.start is None
    assert findings.trace.end is None


def test_other_processes_in_the_message_holding_the_shortfall_are_foreign_memory(
    tmp_path: Path,
) -> None:
    # GIVEN the same message where the other ranks each hold 9 GiB on GPU 0 (every rank's model
    # on cuda:0: the thread asks why the other GPUs hold 35 GB)
    trace = ingest(tmp_path, "rank0.txt", LITGPT_RANK0.format(other="9.00 GiB"))
    # WHEN analysed
    incident = analyze(trace).primary
    # THEN the others are the cause, named with their pids and figures
    assert incident is not None
    assert incident.cls == "foreign_memory"
    assert incident.reason.startswith("at the OOM other processes held 36.00 GiB (process ")
    assert "the allocation lacked 250.69 MiB, which they held" in incident.reason
    check = next(c for c in incident.checks if c.cls == "foreign_memory")
    assert check.figure("foreign_bytes") == 36 * GiB


def test_a_hip_oom_without_its_jobs_log_blames_the_memory_outside_pytorch(
    tmp_path: Path,
) -> None:
    # GIVEN InvokeAI's conv2d OOM (ROCm), pasted alone: ROCm's message lists no process
    incident = analyze(ingest(tmp_path, "invokeai.txt", HIP_CONV)).primary
    # THEN what a reader takes from it: most of the device in use outside PyTorch's 1.41 GiB,
    # and the 4.50 GiB would have fit in it
    assert incident is not None
    assert incident.cls == "foreign_memory"
    assert incident.reason.startswith(
        "13.17 GiB of the 15.98 GiB device was held outside this process's PyTorch allocator"
    )
    # the allocation's own reading is kept among the checks
    transient = next(c for c in incident.checks if c.cls == "transient_peak")
    assert transient.reason == (
        "a single allocation of 4.50 GiB asked for more than the 1.40 GiB free of 15.98 GiB "
        "(1.26 GiB allocated by PyTorch); 13.17 GiB in use outside PyTorch's allocator (other "
        "processes or memory PyTorch does not count)"
    )


def test_an_oom_with_plenty_free_is_not_a_shortage(tmp_path: Path) -> None:
    # GIVEN a 2 MiB HIP allocation refused with 203 GiB free
    incident = analyze(ingest(tmp_path, "mi300x.txt", HIP_PLENTY)).primary
    # THEN neither fragmentation nor a peak: the device had the memory
    assert incident is not None
    assert incident.cls == "unknown"
    assert incident.reason.startswith(
        "the device had 203.49 GiB free, more than the 2.00 MiB asked: the failure was not for "
        "lack of device memory"
    )


def test_a_warm_up_refusal_alone_is_a_startup_misfit(tmp_path: Path) -> None:
    findings = analyze(ingest(tmp_path, "tgi.txt", TGI_WARMUP))
    incident = findings.primary
    assert incident is not None
    assert (incident.cls, incident.anchor) == ("startup_misfit", "startup")
    assert "4096 prefill tokens" in incident.reason


def test_a_cuda_malloc_failure_after_the_kv_cache_was_sized_is_a_startup_misfit(
    tmp_path: Path,
) -> None:
    # GIVEN llama.cpp's context creation: its KV cache stated, then the compute buffer refused
    incident = analyze(ingest(tmp_path, "llama.txt", LLAMA_CONTEXT)).primary
    # THEN start-up, in the words of the line after the failure (llama_new_context_with_model:
    # failed to allocate compute buffers), with the size
    assert incident is not None
    assert (incident.cls, incident.device) == ("startup_misfit", 4)
    assert incident.reason.startswith(
        "the reservation of the compute buffers at start-up needed 144.00 MiB"
    )


def test_the_weights_refused_while_loading_are_a_startup_misfit(tmp_path: Path) -> None:
    # GIVEN llama.cpp's weights refused: load_tensors before the failure, alloc_tensor_range
    # after it (llama.cpp issue 20431), no free memory stated
    incident = analyze(ingest(tmp_path, "llama.txt", LLAMA_LOAD)).primary
    # THEN the phase those lines state makes it a start-up misfit, said with the figures
    assert incident is not None
    assert (incident.cls, incident.device) == ("startup_misfit", 0)
    assert incident.reason == (
        "the model's weights did not fit device 0: loading them asked for 141.42 GiB"
    )


def test_a_failure_stating_only_its_size_leads_with_it(tmp_path: Path) -> None:
    # GIVEN llama.cpp's failed cudaMalloc alone: no free memory, no line around it
    incident = analyze(ingest(tmp_path, "llama.txt", LLAMA_LOAD.splitlines()[1] + "\n")).primary
    # THEN no class is claimed without evidence, and the reason says first what the failure
    # states
    assert incident is not None
    assert incident.cls == "unknown"
    assert incident.reason.startswith(
        "an allocation of 141.42 GiB failed; the message states no free memory to compare it "
        "with; no class fits: foreign_memory: "
    )


def test_a_death_without_a_time_or_a_cause_is_said_so(tmp_path: Path) -> None:
    # GIVEN SGLang's scheduler exception with no time and its cause cut
    findings = analyze(ingest(tmp_path, "sglang.txt", SGLANG_DEATH))
    # THEN no incident, but the death is stated with its place in the log, not a time
    assert findings.incidents == ()
    (death,) = findings.trace.deaths
    assert death.startswith("the engine on sglang died (no time: the input prints none;")
    assert death.endswith(
        "the log does not say why (the lines before the death are not in the trace)"
    )


def test_the_json_and_the_summary_say_there_is_no_time(tmp_path: Path) -> None:
    # GIVEN the pasted OOM
    path = tmp_path / "rank0.txt"
    path.write_text(LITGPT_RANK0.format(other="414.00 MiB"), encoding="utf-8")
    # WHEN analysed on the command line, as JSON and as text
    as_json = CliRunner().invoke(cli, ["analyze", "--json", str(path)])
    as_text = CliRunner().invoke(cli, ["analyze", str(path)])
    # THEN the JSON has null times and says why; the text says "no time", never 1970
    assert as_json.exit_code == as_text.exit_code == 0
    document = json.loads(as_json.output)
    (incident,) = document["incidents"]
    assert incident["peak_ts"] is None
    assert incident["start"] is None
    assert incident["time_note"].startswith("no time (the input prints none)")
    assert document["trace"]["start"] is None
    assert document["trace"]["time_note"].startswith("no time (the input prints none)")
    assert "1970" not in as_json.output
    assert "1970" not in as_text.output
    assert "PRIMARY  transient_peak at no time (the input prints none)" in as_text.output
    assert "analysed on their own, in the log's order" in as_text.output
    # the findings document of the library says the same
    assert json.loads(dumps(analyze(load_any([path], IngestOptions()))))["incidents"]


def test_an_untimed_paste_beside_a_timed_input_stays_set_aside(tmp_path: Path) -> None:
    # GIVEN the pasted OOM and an nvidia-smi CSV of another moment (nothing anchors the paste)
    paste = tmp_path / "rank0.txt"
    paste.write_text(LITGPT_RANK0.format(other="414.00 MiB"), encoding="utf-8")
    csv = tmp_path / "gpu.csv"
    csv.write_text(
        "timestamp, index, memory.used [MiB], memory.total [MiB]\n"
        "2025/03/07 21:49:30.000, 0, 20000 MiB, 40960 MiB\n"
        "2025/03/07 21:49:31.000, 0, 20010 MiB, 40960 MiB\n",
        encoding="utf-8",
    )
    findings = analyze(load_any([paste, csv], IngestOptions()))
    # THEN today's behaviour: the paste's OOM is not placed, and the warning says so
    assert findings.incidents == ()
    assert findings.trace.time_note is None
    untimed = [g for g in findings.gaps if g.kind == "untimed"]
    assert untimed
    assert "left out of the timeline" in untimed[0].detail


def test_the_report_says_there_is_no_time(tmp_path: Path) -> None:
    # GIVEN the pasted OOM, reported as JSON
    path = tmp_path / "rank0.txt"
    path.write_text(LITGPT_RANK0.format(other="414.00 MiB"), encoding="utf-8")
    result = CliRunner().invoke(cli, ["report", "--format", "json", str(path)])
    assert result.exit_code == 0
    report = json.loads(result.output)
    # THEN its alert says the rows were read on their own, and the verdict shows why it has
    # no time beside the missing ones
    (alert,) = report["alerts"]
    assert "analysed on their own, in the log's order" in alert
    figures = report["verdict"]["figures"]
    assert figures.get("peak_ts") is None
    assert str(figures["time_note"]).startswith("no time (the input prints none)")
    assert "1970" not in result.output


def test_a_preemption_warning_pasted_alone_is_kv_pressure_without_a_time() -> None:
    # GIVEN vLLM V0's preemption warning pasted without its prefix (GAIR-NLP/LIMO#29; the
    # fixture the vLLM parser's tests read)
    data = Path(__file__).resolve().parents[2] / "data" / "vllm" / "bare_preemption_v0.txt"
    trace = load_any([data], IngestOptions())
    # THEN every row is without a time (the request's too), and the analysis reads it as KV
    # pressure, anchored on the preemption, with no time made up
    assert trace.requests["ts"].null_count() == trace.requests.height
    findings = analyze(trace)
    incident = findings.primary
    assert incident is not None
    assert (incident.cls, incident.anchor, incident.peak_ts) == (
        "kv_exhaustion",
        "preemption",
        None,
    )
    assert incident.reason.startswith("the KV pool ran out: 1 preemption or retraction of running")


def test_a_free_memory_refusal_pasted_alone_is_foreign_memory_at_start_up(
    tmp_path: Path,
) -> None:
    # GIVEN vLLM's refusal as a CI log quoted it (pytorch/pytorch#175666), without vLLM's prefix
    trace = ingest(
        tmp_path,
        "ci.txt",
        "(EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on "
        "startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU "
        "memory utilization or reduce GPU memory used by other processes.\n",
    )
    incident = analyze(trace).primary
    # THEN what was in use when the engine started is others': they held what it lacked
    assert incident is not None
    assert (incident.cls, incident.anchor) == ("foreign_memory", "startup")
    assert incident.reason.startswith("at start-up other processes held 2.28 GiB")
    assert "the start-up lacked 71.68 MiB, which they held" in incident.reason
