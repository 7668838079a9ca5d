"""A saturated plateau: vLLM 0.6.6 (V0) on an L4 with Llama-3.1-8B-Instruct. Six long
summaries join steady chat traffic; the KV pool fills at 10:04:40 and stays full for six minutes
while the scheduler preempts (recompute) again and again and short requests churn through. The
fullest reading comes minutes after the fill, when the summaries have been preempted and other
requests fill the pool: the moment to examine is the fill.

What the team had (``sample_logs/vllm-saturated-plateau/``): ``vllm.log`` (``docker logs -t``:
the V0 engine's unprefixed lines, ``--enable-log-requests`` on, the stats line every 5 s, and
the scheduler's preemption warning, which V0 prints for the 1st, 51st, 101st... preemption
only: ``vllm/core/scheduler.py``, ``docs/formats/vllm.md``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

from oomtrace.replay import ReplaySettings
from tools.sample_incidents.sim import NS, Run, Spec
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_lines import VllmLog, at, sampling_params
from tools.sample_incidents.vllm_startup import access_line, docker_log

NAME = "vllm-saturated-plateau"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
START = datetime(2025, 2, 11, 9, 58, 31, 620_000, tzinfo=UTC)
T0 = datetime(2025, 2, 11, 10, 0, 0, tzinfo=UTC)
END = datetime(2025, 2, 11, 10, 14, 0, tzinfo=UTC)
BLOCK, GPU_BLOCKS = 16, 2_048  # "# GPU blocks: 2048": 4.00 GiB at 2 MiB a block
SUMMARIES = (  # (arrival s, prompt, output): a nightly batch of long summaries
    (180.2, 3_410, 5_300), (181.0, 2_950, 5_800), (181.9, 3_180, 5_500),
    (183.1, 2_760, 5_650), (184.0, 3_020, 5_200), (185.2, 2_870, 5_450),
)  # fmt: skip
WARN_EVERY = 50  # V0 warns on the 1st, 51st, 101st... preemption


def workload(filler: Filler) -> list[Spec]:
    specs: list[Spec] = []
    t = 0.6
    while t < (END - T0).total_seconds() - 60:
        prompt = int(min(900, max(40, math.exp(filler.uniform(4.2, 6.6)))))
        output = int(min(300, max(8, math.exp(filler.uniform(3.0, 5.5)))))
        specs.append(
            Spec("chatcmpl-" + filler.hex_id(), round(t, 3), prompt, output, 512,
                 0.03 + prompt / 3_000, filler.uniform(0.034, 0.042))
        )  # fmt: skip
        t += -math.log(1.0 - filler.uniform(0.0, 0.999)) / 0.9
    for arrival, prompt, output in SUMMARIES:
        specs.append(
            Spec("chatcmpl-" + filler.hex_id(), arrival, prompt, output, 6_000,
                 0.03 + prompt / 3_000, 0.050)
        )  # fmt: skip
    return sorted(specs, key=lambda s: s.arrival_s)


def settings() -> ReplaySettings:
    return ReplaySettings(
        kv_blocks=GPU_BLOCKS, block_size=BLOCK, max_num_seqs=256, max_num_batched_tokens=8192
    )


def startup(log: VllmLog) -> None:
    s = START
    log.record(at(s, 0.0), None, "INFO", "api_server.py:640", "vLLM API server version 0.6.6")
    log.record(
        at(s, 0.01), None, "INFO", "api_server.py:641",
        f"args: Namespace(host=None, port=8000, uvicorn_log_level='info', model='{MODEL}', "
        "max_model_len=16384, gpu_memory_utilization=0.9, max_num_seqs=256, "
        "disable_log_requests=False, disable_log_stats=False)",
    )  # fmt: skip
    log.record(
        at(s, 4.2), None, "INFO", "llm_engine.py:234",
        f"Initializing an LLM engine (v0.6.6) with config: model='{MODEL}', "
        f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
        "max_seq_len=16384, download_dir=None, load_format=LoadFormat.AUTO, "
        "tensor_parallel_size=1, pipeline_parallel_size=1, quantization=None, "
        "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, "
        f"served_model_name={MODEL}, enable_prefix_caching=False, chunked_prefill_enabled=False",
    )  # fmt: skip
    log.record(
        at(s, 16.9), None, "INFO", "model_runner.py:1099", "Loading model weights took 14.9888 GB"
    )
    log.record(at(s, 21.0), None, "INFO", "worker.py:241", "Memory profiling takes 3.95 seconds")
    log.record(
        at(s, 21.0), None, "INFO", "worker.py:241",
        "the current vLLM instance can use total_gpu_memory (22.05GiB) x gpu_memory_utilization "
        "(0.90) = 19.84GiB",
    )  # fmt: skip
    log.record(
        at(s, 21.0), None, "INFO", "worker.py:241",
        "model weights take 14.99GiB; non_torch_memory takes 0.09GiB; PyTorch activation peak "
        "memory takes 0.76GiB; the rest of the memory reserved for KV Cache is 4.00GiB.",
    )  # fmt: skip
    log.record(
        at(s, 21.1), None, "INFO", "gpu_executor.py:76",
        f"# GPU blocks: {GPU_BLOCKS}, # CPU blocks: 2048",
    )  # fmt: skip
    log.record(
        at(s, 21.1), None, "INFO", "gpu_executor.py:80",
        f"Maximum concurrency for 16384 tokens per request: {GPU_BLOCKS * BLOCK / 16384:.2f}x",
    )  # fmt: skip
    log.record(
        at(s, 30.4), None, "INFO", "model_runner.py:1527",
        "Graph capturing finished in 9 secs, took 0.28 GiB",
    )  # fmt: skip
    log.record(
        at(s, 30.5), None, "INFO", "llm_engine.py:431",
        "init engine (profile, create kv cache, warmup model) took 13.58 seconds",
    )  # fmt: skip
    for k, line in enumerate(
        ("Started server process [1]", "Waiting for application startup.",
         "Application startup complete.",
         "Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)")
    ):  # fmt: skip
        log.raw(at(s, 32.1 + 0.05 * k), None, f"INFO:     {line}")


def requests(log: VllmLog, run: Run, filler: Filler) -> None:
    """V0's request lines: received (clients send token ids: no prompt text; params, token
    ids), added, finished; and uvicorn's access line when the response is sent."""
    for i, spec in enumerate(run.specs):
        arrived = run.at(run.arrival_ns(i))
        params = sampling_params(max_tokens=spec.max_tokens, temperature=0.7, version=(0, 6))
        log.record(
            arrived, None, "INFO", "logger.py:37",
            f"Received request {spec.rid}: prompt: None, params: {params}, "
            f"prompt_token_ids: {filler.token_ids(spec.prompt, first=128000)}, lora_request: None, "
            "prompt_adapter_request: None.",
        )  # fmt: skip
        log.record(
            arrived + timedelta(microseconds=900), None, "INFO", "engine.py:267",
            f"Added request {spec.rid}.",
        )  # fmt: skip
        finished = run.finish_ns(i)
        if finished is None:
            continue
        done = run.at(finished)
        log.record(done, None, "INFO", "engine.py:290", f"Finished request {spec.rid}.")
        access_line(log, done + timedelta(microseconds=700), "", filler, "200 OK")


def preemption_warnings(log: VllmLog, run: Run) -> None:
    for k, (t, i) in enumerate(run.preemptions):
        if k % WARN_EVERY:
            continue
        log.record(
            run.at(t), None, "WARNING", "scheduler.py:1560",
            f"Sequence group {run.specs[i].rid} is preempted by PreemptionMode.RECOMPUTE mode "
            "because there is not enough KV cache space. This can affect the end-to-end "
            "performance. Increase gpu_memory_utilization or tensor_parallel_size to provide "
            f"more KV cache memory. total_num_cumulative_preemption={k + 1}",
        )  # fmt: skip


def stats(log: VllmLog, run: Run) -> None:
    """V0's stats line every 5 s (``metrics.py``)."""
    ticks = []
    tick = at(START, 36.0)
    while tick <= END:
        ticks.append(tick)
        tick += timedelta(seconds=5)
    served = [t for t in ticks if run.ns(t) > 0]
    points = {p.ts_ns: p for p in run.pool([run.ns(t) for t in served])}
    for tick in ticks:
        t1 = run.ns(tick)
        point = points.get(t1)
        prompt = run.prefilled_between(t1 - 5 * NS, t1) / 5 if point else 0.0
        gen = run.generated_between(t1 - 5 * NS, t1) / 5 if point else 0.0
        running, waiting = (point.running, point.waiting) if point else (0, 0)
        usage = 100 * point.blocks / GPU_BLOCKS if point else 0.0
        log.record(
            tick, None, "INFO", "metrics.py:467",
            f"Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} "
            f"tokens/s, Running: {running} reqs, Swapped: 0 reqs, Pending: {waiting} reqs, GPU KV "
            f"cache usage: {usage:.1f}%, CPU KV cache usage: 0.0%.",
        )  # fmt: skip


def build(out: Path) -> Run:
    filler = Filler(20250211)
    run = Run(workload(filler), settings(), T0)
    log = docker_log(filler, bracket=False)
    startup(log)
    requests(log, run, filler)
    preemption_warnings(log, run)
    stats(log, run)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm.log").write_text(log.render(), encoding="utf-8")
    return run
