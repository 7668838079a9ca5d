"""Incident 5: SGLang 0.5.3 on one A10G with Llama-3.1-8B-Instruct, ``--log-requests
--log-requests-level 1``: a document-summarisation burst fills the token pool; the scheduler
retracts running requests again and again while the long summaries keep growing.

What the team had: ``sglang.log`` (``python -m sglang.launch_server ... 2>&1 | tee``: SGLang's
``[YYYY-MM-DD HH:MM:SS]`` prefix in the host's local time, Europe/Berlin, no rank tag with TP=1)
and ``metrics.prom`` (``while sleep 5; do date -Is; curl -s localhost:30000/metrics; done``: every
scrape after a time line with its UTC offset).

The engine model is the replay simulator's: admission when the prompt fits, and on a full pool
the newest running request is retracted (SGLang picks the request with the fewest output tokens
and the longest prompt, which is usually the newest too).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from oomtrace.replay import ReplaySettings
from tools.sample_incidents.sim import NS, PoolPoint, Run, Spec
from tools.sample_incidents.text import Filler

NAME = "sglang-retraction"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TZ = ZoneInfo("Europe/Berlin")
GIB = 1 << 30
START = datetime(2025, 6, 10, 12, 58, 2, 300_000, tzinfo=UTC)  # 14:58:02 in Berlin
T0 = datetime(2025, 6, 10, 13, 0, 0, tzinfo=UTC)
END = datetime(2025, 6, 10, 13, 9, 0, tzinfo=UTC)
POOL_TOKENS = 31_864  # "KV Cache is allocated. #tokens: 31864, K size: 1.94 GB"
KV_PER_TOKEN = 131_072
DECODE_LOG_S = 1.2  # --decode-log-interval 40 at about 30 ms a step
SCRAPE_S = 5.0
GAP = 0.8
LONG = (  # the summarisation burst: (arrival s, prompt, output)
    (95.2, 3_170, 4_411), (95.9, 3_712, 4_140), (96.4, 2_505, 4_608), (97.0, 3_354, 4_376),
    (97.8, 2_911, 4_489),
)  # fmt: skip


def workload(filler: Filler) -> list[Spec]:
    specs: list[Spec] = []
    t = 0.9
    while t < 420:
        prompt = int(min(2_500, max(40, math.exp(filler.uniform(4.4, 6.8)))))
        output = int(min(700, max(8, math.exp(filler.uniform(3.2, 5.6)))))
        specs.append(
            Spec(filler.hex_id(), round(t, 3), prompt, output, 1024, 0.015 + prompt / 5_000,
                 filler.uniform(0.028, 0.034))
        )  # fmt: skip
        t += -GAP * math.log(1.0 - filler.uniform(0.0, 0.999))
    for arrival, prompt, output in LONG:
        specs.append(
            Spec(filler.hex_id(), arrival, prompt, output, 8192, 0.015 + prompt / 5_000, 0.033)
        )
    return sorted(specs, key=lambda s: s.arrival_s)


def settings() -> ReplaySettings:
    return ReplaySettings(kv_blocks=POOL_TOKENS, block_size=1, max_num_batched_tokens=8192)


def stamp(ts: datetime) -> str:
    return f"[{ts.astimezone(TZ):%Y-%m-%d %H:%M:%S}]"


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[datetime, int, str]] = []

    def add(self, ts: datetime, message: str) -> None:
        self.lines.append((ts, len(self.lines), f"{stamp(ts)} {message}"))

    def render(self) -> str:
        return "\n".join(line for _, _, line in sorted(self.lines)) + "\n"


def startup(log: Log) -> None:
    s = START
    args = (
        f"server_args=ServerArgs(model_path='{MODEL}', tokenizer_path='{MODEL}', "
        "tokenizer_mode='auto', skip_tokenizer_init=False, load_format='auto', "
        "trust_remote_code=False, dtype='auto', kv_cache_dtype='auto', quantization=None, "
        "context_length=None, device='cuda', served_model_name='" + MODEL + "', "
        "chat_template=None, is_embedding=False, revision=None, host='0.0.0.0', port=30000, "
        "mem_fraction_static=0.88, max_running_requests=None, max_total_tokens=None, "
        "chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy='fcfs', "
        "schedule_conservativeness=1.0, cpu_offload_gb=0, page_size=1, tp_size=1, pp_size=1, "
        "stream_interval=1, stream_output=False, random_seed=431870216, "
        "log_level='info', log_requests=True, log_requests_level=1, enable_metrics=True, "
        "decode_log_interval=40, dp_size=1, enable_dp_attention=False)"
    )
    log.add(s, args)
    k_gib = POOL_TOKENS * KV_PER_TOKEN / 2 / GIB
    for dt, message in (
        (4.1, "Using default HuggingFace chat template with detected content format: string"),
        (9.8, "Init torch distributed begin."),
        (10.4, "Init torch distributed ends. mem usage=0.00 GB"),
        (10.9, "Load weight begin. avail mem=21.76 GB"),
        (19.6, ("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                "avail mem=6.75 GB, mem usage=15.01 GB.")),
        (19.8, (f"KV Cache is allocated. #tokens: {POOL_TOKENS}, K size: {k_gib:.2f} GB, "
                f"V size: {k_gib:.2f} GB")),
        (19.8, "Memory pool end. avail mem=2.82 GB"),
        (20.3, "Capture cuda graph begin. This can take up to several minutes. avail mem=2.74 GB"),
        (34.9, ("Capture cuda graph end. Time elapsed: 14.61 s. mem usage=0.47 GB. "
                "avail mem=2.27 GB.")),
        (35.4, (f"max_total_num_tokens={POOL_TOKENS}, chunked_prefill_size=8192, "
                "max_prefill_tokens=16384, max_running_requests=2048, context_len=131072, "
                "available_gpu_mem=2.27 GB")),
        (36.9, "INFO:     Started server process [7710]"),
        (36.9, "INFO:     Waiting for application startup."),
        (36.9, "INFO:     Application startup complete."),
        (36.9, "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"),
        (37.9, 'INFO:     127.0.0.1:51870 - "GET /get_model_info HTTP/1.1" 200 OK'),
        (38.1, ("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: "
                "0.00, #running-req: 0, #queue-req: 0, ")),
        (38.9, 'INFO:     127.0.0.1:51882 - "POST /generate HTTP/1.1" 200 OK'),
        (38.9, "The server is fired up and ready to roll!"),
    ):  # fmt: skip
        log.add(s + timedelta(seconds=dt), message)


def obj(rid: str, max_new: int, temperature: float) -> str:
    """``GenerateReqInput`` as ``--log-requests-level 1`` prints it (text and ids left out)."""
    return (
        f"GenerateReqInput(video_data=None, sampling_params={{'temperature': {temperature}, "
        f"'max_new_tokens': {max_new}}}, rid='{rid}', return_logprob=False, "
        "logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, "
        "return_text_in_logprobs=False, stream=False, log_metrics=True, "
        "return_hidden_states=False, modalities=[], session_params=None, "
        "custom_logit_processor=None, bootstrap_host=None, bootstrap_port=None, "
        "bootstrap_room=None, data_parallel_rank=None)"
    )


def requests(log: Log, run: Run, filler: Filler) -> None:
    for i, spec in enumerate(run.specs):
        temperature = 0.3 if spec.max_tokens > 1024 else 0.7
        arrived = run.at(run.arrival_ns(i))
        log.add(arrived, f"Receive: obj={obj(spec.rid, spec.max_tokens, temperature)}")
        finished = run.finish_ns(i)
        if finished is None:
            continue
        done = run.at(finished)
        latency = (finished - run.arrival_ns(i)) / NS
        reason = (
            f"{{'type': 'length', 'length': {spec.max_tokens}}}"
            if spec.output >= spec.max_tokens
            else "{'type': 'stop', 'matched': 128009}"
        )
        log.add(
            done + timedelta(milliseconds=2),
            f"Finish: obj={obj(spec.rid, spec.max_tokens, temperature)}, out={{'meta_info': "
            f"{{'id': '{spec.rid}', 'finish_reason': {reason}, 'prompt_tokens': {spec.prompt}, "
            f"'weight_version': 'default', 'completion_tokens': {spec.output}, "
            f"'cached_tokens': 0, 'e2e_latency': {latency:.3f}}}}}",
        )
        log.add(
            done + timedelta(milliseconds=3),
            f'INFO:     {filler.client()} - "POST /generate HTTP/1.1" 200 OK',
        )


def scheduler(log: Log, run: Run) -> list[PoolPoint]:
    """Prefill lines at admissions, decode lines every ``DECODE_LOG_S``, retraction lines."""
    admissions: dict[int, list[int]] = {}
    for i, stays in enumerate(run.residencies):
        for stay in stays:
            admissions.setdefault(stay.start_ns, []).append(i)
    retractions: dict[int, int] = {}
    for t, _ in run.preemptions:
        retractions[t] = retractions.get(t, 0) + 1
    end = run.ns(END)
    grid = [round(k * DECODE_LOG_S * NS) + 517_000_000 for k in range(int(end / NS / DECODE_LOG_S))]
    probes = sorted(set(admissions) | set(retractions) | set(grid))
    points = {p.ts_ns: p for p in run.pool([t for t in probes if t > 0])}
    ratio, last = 0.7, 0
    for t in probes:
        point = points.get(t)
        if point is None:
            continue
        ratio = max(0.1, ratio - 0.00165 * (t - last) / NS * 33)
        last = t
        if t in retractions:
            new = min(1.0, 0.55 + 0.06 * retractions[t])
            log.add(
                run.at(t),
                f"KV cache pool is full. Retract requests. #retracted_reqs: {retractions[t]}, "
                f"#aborted_retracted_reqs: 0, #new_token_ratio: {ratio:.4f} -> {new:.4f}",
            )
            ratio = new
        if t in admissions:
            new_reqs = admissions[t]
            tokens = sum(run.specs[i].prompt + run.produced(i, t) for i in new_reqs)
            log.add(
                run.at(t),
                f"Prefill batch. #new-seq: {len(new_reqs)}, #new-token: {tokens}, "
                f"#cached-token: 0, token usage: {point.blocks / POOL_TOKENS:.2f}, "
                f"#running-req: {max(point.running - len(new_reqs), 0)}, "
                f"#queue-req: {point.waiting}, ",
            )
        if t in grid and point.running:
            gen = run.generated_between(t - round(DECODE_LOG_S * NS), t) / DECODE_LOG_S
            log.add(
                run.at(t),
                f"Decode batch. #running-req: {point.running}, #token: {point.blocks}, "
                f"token usage: {point.blocks / POOL_TOKENS:.2f}, cuda graph: True, "
                f"gen throughput (token/s): {gen:.2f}, #queue-req: {point.waiting}, ",
            )
    return list(points.values())


def metrics(run: Run, filler: Filler) -> str:
    """The scrape file: a ``date -Is`` line, then SGLang's ``/metrics`` (multiprocess mode: no
    ``_created`` series, retraction gauge with a ``pid`` label)."""
    labels = f'engine_type="unified",model_name="{MODEL}",pp_rank="0",tp_rank="0"'
    out: list[str] = []
    ts = START + timedelta(seconds=40.6)
    scrapes: list[datetime] = []
    while ts < END:
        scrapes.append(ts)
        ts += timedelta(microseconds=round(SCRAPE_S * 1e6) + filler.jitter_us(10_000, 60_000))
    probes = [run.ns(s) for s in scrapes]
    points = {p.ts_ns: p for p in run.pool([t for t in probes if t > 0])}
    for at_, t in zip(scrapes, probes, strict=True):
        point = points.get(t)
        blocks, running, waiting = (
            (point.blocks, point.running, point.waiting) if point else (0, 0, 0)
        )
        retracted = run.preemptions_between(t - round(SCRAPE_S * NS), t)
        gen = run.generated_between(t - round(SCRAPE_S * NS), t) / SCRAPE_S if t > 0 else 0.0
        local = at_.astimezone(TZ).replace(microsecond=0)
        out.append(local.isoformat())
        for name, kind, help_, value in (
            ("sglang:num_running_reqs", "gauge", "The number of running requests.", running),
            ("sglang:num_used_tokens", "gauge", "The number of used tokens.", blocks),
            ("sglang:token_usage", "gauge", "The token usage.", round(blocks / POOL_TOKENS, 2)),
            ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", gen),
            ("sglang:num_queue_reqs", "gauge", "The number of requests in the queue.", waiting),
            ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", 0.0),
        ):  # fmt: skip
            out += [
                f"# HELP {name} {help_}",
                f"# TYPE {name} {kind}",
                f"{name}{{{labels}}} {float(value)!r}",
            ]
        out += [
            "# HELP sglang:num_retracted_reqs The number of retracted requests.",
            "# TYPE sglang:num_retracted_reqs gauge",
            f'sglang:num_retracted_reqs{{{labels},pid="7744"}} {float(retracted)!r}',
        ]
    return "\n".join(out) + "\n"


def build(out: Path) -> Run:
    filler = Filler(20250610)
    run = Run(workload(filler), settings(), T0)
    log = Log()
    startup(log)
    requests(log, run, filler)
    scheduler(log, run)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sglang.log").write_text(log.render(), encoding="utf-8")
    (out / "metrics.prom").write_text(metrics(run, filler), encoding="utf-8")
    return run
