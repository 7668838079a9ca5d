"""What a vLLM V1 API server prints about a simulated run: request lines and the periodic stats
line, for the version families the samples use (vLLM's ``vllm/entrypoints/logger.py`` and
``vllm/v1/metrics/loggers.py``; ``docs/formats/vllm.md``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tools.sample_incidents.sim import NS, Run
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_lines import VllmLog, sampling_params, stats_message


@dataclass(frozen=True)
class Server:
    """How the server was started: version, API process prefix, endpoint, what clients send."""

    version: tuple[int, int]
    api: str
    endpoint: str = "/v1/completions"
    prompt_text: bool = False  # clients send text (else pre-tokenised prompts: prompt None)
    temperature: float = 0.7


def request_lines(
    log: VllmLog,
    run: Run,
    filler: Filler,
    server: Server,
    *,
    until_ns: int | None = None,
    prompt_logprobs: dict[str, int] | None = None,
) -> list[int]:
    """Received / details / Added at arrival, Generated response and the access line at finish;
    returns the requests still in flight at ``until_ns`` (arrived, not finished)."""
    in_flight: list[int] = []
    logprobs = prompt_logprobs or {}
    for i, spec in enumerate(run.specs):
        arrival_ns = run.arrival_ns(i)
        if until_ns is not None and arrival_ns > until_ns:
            continue
        arrived = run.at(arrival_ns)
        params = sampling_params(
            max_tokens=spec.max_tokens,
            temperature=server.temperature if spec.max_tokens > 1 else 0.0,
            prompt_logprobs=logprobs.get(spec.rid),
            version=server.version,
        )
        prompt = repr(filler.text(spec.prompt)) if server.prompt_text else "None"
        ids = filler.token_ids(spec.prompt, first=151643 if server.prompt_text else 128000)
        if server.version >= (0, 12):
            log.record(
                arrived, server.api, "INFO", "logger.py:46",
                f"Received request {spec.rid}: params: {params}, lora_request: None.",
            )  # fmt: skip
            log.record(
                arrived, server.api, "DEBUG", "logger.py:52",
                f"Request {spec.rid} details: prompt: {prompt}, prompt_token_ids: {ids}, "
                "prompt_embeds shape: None.",
            )  # fmt: skip
        else:
            log.record(
                arrived, server.api, "INFO", "logger.py:41",
                f"Received request {spec.rid}: prompt: {prompt}, params: {params}, "
                f"prompt_token_ids: {ids}, prompt_embeds shape: None, lora_request: None.",
            )  # fmt: skip
        log.record(
            arrived + timedelta(microseconds=1_800), server.api, "INFO", "async_llm.py:354",
            f"Added request {spec.rid}.",
        )  # fmt: skip
        finished = run.finish_ns(i)
        if finished is None or (until_ns is not None and finished > until_ns):
            in_flight.append(i)
            continue
        done = run.at(finished)
        reason = "length" if spec.output >= spec.max_tokens else "stop"
        log.record(
            done, server.api, "INFO", "logger.py:71",
            f"Generated response {spec.rid}: output: {filler.text(spec.output)!r}, "
            f"output_token_ids: {filler.token_ids(spec.output)}, finish_reason: {reason}",
        )  # fmt: skip
        log.raw(
            done + timedelta(microseconds=900), server.api,
            f'INFO:     {filler.client()} - "POST {server.endpoint} HTTP/1.1" 200 OK',
        )  # fmt: skip
    return in_flight


def stats_lines(
    log: VllmLog,
    run: Run,
    server: Server,
    *,
    first: datetime,
    last: datetime,
    gpu_blocks: int,
    where: str,
) -> None:
    """The ``Engine 000:`` line every 10 s from ``first`` to ``last``; DEBUG when idle for two
    intervals in a row (vLLM hides idle stats)."""
    ticks: list[datetime] = []
    tick = first
    while tick <= last:
        ticks.append(tick)
        tick += timedelta(seconds=10)
    served = [t for t in ticks if run.ns(t) > 0]
    points = {p.ts_ns: p for p in run.pool([run.ns(t) for t in served])}
    quiet_before = True
    for tick in ticks:
        t1 = run.ns(tick)
        point = points.get(t1)
        prompt = run.prefilled_between(t1 - 10 * NS, t1) / 10 if point else 0.0
        gen = run.generated_between(t1 - 10 * NS, t1) / 10 if point else 0.0
        quiet = prompt == 0 and gen == 0
        level = "DEBUG" if quiet and quiet_before else "INFO"
        quiet_before = quiet
        message = stats_message(
            prompt_tps=prompt,
            gen_tps=gen,
            running=point.running if point else 0,
            waiting=point.waiting if point else 0,
            kv_ratio=point.blocks / gpu_blocks if point else 0.0,
            preemptions=run.preemptions_between(t1 - 10 * NS, t1) if point else 0,
            version=server.version,
        )
        log.record(tick, server.api, level, where, message)
