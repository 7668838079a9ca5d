"""Incidents in the shapes production servers leave behind, read from their own text: the
mistakes of reasoning issue 13 lists, each on the files that provoke it.

The log lines are rewritten from public reports (the numbers, ids and structure kept): vLLM's V1
stats line and request lines (``vllm/v1/metrics/loggers.py``, ``vllm/entrypoints/logger.py``),
PyTorch's OOM message listing every process on the device (``c10/cuda/CUDACachingAllocator.cpp``
from 2.1; e.g. vllm-project/vllm#34643, a ``prompt_logprobs`` step beside two orphaned 248 MiB
processes). Each test states the conclusion an on-call engineer would draw from the same lines.
"""

from __future__ import annotations

from pathlib import Path

from oomtrace.analysis import AnalyzeOptions, analyze
from oomtrace.analysis.step_bytes import model_dims
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.trace import Trace

ROOT = Path(__file__).resolve().parents[3]
QWEN = ROOT / "tests" / "data" / "configs" / "qwen2.5-7b-instruct"
API, CORE = "(APIServer pid=1)", "(EngineCore_DP0 pid=211)"


def ingest(tmp_path: Path, *lines: str) -> Trace:
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return load_any([log], IngestOptions(year=2025))


def startup(day: str = "05-14", at: str = "09:00:01", utilisation: float = 0.9) -> list[str]:
    """A vLLM 0.11 V1 server coming up: its version, settings and KV cache statements."""
    return [
        f"{API} INFO {day} {at} [api_server.py:1839] vLLM API server version 0.11.0",
        (
            f"{API} INFO {day} {at} [utils.py:233] non-default args: {{'model': "
            f"'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': "
            f"{utilisation}}}"
        ),
        (
            f"{CORE} INFO {day} {at} [gpu_model_runner.py:2602] Model loading took 14.2488 GiB and "
            "6.812093 seconds"
        ),
        f"{CORE} INFO {day} {at} [gpu_worker.py:298] Available KV cache memory: 4.25 GiB",
        f"{CORE} INFO {day} {at} [kv_cache_utils.py:1087] GPU KV cache size: 79,584 tokens",
        (
            f"{CORE} INFO {day} {at} [kv_cache_utils.py:1091] Maximum concurrency for 32,768 "
            "tokens per request: 2.43x"
        ),
    ]


def stats(at: str, running: int, usage: float, day: str = "05-14") -> str:
    prompt, generation = (2210.3, 610.5) if running else (0.0, 0.0)
    return (
        f"{API} INFO {day} {at} [loggers.py:123] Engine 000: Avg prompt throughput: {prompt} "
        f"tokens/s, Avg generation throughput: {generation} tokens/s, Running: {running} reqs, "
        f"Waiting: 0 reqs, GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 12.1%"
    )


def failed(at: str, rid: str) -> str:
    """What the API server prints for a request in flight when the engine core dies."""
    return f"{API} INFO 05-14 {at} [async_llm.py:406] Request {rid} failed (engine dead)."


def oom(at: str, clauses: str, day: str = "05-14") -> str:
    """The engine core's OOM as vLLM V1 logs it, with PyTorch's per-process clauses."""
    return (
        f"{CORE} ERROR {day} {at} [core.py:710] torch.OutOfMemoryError: CUDA out of memory. "
        f"Tried to allocate 1.71 GiB. GPU 0 has a total capacity of 22.30 GiB of which 1.52 GiB "
        f"is free. {clauses}Of the allocated memory 19.55 GiB is allocated by PyTorch, and "
        "244.94 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory "
        "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation."
    )


def received(at: str, rid: str, prompt: int, *, prompt_logprobs: int | None = None) -> str:
    """vLLM 0.11's request line (params after the prompt, token ids counted, never kept)."""
    ids = ", ".join(str(1000 + k % 9000) for k in range(prompt))
    return (
        f"{API} INFO 05-14 {at} [logger.py:41] Received request {rid}: prompt: None, params: "
        "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0,"
        " temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[],"
        " bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens=1, "
        f"min_tokens=0, logprobs=None, prompt_logprobs={prompt_logprobs}, "
        "skip_special_tokens=True, spaces_between_special_tokens=True, truncate_prompt_tokens="
        f"None, guided_decoding=None, extra_args=None), prompt_token_ids: [{ids}], "
        "prompt_embeds shape: None, lora_request: None."
    )


# 1. "The OOM came before any request arrived" is not concluded from the request table alone.


def test_a_server_logging_no_requests_that_was_serving_is_not_a_startup_misfit(
    tmp_path: Path,
) -> None:
    # GIVEN vLLM's default since 0.11 (no request lines) and stats lines showing 23 running
    trace = ingest(
        tmp_path,
        *startup(),
        stats("09:01:00", 23, 38.0),
        stats("09:01:10", 27, 41.0),
        oom("09:01:17", "Including non-PyTorch memory, this process has 20.77 GiB memory in use. "),
    )
    # WHEN it is analysed
    incident = analyze(trace).primary
    # THEN it is not a start-up misfit: the engine was serving, and the check says so
    assert incident is not None
    assert trace.requests.is_empty()
    assert incident.cls != "startup_misfit"
    check = next(c for c in incident.checks if c.cls == "startup_misfit")
    assert check.reason.startswith("the engine started and served before the peak (")
    assert "at 09:01:00" in check.reason
    (row,) = check.evidence
    assert row.table == "samples"
    assert row.source == "vllm-log:vllm.log"


def test_an_oom_before_anything_was_served_is_a_startup_misfit(tmp_path: Path) -> None:
    # GIVEN the same engine, idle in its stats lines, failing before any request
    trace = ingest(
        tmp_path,
        *startup(),
        stats("09:01:00", 0, 0.0),
        oom("09:01:17", "Including non-PyTorch memory, this process has 20.77 GiB memory in use. "),
    )
    incident = analyze(trace).primary
    assert incident is not None
    assert incident.cls == "startup_misfit"
    assert "before the engine served anything" in incident.reason


# 2. Foreign memory is seen when the evidence is the OOM message itself.


def test_another_process_named_only_in_the_oom_message_is_foreign_memory(tmp_path: Path) -> None:
    # GIVEN the message lists two processes: the engine (its clause has the size "this process"
    # has) and another one holding 6.02 GiB; no nvidia-smi file at all
    trace = ingest(
        tmp_path,
        *startup(utilisation=0.7),
        stats("09:01:00", 4, 12.0),
        oom(
            "09:01:17",
            "Process 3811 has 6.02 GiB memory in use. Process 3790 has 14.75 GiB memory in use. "
            "Including non-PyTorch memory, this process has 14.75 GiB memory in use. ",
        ),
    )
    findings = analyze(trace)
    incident = findings.primary
    # THEN the other process is the cause and the remedy names it
    assert incident is not None
    assert incident.cls == "foreign_memory"
    assert [p.pid for p in incident.processes] == [3811]
    assert incident.processes[0].bytes == round(6.02 * 2**30)
    assert "the failed allocation lacked 194.56 MiB" in incident.reason
    assert findings.remedies[0].action == "move process 3811 off GPU 0"
    assert findings.remedies[0].basis == "process"


def test_the_process_the_oom_message_names_as_failing_is_never_foreign(tmp_path: Path) -> None:
    # GIVEN an engine in a container: its lines say pid=211, the message lists host pids only and
    # no "this process" clause; 3790 holds PyTorch's reserve (19.79 GiB), so it is the one that
    # failed, and 3811 is an orphan of 248 MiB
    trace = ingest(
        tmp_path,
        *startup(),
        stats("09:01:00", 4, 12.0),
        oom(
            "09:01:17",
            "Process 3790 has 20.28 GiB memory in use. Process 3811 has 248.00 MiB memory in use. ",
        ),
    )
    findings = analyze(trace)
    incident = findings.primary
    # THEN 3790 is the engine: not another process, not the cause, not a process to move
    assert incident is not None
    assert incident.cls != "foreign_memory"
    assert [p.pid for p in incident.processes] == [3811]
    assert not any("3790" in r.action for r in findings.remedies)


def test_tgis_shard_listed_by_its_host_pid_is_the_engine() -> None:
    # GIVEN TGI's warm-up OOM (tests/data/torch/tgi.log): "Process 402 has 22.61 GiB memory in
    # use" is the only clause, and it holds PyTorch's 21.90 GiB + 262.51 MiB: the shard itself
    trace = load_any([ROOT / "tests" / "data" / "torch" / "tgi.log"], IngestOptions())
    findings = analyze(trace)
    # THEN one incident (the router's refusal 85 ms later reports the same OOM), and no incident
    # calls the shard foreign or lists it among other processes
    assert len(findings.incidents) == 1
    for incident in findings.incidents:
        assert incident.cls != "foreign_memory"
        assert 402 not in [p.pid for p in incident.processes]
    assert not any("402" in r.action for r in findings.remedies)


def test_small_processes_beside_a_prompt_logprobs_step_are_not_the_cause(tmp_path: Path) -> None:
    # GIVEN vllm#34643's shape: two orphaned 248 MiB processes and the engine (20.28 GiB), and a
    # 1.71 GiB allocation for the log-softmax of prompt logprobs
    trace = ingest(
        tmp_path,
        *startup(),
        stats("09:01:00", 3, 30.0),
        received("09:01:15", "cmpl-score-0", 2_900, prompt_logprobs=1),
        oom(
            "09:01:17",
            "Process 29153 has 248.00 MiB memory in use. Process 162529 has 248.00 MiB memory in "
            "use. Process 162519 has 20.28 GiB memory in use. ",
        ),
        failed("09:01:18", "cmpl-score-0"),
    )
    incident = analyze(trace).primary
    # THEN 496 MiB of others, below what the engine left for them, are not the cause
    assert incident is not None
    assert incident.cls == "transient_peak", incident.reason
    assert {p.pid for p in incident.processes} == {29153, 162529}
    foreign = next(c for c in incident.checks if c.cls == "foreign_memory")
    assert not foreign.matched


# 6. Transient peaks are ranked by the memory their step needs, not by prompt length alone.


def _two_prompts(tmp_path: Path) -> Trace:
    return ingest(
        tmp_path,
        *startup(),
        stats("09:01:00", 2, 20.0),
        received("09:01:15", "cmpl-long-0", 7_000),
        received("09:01:16", "cmpl-score-0", 2_600, prompt_logprobs=5),
        oom("09:01:17", "Including non-PyTorch memory, this process has 20.77 GiB memory in use. "),
        failed("09:01:18", "cmpl-long-0"),
        failed("09:01:18", "cmpl-score-0"),
    )


def test_a_prompt_logprobs_request_outweighs_a_longer_plain_prompt(tmp_path: Path) -> None:
    # GIVEN a 7,000-token prompt and a 2,600-token one asking for prompt logprobs, both in
    # prefill when a 1.71 GiB allocation failed, and the model's config (vocabulary 152,064)
    trace = _two_prompts(tmp_path)
    findings = analyze(trace, AnalyzeOptions(model_dims=model_dims(QWEN)))
    incident = findings.primary
    assert incident is not None
    assert incident.cls == "transient_peak"
    # THEN the shorter prompt ranks first: its logits over the vocabulary outweigh the other's
    first, second = incident.culprits[:2]
    assert (first.request_id, second.request_id) == ("cmpl-score-0", "cmpl-long-0")
    assert first.step_parameter == "prompt_logprobs"
    # 2,600 x (2 x 18,944 x 2 B) of MLP activations + 2,600 x 152,064 x (2 + 4) B of logits
    assert first.step_bytes == 2_600 * 75_776 + 2_600 * 152_064 * 6
    # the plain prompt: its activations and the one row of logits it samples from
    assert second.step_bytes == 7_000 * 75_776 + 152_064 * 6
    # AND the estimate stands beside the failed allocation in the reason
    assert "prompt_logprobs over its 2,600-token chunk" in incident.reason
    assert "2.39 GiB of step memory estimated" in incident.reason
    assert incident.reason.startswith("an allocation of 1.71 GiB failed")


def test_without_the_models_widths_the_ranking_still_weighs_the_logits(tmp_path: Path) -> None:
    # GIVEN the same files and no --config: bytes cannot be estimated
    incident = analyze(_two_prompts(tmp_path)).primary
    assert incident is not None
    # THEN the prompt-logprobs request still ranks first (a logit row weighs at least 3 tokens)
    assert incident.culprits[0].request_id == "cmpl-score-0"
    assert incident.culprits[0].step_bytes is None
