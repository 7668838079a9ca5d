"""Excerpts cut around their failure, as people paste them into issue threads: "no request in
the trace" is not "before any request arrived"; retractions without a KV series are KV pressure;
a dead engine is never "no incident".

Each excerpt is rewritten from the public thread named beside it, in its real format (times,
numbers, pids and wording kept; long traceback frames and the request's parameters shortened).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from oomtrace.analysis import analyze
from oomtrace.cli import cli
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.trace import Trace

# noonghunna/club-3090#16: the engine core's OOM, then the API server's output handler failing
# (it runs only once the engine serves).
VLLM_SERVING_OOM = (
    "(EngineCore pid=112) ERROR 05-01 14:39:06 [core.py:1131] torch.OutOfMemoryError: CUDA out "
    "of memory. Tried to allocate 50.00 MiB. GPU 0 has a total capacity of 23.56 GiB of which "
    "21.75 MiB is free. Including non-PyTorch memory, this process has 23.50 GiB memory in use. "
    "Of the allocated memory 22.88 GiB is allocated by PyTorch, with 24.00 MiB allocated in "
    "private pools (e.g., CUDA Graphs), and 275.38 MiB is reserved by PyTorch but unallocated. "
    "If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    "(APIServer pid=1) ERROR 05-01 14:39:06 [async_llm.py:699] AsyncLLM output_handler failed.\n"
    "(APIServer pid=1) ERROR 05-01 14:39:06 [async_llm.py:699] Traceback (most recent call "
    "last):\n"
)
# huggingface/text-generation-inference#1374: a request span, then the OOM 11 s later inside
# the prefill of a batch, under docker compose's prefix.
PREFIX = "chat_inference-text_generation_inference-1  | "
TGI_PREFILL_OOM = (
    f"{PREFIX}2023-12-22T00:21:24.202169Z  INFO compat_generate{{default_return_full_text=true}}"
    ":generate{parameters=GenerateParameters { best_of: None, max_new_tokens: Some(40) } "
    'total_time="2.458150804s" validation_time="13.678487ms" queue_time="184.26µs" '
    'inference_time="2.444288229s"}: text_generation_router::server: router/src/server.rs:298: '
    "Success\n"
    f"{PREFIX}2023-12-22T00:21:35.318928Z ERROR batch{{batch_size=1}}:prefill:prefill{{id=1 "
    "size=1}:prefill{id=1 size=1}: text_generation_client: router/client/src/lib.rs:33: Server "
    "error: CUDA out of memory. Tried to allocate 222.00 MiB. GPU 0 has a total capacty of 39.39 "
    "GiB of which 217.94 MiB is free. Process 862944 has 39.17 GiB memory in use. Of the "
    "allocated memory 37.10 GiB is allocated by PyTorch, and 1.57 GiB is reserved by PyTorch "
    "but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb "
    "to avoid fragmentation.  See documentation for Memory Management and "
    "PYTORCH_CUDA_ALLOC_CONF\n"
)
# ROCm/legacy-rocm-build#4358: InvokeAI's SDXL job, its OOM in conv2d after a 422 s denoise.
INVOKEAI = (
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.50 GiB. GPU 0 has a total "
    "capacity of 15.98 GiB of which 1.40 GiB is free. Of the allocated memory 1.26 GiB is "
    "allocated by PyTorch, and 152.50 MiB is reserved by PyTorch but unallocated. If reserved "
    "but unallocated memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.\n"
    "\n"
    "[2025-02-10 21:49:50,346]::[InvokeAI]::INFO --> Graph stats: "
    "18f998d3-635e-40cf-add0-eb500c4af8e3\n"
    "                          Node   Calls   Seconds  VRAM Used\n"
    "               denoise_latents       1  422.129s     1.012G\n"
)
# huggingface/text-generation-inference#563: the launcher's panic at the warm-up.
TGI_WARMUP_PANIC = (
    "thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would "
    "exceed allowed memory. (out of memory)\\nCurrently allocated     : 16.08 GiB\\nRequested    "
    "           : 4.83 GiB\\nDevice limit            : 22.20 GiB\\nFree (according to CUDA): "
    "11.12 MiB\\nPyTorch limit (set by user-supplied memory fraction)\\n                        : "
    "22.20 GiB\")', router/src/main.rs:216:18\n"
    "2023-07-07T17:55:43.805488Z ERROR text_generation_launcher: Webserver Crashed\n"
    "2023-07-07T17:55:43.805514Z  INFO text_generation_launcher: Shutting down shards\n"
)
# sgl-project/sglang#4184: the second node's ranks (TP8-15) retracting a request each, three
# times; no KV usage line in the excerpt.
RANKS = (13, 12, 10, 9, 11, 8, 14, 15)
SGLANG_RETRACTIONS = "".join(
    f"[2025-03-07 {at} TP{rank}] Decode out of memory happened. #retracted_reqs: 1, "
    f"#new_token_ratio: {ratio}\n"
    for at, ratio in (
        ("21:49:33", "0.1474 -> 0.1845"),
        ("21:49:45", "0.0980 -> 0.1919"),
        ("21:49:51", "0.1207 -> 0.1929"),
    )
    for rank in RANKS
)
# noonghunna/club-3090#58: EngineDeadError from the API server, the engine core's traceback cut
# before its cause.
VLLM_DEAD = (
    "(APIServer pid=1) ERROR 05-05 12:36:59 [serving.py:1173] "
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
    "(above) for the root cause.\n"
    "(EngineCore pid=104) Process EngineCore:\n"
    "(EngineCore pid=104) Traceback (most recent call last):\n"
    '(EngineCore pid=104)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py"'
    ", line 1129, in run_engine_core\n"
    "(EngineCore pid=104)     engine_core.run_busy_loop()\n"
)


def ingest(tmp_path: Path, name: str, text: str) -> Trace:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_any([path], IngestOptions(year=2026))


def _startup_check(trace: Trace) -> tuple[str, str]:
    incident = analyze(trace).primary
    assert incident is not None
    check = next(c for c in incident.checks if c.cls == "startup_misfit")
    assert not check.matched
    return incident.cls, check.reason


def test_an_oom_cut_out_of_a_serving_engine_is_not_a_startup_misfit(tmp_path: Path) -> None:
    # GIVEN six lines: the OOM and the output handler failing, no request line (cut, not idle)
    cls, why = _startup_check(ingest(tmp_path, "club16.log", VLLM_SERVING_OOM))
    # THEN the phase is unknown, and the OOM is judged by its own figures
    assert why.startswith("phase unknown: the trace shows neither a request served nor the engine")
    assert cls == "transient_peak"


def test_an_oom_in_a_prefill_batch_is_not_a_startup_misfit(tmp_path: Path) -> None:
    # GIVEN TGI's request span, then its OOM in a batch's prefill (TGI's spans give no requests)
    incident = analyze(ingest(tmp_path, "tgi.log", TGI_PREFILL_OOM)).primary
    assert incident is not None
    # THEN not start-up: 1.57 GiB held unallocated against a 222 MiB allocation
    assert incident.cls == "fragmentation"
    check = next(c for c in incident.checks if c.cls == "startup_misfit")
    assert check.reason.startswith("phase unknown")


def test_a_job_that_is_no_server_is_not_a_misfit(tmp_path: Path) -> None:
    incident = analyze(ingest(tmp_path, "invokeai.log", INVOKEAI)).primary
    assert incident is not None
    # the 13.17 GiB held outside PyTorch's 1.41 GiB (the message names no process) comes first;
    # the start-up check, asked too, finds no start-up
    assert incident.cls == "foreign_memory"
    assert incident.reason.startswith(
        "13.17 GiB of the 15.98 GiB device was held outside this process's PyTorch allocator"
    )
    startup = next(c for c in incident.checks if c.cls == "startup_misfit")
    assert not startup.matched


def test_the_warm_up_panic_is_positive_evidence_of_start_up(tmp_path: Path) -> None:
    incident = analyze(ingest(tmp_path, "tgi563.log", TGI_WARMUP_PANIC)).primary
    assert incident is not None
    assert incident.cls == "startup_misfit"
    # the launcher's "Unable to warmup model" names the phase, and the reason the figures
    assert incident.reason.startswith(
        "the warm-up before serving needed 4.83 GiB, 11.12 MiB free of 22.20 GiB"
    )


def test_retractions_on_tp_ranks_without_a_kv_series_are_kv_exhaustion(tmp_path: Path) -> None:
    # GIVEN three retraction moments, each printed by eight ranks
    trace = ingest(tmp_path, "sglang.log", SGLANG_RETRACTIONS)
    findings = analyze(trace)
    # THEN one KV exhaustion, its retractions counted once across the ranks
    (incident,) = findings.incidents
    assert (incident.cls, incident.anchor) == ("kv_exhaustion", "preemption")
    assert incident.reason.startswith("3 preemptions (preemptions or retractions)")
    assert incident.peak_ts is not None
    assert f"{incident.peak_ts:%H:%M:%S}" == "21:49:51"


def test_an_engine_death_without_an_oom_is_stated_with_its_time(tmp_path: Path) -> None:
    # GIVEN EngineDeadError with its cause cut off
    path = tmp_path / "club58.log"
    path.write_text(VLLM_DEAD, encoding="utf-8")
    findings = analyze(load_any([path], IngestOptions(year=2026)))
    # THEN no incident, but the death and that the log does not say why
    assert findings.incidents == ()
    (death,) = findings.trace.deaths
    assert death.startswith("the engine on club58 died at 2026-05-05 12:36:59.000 UTC")
    assert "the log does not say why" in death
    # and the command line says so instead of "No incident", in the text and the JSON
    text = CliRunner().invoke(cli, ["analyze", "--year", "2026", str(path)]).output
    assert "No incident" not in text
    assert "but the engine died:" in text
    assert "DEATH    the engine on club58 died at 2026-05-05 12:36:59.000 UTC" in text
    document = json.loads(
        CliRunner().invoke(cli, ["analyze", "--json", "--year", "2026", str(path)]).output
    )
    assert document["trace"]["deaths"] == [death]


def test_a_death_explained_by_its_oom_is_not_listed_again(tmp_path: Path) -> None:
    # GIVEN TGI's warm-up panic: the OOM, then "Webserver Crashed"
    findings = analyze(ingest(tmp_path, "tgi563.log", TGI_WARMUP_PANIC))
    # THEN the death is the incident's end, not a death of its own
    assert len(findings.incidents) == 1
    assert findings.trace.deaths == ()


def test_retractions_going_on_for_minutes_are_one_incident_at_their_start(tmp_path: Path) -> None:
    # GIVEN the same retraction line every 20 s for five minutes (a pool that stays full)
    lines = "".join(
        f"[2025-03-07 21:{50 + k // 3:02d}:{k % 3 * 20:02d} TP0] Decode out of memory happened. "
        "#retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919\n"
        for k in range(15)
    )
    findings = analyze(ingest(tmp_path, "sglang.log", lines))
    # THEN one incident, at the last retraction of its first minute: when the pool ran out
    (incident,) = findings.incidents
    assert incident.cls == "kv_exhaustion"
    assert incident.peak_ts is not None
    assert f"{incident.peak_ts:%H:%M:%S}" == "21:51:00"


def test_an_engine_death_beside_an_xid_is_told_as_a_gpu_fault(tmp_path: Path) -> None:
    # GIVEN the death above, and the host's kernel log (journalctl -k, the host's zone given)
    # with the driver's Xid 79 four seconds before it (the line as NVIDIA's driver prints it)
    node = tmp_path / "club58"
    node.mkdir()
    (node / "vllm.log").write_text(VLLM_DEAD, encoding="utf-8")
    (node / "kernel.log").write_text(
        "May 05 12:36:55 box kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=104, name=python3, "
        "GPU has fallen off the bus.\n",
        encoding="utf-8",
    )
    findings = analyze(load_any([node], IngestOptions(year=2026, tz="UTC")))
    # THEN the fault is the incident, and the death is told as its consequence, not as a death
    # the log does not explain
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "gpu_fault"
    assert primary.reason.startswith("the driver reported Xid 79 on the GPU at 0000:01:00")
    assert "not a lack of memory" in primary.reason
    assert "the engine died 4 s after it" in primary.reason
    assert findings.trace.deaths == ()
