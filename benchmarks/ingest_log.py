"""The vLLM log of the ingest benchmark, and the two peers oomtrace is measured beside.

:func:`generate` writes a realistic vLLM V1 log (0.10 - 0.12 shapes: coloured process prefixes,
every line behind a ``kubectl logs --timestamps`` prefix; request lines with long SamplingParams,
and with ``--shape 0.11`` the prompt text and its token ids; uvicorn access lines; aborts; stats
every 10 s; now and then a worker traceback with a PyTorch OOM message).

The peers, each run in its own process by ``ingest_bench.py``:

* the baseline, :func:`baseline`: a straightforward per-line parser, one Python ``re`` pass per
  family tried in turn on every line, extracting the facts a person reads off the log (request
  ids, ``max_tokens`` and prompt token counts, stats values, OOM sizes, start-up figures) and
  writing them afterwards (untimed) for the cross-check;
* the floor, :func:`floor`: reading the file in 1 MiB pieces and doing nothing with them.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"
API = f"{CYAN}(APIServer pid=1){RESET} "
CORE = f"{CYAN}(EngineCore_DP0 pid=413){RESET} "
WORKERS = [f"{CYAN}(Worker_TP{i} pid={549 + i}){RESET} " for i in range(2)]
_PARAGRAPH = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if so "
    "no what up out them then more other into some could time these two may first do any my now "
    "such like our over man me even most made after also did many before must through back years"
)
WORDS = _PARAGRAPH.split()


def _sampling(max_tokens: int, rng: random.Random) -> str:
    return (
        f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
        f"temperature={rng.choice([0.0, 0.7, 1.0])}, top_p=1.0, top_k=-1, min_p=0.0, seed=None, "
        f"stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, "
        f"ignore_eos=False, max_tokens={max_tokens}, min_tokens=0, logprobs=None, "
        f"prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, "
        f"truncate_prompt_tokens=None, guided_decoding=None, extra_args=None)"
    )


def _startup(stamp: str) -> list[str]:
    return [
        f"{API}INFO {stamp} [api_server.py:1805] vLLM API server version 0.10.1",
        (
            f"{API}INFO {stamp} [utils.py:326] non-default args: {{'model': "
            "'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': 0.9, "
            "'max_num_seqs': 128}"
        ),
        (
            f"{CORE}INFO {stamp} [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: "
            "model='Qwen/Qwen2.5-7B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, "
            "tensor_parallel_size=2, enable_prefix_caching=True"
        ),
        *(
            f"{w}INFO {stamp} [gpu_model_runner.py:1892] Model loading took 7.1074 GiB and "
            "4.261813 seconds"
            for w in WORKERS
        ),
        *(
            f"{w}INFO {stamp} [gpu_worker.py:276] Available KV cache memory: 58.12 GiB"
            for w in WORKERS
        ),
        f"{CORE}INFO {stamp} [kv_cache_utils.py:849] GPU KV cache size: 2,176,944 tokens",
        (
            f"{CORE}INFO {stamp} [kv_cache_utils.py:853] Maximum concurrency for 32,768 tokens per "
            "request: 66.43x"
        ),
        (
            f"{CORE}INFO {stamp} [core.py:193] init engine (profile, create kv cache, warmup "
            "model) took 61.02 seconds"
        ),
    ]


def _oom(stamp: str, rng: random.Random) -> list[str]:
    w = WORKERS[rng.randrange(2)]
    tried = rng.choice(["1.25 GiB", "896.00 MiB", "3.02 GiB"])
    return [
        f"{w}ERROR {stamp} [multiproc_executor.py:596] WorkerProc hit an exception.",
        f"{w}ERROR {stamp} [multiproc_executor.py:596] Traceback (most recent call last):",
        (
            f'{w}ERROR {stamp} [multiproc_executor.py:596]   File "/usr/lib/python3/vllm/v1/worker/'
            'gpu_model_runner.py", line 1420, in execute_model'
        ),
        (
            f"{w}ERROR {stamp} [multiproc_executor.py:596] torch.OutOfMemoryError: CUDA out of "
            f"memory. Tried to allocate {tried}. GPU 1 has a total capacity of 79.19 GiB of which "
            "301.06 MiB is free. Process 2752205 has 78.88 GiB memory in use. Of the allocated "
            "memory 75.63 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but "
            "unallocated."
        ),
    ]


def _received(rid: str, max_tokens: int, n: int, shape: str, rng: random.Random, prompts: list[str],
              id_lists: list[str]) -> str:  # fmt: skip
    if shape == "0.11":
        return (
            f"Received request {rid}: prompt: {prompts[n % 64]!r}, params: "
            f"{_sampling(max_tokens, rng)}, prompt_token_ids: {id_lists[n % 64]}, "
            "prompt_embeds shape: None, lora_request: None."
        )
    return f"Received request {rid}: params: {_sampling(max_tokens, rng)}, lora_request: None."


def generate(path: Path, size: int, shape: str = "0.12", seed: int = 7) -> int:
    """Write a log of at least ``size`` bytes; returns the byte count. ``shape`` "0.12": request
    lines carry SamplingParams only (vLLM 0.12+ at INFO); "0.11": also the prompt text and its
    token ids (vLLM <= 0.11 with request logging on)."""
    rng = random.Random(seed)
    clock = datetime(2025, 6, 2, 8, 0, 0, tzinfo=UTC)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 400))) for _ in range(64)]
    id_lists = [
        "[" + ", ".join(str(rng.randint(10, 151000)) for _ in range(n)) + "]"
        for n in (rng.randint(20, 600) for _ in range(64))
    ]
    written = 0
    request = 0
    next_stats = clock
    with path.open("w", encoding="utf-8", newline="\n") as out:
        buffer: list[str] = []
        outer = clock.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
        buffer += [f"{outer} {line}" for line in _startup(clock.strftime("%m-%d %H:%M:%S"))]
        while written < size:
            clock += timedelta(milliseconds=rng.randint(5, 40))
            stamp = clock.strftime("%m-%d %H:%M:%S")
            outer = clock.strftime("%Y-%m-%dT%H:%M:%S.%f") + f"{rng.randint(0, 999):03d}Z"
            request += 1
            rid = f"chatcmpl-{rng.getrandbits(128):032x}"
            received = _received(rid, rng.randint(16, 4096), request, shape, rng, prompts, id_lists)
            lines = [
                f"{API}INFO {stamp} [logger.py:43] {received}",
                f"{API}INFO {stamp} [async_llm.py:269] Added request {rid}.",
                (
                    f"{API}INFO:     10.0.0.{rng.randint(2, 250)}:{rng.randint(30000, 60000)}"
                    ' - "POST /v1/chat/completions HTTP/1.1" 200 OK'
                ),
            ]
            if rng.random() < 0.02:
                lines.append(f"{API}INFO {stamp} [async_llm.py:437] Aborted request {rid}.")
            if clock >= next_stats:
                next_stats = clock + timedelta(seconds=10)
                lines.append(
                    f"{API}INFO {stamp} [loggers.py:123] Engine 000: Avg prompt throughput: "
                    f"{rng.uniform(0, 9000):.1f} tokens/s, Avg generation throughput: "
                    f"{rng.uniform(0, 3000):.1f} tokens/s, Running: {rng.randint(0, 128)} reqs, "
                    f"Waiting: {rng.randint(0, 40)} reqs, GPU KV cache usage: "
                    f"{rng.uniform(0, 100):.1f}%, Prefix cache hit rate: {rng.uniform(0, 60):.1f}%"
                )
            if rng.random() < 0.0002:
                lines += _oom(stamp, rng)
            buffer += [f"{outer} {line}" for line in lines]
            if len(buffer) > 4096:
                text = "\n".join(buffer) + "\n"
                out.write(text)
                written += len(text.encode("utf-8"))
                buffer.clear()
        if buffer:
            text = "\n".join(buffer) + "\n"
            out.write(text)
            written += len(text.encode("utf-8"))
    return written


# --- the baseline: one regex per family, tried in turn on every line --------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_OUTER = re.compile(
    r"^(?:(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) )?"
    r"((?:\((?:[^()\n]|\([^()\n]*\))*? ?pid=\d+(?:, ip=[\w.:-]+)?\) )*)"
)
_HEADER = re.compile(
    r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[?[^\s\]]+?:\d+\] "
)
_STATS = re.compile(
    r"^(?:Engine (\d+): )?Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: "
    r"([\d.]+) tokens/s, Running: (\d+) reqs, (?:Swapped: (\d+) reqs, Pending: (\d+) reqs|"
    r"Waiting: (\d+) reqs)(?:, Deferred: (\d+) reqs)?(?:, Preemptions: (\d+))?"
    r"(?:, \w+ KV cache usage: ([\d.]+)%)?(?:, CPU KV cache usage: [\d.]+%)?"
    r"(?:, Prefix cache hit rate: ([\d.]+)%)?"
)
_RECEIVED = re.compile(r"^Received request (\S+?): (params|prompt): ")
_MAX_TOKENS = re.compile(r"\bmax_tokens=(\d+|None)")
_PROMPT_IDS = re.compile(r"prompt_token_ids: \[([\d, ]*)\]")
_SIMPLE = re.compile(r"^(Added|Finished|Aborted) request(?:\(s\))? (.+?)\.?$")
_OOM = re.compile(
    r"out of memory\. Tried to allocate ([\d.]+ \w+)\. GPU (\d+) has a total capacity of "
    r"([\d.]+ \w+) of which ([\d.]+ \w+) is free"
)
_CONFIG = {
    "model_weights_bytes": re.compile(r"Model loading took ([\d.]+) GiB"),
    "available_kv_cache_bytes": re.compile(r"Available KV cache memory: (-?[\d.]+) GiB"),
    "kv_cache_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
}


class Facts:
    """What the baseline reads off the log, line by line (times as the kubectl prefix prints
    them; converted after the timing)."""

    def __init__(self) -> None:
        self.stats: list[tuple[Any, ...]] = []
        self.received: list[tuple[Any, ...]] = []
        self.simple: list[tuple[Any, ...]] = []
        self.ooms: list[tuple[Any, ...]] = []
        self.config: dict[str, str] = {}

    def stats_line(self, when: str, body: str) -> bool:
        m = _STATS.match(body)
        if m is not None:
            self.stats.append((when, *m.groups()))
        return m is not None

    def received_line(self, when: str, body: str) -> bool:
        m = _RECEIVED.match(body)
        if m is None:
            return False
        tokens = _MAX_TOKENS.findall(body)
        token = (tokens[0] if m.group(2) == "params" else tokens[-1]) if tokens else None
        ids = _PROMPT_IDS.findall(body)
        count = (ids[-1].count(",") + 1 if ids[-1] else 0) if ids else None
        self.received.append((when, m.group(1).removesuffix("."), token, count))
        return True

    def simple_line(self, when: str, body: str) -> bool:
        m = _SIMPLE.match(body)
        if m is None:
            return False
        self.simple.extend((when, m.group(1), r.strip()) for r in m.group(2).split(","))
        return True

    def oom(self, when: str, body: str) -> bool:
        m = _OOM.search(body)
        if m is not None:
            self.ooms.append((when, *m.groups()))
        return m is not None

    def config_line(self, when: str, body: str) -> bool:
        for key, pattern in _CONFIG.items():
            m = pattern.search(body)
            if m:
                self.config.setdefault(key, m.group(1))
                return True
        return False


def _lines(path: Path) -> Iterator[tuple[str, str]]:
    """Prefixes and header off each line: (the kubectl time, the text after the header)."""
    with path.open(encoding="utf-8", errors="replace") as lines:
        for raw in lines:
            line = _ANSI.sub("", raw.rstrip("\r\n"))
            outer = _OUTER.match(line)
            rest = line[outer.end() :] if outer else line
            header = _HEADER.match(rest)
            if header is None:
                continue
            yield (outer.group(1) if outer else "", rest[header.end() :])


def baseline(path: Path) -> tuple[Facts, float]:
    """The straightforward per-line parser: each family's regex tried in turn on every line.
    Returns what it read and the seconds it took."""
    start = time.perf_counter()
    facts = Facts()
    handlers = (
        facts.stats_line, facts.received_line, facts.simple_line, facts.oom, facts.config_line
    )  # fmt: skip
    for when, body in _lines(path):
        for handler in handlers:
            if handler(when, body):
                break
    return facts, time.perf_counter() - start


def floor(path: Path) -> int:
    """Read the file in 1 MiB pieces; the byte count."""
    size = 0
    with path.open("rb") as raw:
        while piece := raw.read(1 << 20):
            size += len(piece)
    return size
