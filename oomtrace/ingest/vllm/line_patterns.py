"""vLLM's log lines, per version family, as data: the version families, the engine header, the
periodic stats line in all its shapes and the lines that are events. Each entry has the pattern,
the version family it proves (a lower bound; ``None`` when it proves nothing), a real sample
line and what that sample must yield; the startup lines are in :mod:`.startup_patterns`, the
request lines in :mod:`.request_patterns`, and ``docs/formats/vllm.md`` says where in vLLM's
source each form comes from. ``tests/unit/ingest/vllm/test_line_patterns.py`` runs every sample
through the parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from oomtrace.ingest.torch.host_kill import CONTAINER_KILL_DETAIL, SHELL_KILL

Family = Literal["v0", "v1-0.7", "v1-0.8.5", "v1-0.12", "v1-0.20", "v1-0.30"]
# Version families in order. V0 is the old engine (default up to 0.7.x, forced or fallen back to
# up to 0.10.x); the V1 families are told apart by the shape of the periodic stats line.
FAMILIES: Final[Mapping[Family, str]] = {
    "v0": "V0 engine (vLLM <= 0.7.x, or V0 forced up to 0.10.x)",
    "v1-0.7": "V1 engine 0.7.3 - 0.8.4 (stats line without an engine prefix)",
    "v1-0.8.5": "V1 engine 0.8.5 - 0.11.x ('Engine 000:' stats prefix)",
    "v1-0.12": "V1 engine 0.12 - 0.19 (stats built from parts, 'Preemptions:')",
    "v1-0.20": "V1 engine 0.20 - 0.29 ('Deferred:' in stats)",
    "v1-0.30": "V1 engine 0.30+ (device-aware KV lines)",
}
FAMILY_ORDER: Final[tuple[Family, ...]] = tuple(FAMILIES)

# The engine's own prefix: level, MM-DD HH:MM:SS, [file:line] (bracketed from 0.8).
HEADER: Final = (
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) +(?P<md>[0-9]{2}-[0-9]{2}) "
    r"(?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,][0-9]+)? (?P<br>\[)?[^\s\]]+:[0-9]+\] "
)
# A second record glued onto a line (a missing newline), with its optional process prefix.
GLUED: Final = (
    r"(?:\((?:[^()\n]|\([^()\n]*\))*? ?pid=\d+(?:, ip=[0-9A-Za-z.:\-]+)?\) )?"
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +\d\d-\d\d \d\d:\d\d:\d\d (?:\[[^\s\]]+:\d+\]|"
    r"[^\s\]]+\.py:\d+\]) "
)

# --- periodic stats -------------------------------------------------------------------------

STATS_LITERAL: Final = "Avg prompt throughput: "
STATS: Final = (
    r"^(?:Engine (?P<engine>\d+): |(?P<engines>\d+) Engines Aggregated: )?"
    r"Avg prompt throughput: (?P<prompt_tps>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen_tps>[\d.]+) tokens/s, "
    r"(?:Max iteration time: [\d.]+ ms, Avg time/tok: ?[\d.]+ ms, )?"
    r"Running: (?P<running>\d+) reqs, "
    r"(?:Swapped: (?P<swapped>\d+) reqs, Pending: (?P<pending>\d+) reqs|"
    r"Waiting: (?P<waiting>\d+) reqs)"
    r"(?:, Deferred: (?P<deferred>\d+) reqs)?"
    r"(?:, Preemptions: (?P<preemptions>\d+))?"
    # 0.33 adds the asynchronous KV loads where there are any (vllm/v1/metrics/loggers.py)
    r"(?:, KV fetch: \d+ waiting to start, \d+ in progress, \d+ completed waiting)?"
    r"(?:, (?P<device>[A-Za-z]+(?: \+ host)?) KV cache usage: (?P<kv_pct>[\d.]+)%)?"
    r"(?:, CPU KV cache usage: [\d.]+%)?"
    r"(?:, Prefix cache hit rate: (?P<prefix_pct>[\d.]+)%)?"
)
# V1's dump of the scheduler's state when the engine core dies (vllm/v1/engine/dump_input.py,
# 0.9+): the running and waiting counts and the KV cache usage as a fraction.
SCHEDULER_DUMP_LITERAL: Final = "Dumping scheduler stats: SchedulerStats("
SCHEDULER_DUMP: Final = (
    r"Dumping scheduler stats: SchedulerStats\(num_running_reqs=(?P<running>\d+), "
    r"num_waiting_reqs=(?P<waiting>\d+),.*?\bkv_cache_usage=(?P<kv_fraction>[\d.]+)"
)
V0_PREFIX_LITERAL: Final = "Prefix cache hit rate: GPU: "
V0_PREFIX: Final = r"^Prefix cache hit rate: GPU: (?P<prefix_pct>[\d.]+)%"


@dataclass(frozen=True)
class StatsForm:
    """One shape of the periodic stats line; ``expect`` maps sample metric -> value."""

    name: str
    family: Family | None
    sample: str
    expect: Mapping[str, float]


STATS_FORMS: Final[tuple[StatsForm, ...]] = (
    StatsForm(
        "v0 (0.4.3 - 0.10.x)",
        "v0",
        "Avg prompt throughput: 9.2 tokens/s, Avg generation throughput: 11.6 tokens/s, "
        "Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, "
        "CPU KV cache usage: 0.0%.",
        {"requests_running": 1, "requests_swapped": 0, "requests_waiting": 0,
         "kv_usage_ratio": 0.001, "prompt_throughput_tokens_per_s": 9.2,
         "generation_throughput_tokens_per_s": 11.6},
    ),
    StatsForm(
        "pre-0.4 with iteration time (possibly a fork)",
        "v0",
        "Avg prompt throughput: 382.6 tokens/s, Avg generation throughput: 118.5 tokens/s, "
        "Max iteration time: 386.7 ms, Avg time/tok:149.4 ms, Running: 35 reqs, Swapped: 0 "
        "reqs, Pending: 115 reqs, GPU KV cache usage: 99.0%, CPU KV cache usage: 0.0%",
        {"requests_running": 35, "requests_waiting": 115, "kv_usage_ratio": 0.99},
    ),
    StatsForm(
        "V1 0.7.3 - 0.8.x, no engine prefix",
        "v1-0.7",
        "Avg prompt throughput: 0.5 tokens/s, Avg generation throughput: 0.7 tokens/s, "
        "Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%",
        {"requests_running": 0, "requests_waiting": 0, "kv_usage_ratio": 0.0,
         "prefix_cache_hit_ratio": 0.0},
    ),
    StatsForm(
        "V1 0.8.5 - 0.11.x, Engine 000",
        "v1-0.8.5",
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 239.2 "
        "tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 91.2%, Prefix cache hit "
        "rate: 0.0%",
        {"requests_running": 8, "kv_usage_ratio": 0.912,
         "generation_throughput_tokens_per_s": 239.2},
    ),
    StatsForm(
        "V1 0.12 - 0.19 with preemptions and extra fields",
        "v1-0.12",
        "Engine 000: Avg prompt throughput: 120.5 tokens/s, Avg generation throughput: 14.6 "
        "tokens/s, Running: 3 reqs, Waiting: 2 reqs, Preemptions: 4, GPU KV cache usage: 97.0%, "
        "Prefix cache hit rate: 23.6%, MM cache hit rate: 0.0%",
        {"requests_running": 3, "requests_waiting": 2, "preemptions_in_interval": 4,
         "kv_usage_ratio": 0.97, "prefix_cache_hit_ratio": 0.236},
    ),
    StatsForm(
        "V1 0.12+ data-parallel aggregate",
        "v1-0.12",
        "2 Engines Aggregated: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: "
        "20.0 tokens/s, Running: 12 reqs, Waiting: 1 reqs, GPU KV cache usage: 40.0%, Prefix "
        "cache hit rate: 10.0%",
        {"requests_running": 12, "requests_waiting": 1, "kv_usage_ratio": 0.4},
    ),
    StatsForm(
        "V1 0.20 - 0.29 with Deferred",
        "v1-0.20",
        "Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 "
        "tokens/s, Running: 5 reqs, Waiting: 7 reqs, Deferred: 3 reqs, GPU KV cache usage: "
        "50.5%, Prefix cache hit rate: 1.5%",
        {"requests_waiting": 7, "requests_deferred": 3, "kv_usage_ratio": 0.505},
    ),
    StatsForm(
        "V1 0.33 with asynchronous KV loads",
        "v1-0.8.5",  # what the engine prefix proves; the KV fetch part is not told apart
        "Engine 000: Avg prompt throughput: 12.0 tokens/s, Avg generation throughput: 30.5 "
        "tokens/s, Running: 4 reqs, Waiting: 2 reqs, KV fetch: 1 waiting to start, 2 in progress, "
        "0 completed waiting, GPU KV cache usage: 41.3%, Prefix cache hit rate: 12.0%",
        {"requests_running": 4, "requests_waiting": 2, "kv_usage_ratio": 0.413,
         "prefix_cache_hit_ratio": 0.12},
    ),
    StatsForm(
        "V1 0.30+ device-aware, no prefix-cache queries",
        "v1-0.30",
        "Engine 000: Avg prompt throughput: 0.9 tokens/s, Avg generation throughput: 6.3 "
        "tokens/s, Running: 1 reqs, Waiting: 0 reqs, XPU KV cache usage: 0.6%",
        {"requests_running": 1, "kv_usage_ratio": 0.006},
    ),
)  # fmt: skip


# --- point events: start-up refusals, engine start and death, preemption --------------------


@dataclass(frozen=True)
class EventLine:
    """A line that is an event of ``kind``. ``detail`` is a ``str.format`` template over the
    named groups; groups ending ``__gib`` fill the byte column named before the suffix."""

    name: str
    kind: str
    literal: str
    pattern: str
    detail: str
    sample: str
    family: Family | None = None


EVENT_LINES: Final[tuple[EventLine, ...]] = (
    EventLine(
        "no KV memory at start-up", "startup_no_kv_memory",
        "No available memory for the cache blocks",
        r"No available memory for the cache blocks",
        "vLLM found no memory left for the KV cache at start-up",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
    ),
    EventLine(
        # 0.8.x says no estimate yet (vllm/v1/core/kv_cache_utils.py, PR 16168 added it)
        "KV cache too small for one request (V1)", "startup_kv_insufficient", "KV cache is needed",
        r"max seq len \((?P<len>\d+)\), \((?P<requested_bytes__gib>[\d.]+) GiB KV cache is needed"
        r", which is larger than the available KV cache memory \((?P<free_bytes__gib>-?[\d.]+) "
        r"GiB\)\.(?: Based on the available memory, the estimated maximum model length is "
        r"(?P<estimate>\d+))?",
        "max seq len {len} needs {requested_bytes__gib} GiB of KV cache; "
        "{free_bytes__gib} GiB available[; estimated maximum model length {estimate}]",
        "ValueError: To serve at least one request with the models's max seq len (131072), "
        "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.38 "
        "GiB). Based on the available memory, the estimated maximum model length is 76784. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
        "engine.",
        "v1-0.7",
    ),
    EventLine(
        # 0.8.x printed the same GiB figures as "GB" (vllm/v1/core/kv_cache_utils.py divides by
        # 1024**3; vllm#15617: "(4.43 GB KV cache is needed"): read as GiB
        "KV cache too small for one request (V1 0.8, GiB printed as GB)", "startup_kv_insufficient",
        "GB KV cache is needed",
        r"max seq len \((?P<len>\d+)\), \((?P<requested_bytes__gib>[\d.]+) GB KV cache is needed"
        r", which is larger than the available KV cache memory \((?P<free_bytes__gib>-?[\d.]+) "
        r"GB\)",
        "max seq len {len} needs {requested_bytes__gib} GiB of KV cache; "
        "{free_bytes__gib} GiB available",
        "ValueError: To serve at least one request with the models's max seq len (116160), (4.43 "
        "GB KV cache is needed, which is larger than the available KV cache memory (3.48 GB). Try "
        "increasing gpu_memory_utilization or decreasing max_model_len when initializing the "
        "engine.",
        "v1-0.7",
    ),
    EventLine(
        "less memory free at start-up than asked for (V1 0.9+)", "startup_memory_insufficient",
        "on startup is less than desired GPU memory utilization",
        r"Free memory on device(?: (?P<device>\S+))? \((?P<free_bytes__gib>[\d.]+)/"
        r"(?P<total_bytes__gib>[\d.]+) GiB\) on startup is less than desired GPU memory "
        r"utilization \((?P<utilization>[\d.]+), (?P<requested_bytes__gib>[\d.]+) GiB\)",
        "{free_bytes__gib} GiB of [{device}'s ]{total_bytes__gib} GiB free at start-up, less than "
        "the {requested_bytes__gib} GiB asked for (gpu_memory_utilization {utilization}): other "
        "processes hold the rest",
        "ValueError: Free memory on device (59.32/79.15 GiB) on startup is less than desired GPU "
        "memory utilization (0.9, 71.24 GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes.",
        "v1-0.8.5",
    ),
    EventLine(
        "KV cache too small for one request (V0)", "startup_kv_insufficient",
        "is larger than the maximum number of tokens that can be stored in KV cache",
        r"max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be "
        r"stored in KV cache \((?P<tokens>\d+)\)",
        "max seq len {len} is above the {tokens} tokens the KV cache can hold",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
        "that can be stored in KV cache (21680). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.",
        "v0",
    ),
    EventLine(
        "engine start", "engine_start", "LLM engine (v",
        r"^Initializing an? (?:V[01] )?LLM engine \(v(?P<version>[^)\s]+)\) with config: "
        r"model='?(?P<model>[^',]+)",
        "vLLM {version} engine initialising for {model}",
        "Initializing an LLM engine (v0.6.6) with config: model='/models/Qwen2-0.5B', "
        "speculative_config=None",
    ),
    EventLine(
        "engine core fatal error", "engine_dead", "EngineCore encountered a fatal error",
        r"EngineCore encountered a fatal error", "EngineCore encountered a fatal error",
        "EngineCore encountered a fatal error.", "v1-0.8.5",
    ),
    EventLine(
        # the early V1 client's (vllm/v1/engine/core_client.py) answer to the core's SIGUSR1
        "engine core fatal signal", "engine_dead", "Got fatal signal from worker processes",
        r"Got fatal signal from worker processes", "the engine core sent a fatal signal",
        "Got fatal signal from worker processes, shutting down. See stack trace above for root "
        "cause issue.",
        "v1-0.7",
    ),
    EventLine(
        # 0.8.0 - 0.8.4's engine core (vllm/v1/engine/core.py, run_engine_core), before its
        # wording became "EngineCore failed to start." / "encountered a fatal error"
        # (https://github.com/vllm-project/vllm/pull/14728, vllm-project/vllm#16749)
        "engine core hit an exception", "engine_dead", "EngineCore hit an exception",
        r"EngineCore hit an exception", "EngineCore hit an exception",
        "EngineCore hit an exception: Traceback (most recent call last):", "v1-0.8.5",
    ),
    EventLine(
        "engine core failed to start", "engine_dead", "EngineCore failed to start",
        r"EngineCore failed to start", "EngineCore failed to start",
        "EngineCore failed to start.", "v1-0.8.5",
    ),
    EventLine(
        "engine core process died", "engine_dead", "died unexpectedly",
        r"Engine core proc (?P<proc>\S+) died unexpectedly",
        "engine core process {proc} died unexpectedly",
        "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.", "v1-0.8.5",
    ),
    EventLine(
        "engine dead error", "engine_dead", "EngineCore encountered an issue",
        r"EngineCore encountered an issue", "EngineDeadError: EngineCore encountered an issue",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
        "v1-0.8.5",
    ),
    EventLine(
        "worker hit an exception", "engine_dead", "WorkerProc hit an exception",
        r"WorkerProc hit an exception", "a worker process hit an exception",
        "WorkerProc hit an exception.", "v1-0.8.5",
    ),
    EventLine(
        "worker failed (executor)", "engine_dead", "Worker failed with error",
        r"Worker failed with error", "the executor reported a failed worker",
        "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 1.25 "
        "GiB.', please check the stack trace above for the root cause",
    ),
    EventLine(
        "output handler failed", "engine_dead", "AsyncLLM output_handler failed",
        r"AsyncLLM output_handler failed", "AsyncLLM output handler failed",
        "AsyncLLM output_handler failed.",
    ),
    EventLine(
        "V0 engine loop died", "engine_dead", "Engine loop has died",
        r"Engine loop has died", "the V0 engine loop died",
        "RuntimeError: Engine loop has died", "v0",
    ),
    EventLine(
        # the shell's word for a child killed by SIGKILL; after vLLM's start-up lines that is
        # most often the kernel's OOM killer, for want of host RAM (pinned CPU swap space, weights
        # staged in RAM), not device memory (https://github.com/liunian-Jay/MU-GOT/issues/17)
        "killed by SIGKILL", "engine_dead", "Killed",
        r"^Killed\s*$", SHELL_KILL,
        "Killed",
    ),
    EventLine(
        # Docker Compose's word for the engine's container killed by SIGKILL (128 + 9), under a
        # log the vLLM parser reads (oomtrace/ingest/torch/host_kill.py: host or container memory)
        "container exited 137", "engine_dead", "exited with code 137",
        r"\bexited with code 137\b", CONTAINER_KILL_DETAIL,
        "vllm-1 exited with code 137",
    ),
    EventLine(
        # V1's engine core when a worker died while starting (the cause is in the worker's lines)
        "worker initialisation failed", "engine_dead", "WorkerProc initialization failed",
        r"WorkerProc initialization failed", "EngineCore failed to start",
        "Exception: WorkerProc initialization failed due to an exception in a background "
        "process. See stack trace for root cause.",
    ),
    EventLine(
        "V0 MQ engine already dead", "engine_dead", "MQLLMEngine is already dead",
        r"MQLLMEngine is already dead", "the V0 engine process is dead",
        "MQLLMEngine is already dead, terminating server process", "v0",
    ),
    EventLine(
        # 0.6 - 0.8's multiprocessing front end (vllm/engine/multiprocessing/__init__.py,
        # ENGINE_DEAD_ERROR), told to every request after the engine loop stopped
        "V0 MQ engine loop not running", "engine_dead", "Engine loop is not running",
        r"MQEngineDeadError: Engine loop is not running", "the V0 engine loop is not running",
        "vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not running. Inspect the "
        "stacktrace to find the original error: RuntimeError('Engine loop has died').",
        "v0",
    ),
    EventLine(
        "V0 background loop errored", "engine_dead", "Background loop has errored already",
        r"Background loop has errored already", "the V0 background loop failed",
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored "
        "already.",
        "v0",
    ),
    EventLine(
        # Python's multiprocessing announcing that a process's target raised (BaseProcess.
        # _bootstrap prints "Process <name>:" and the traceback): V1's engine core died, whatever
        # the message after it says (https://github.com/noonghunna/club-3090/issues/60)
        "engine core process raised", "engine_dead", "Process EngineCore",
        r"^Process EngineCore(?:_DP\d+|_\d+)?:\s*$",
        "the engine core process ended on an exception",
        "Process EngineCore_DP0:", "v1-0.8.5",
    ),
    EventLine(
        # 0.4 - 0.5's AsyncLLMEngine when its engine loop task ended on an exception
        # (vllm/engine/async_llm_engine.py, _log_task_completion; vllm-project/vllm#5697)
        "V0 engine task finished", "engine_dead", "Task finished unexpectedly",
        r"AsyncEngineDeadError: Task finished unexpectedly", "the V0 engine loop task ended",
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly. This "
        "should never happen! Please open an issue on Github. See stack trace above for the "
        "actual cause.",
        "v0",
    ),
)  # fmt: skip

# The start-up refusals: however many lines (ranks, tracebacks) tell of one, it is one event.
STARTUP_REFUSALS: Final = (
    "startup_kv_insufficient", "startup_no_kv_memory", "startup_memory_insufficient"
)  # fmt: skip

PREEMPT_LITERAL: Final = "is preempted by PreemptionMode."
PREEMPT: Final = (
    r"^Sequence group (?P<id>\S+) is preempted by PreemptionMode\.(?P<mode>\w+) mode because "
    r"there is not enough KV cache space\..*total_num_cumulative_preemption=(?P<total>\d+)"
)
PREEMPT_SAMPLE: Final = (
    "Sequence group 147 is preempted by PreemptionMode.RECOMPUTE mode because there is not "
    "enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption=1"
)
# V0 logs the warning when the cumulative count is 1, 51, 101, ... only.
PREEMPT_LOG_EVERY: Final = 50

# Lines that can carry prompt or output text: never shown as a skipped-line example.
PRIVATE_MARKERS: Final = ("prompt", "output", "JSON body", "messages", "text", "Received ")

# What only vLLM prints, read in a file of records pasted without their logger prefix (an issue,
# a wrapper's error message): start-up figures, refusals, the V0 preemption warning.
BARE_SNIFF: Final = (
    r"GPU KV cache size: [\d,]+ tokens|Available KV cache memory: -?[\d.]+ GiB|"
    r"# GPU blocks: \d+|Memory profiling results:|Loading model weights took [\d.]+ GB|"
    r"Maximum concurrency for [\d,]+ tokens per request|on startup is less than desired GPU memory"
    r"|Desired GPU memory utilization is \(|"
    + PREEMPT_LITERAL.replace(".", r"\.")
    + r"|KV cache is needed, which is larger than the available KV cache memory"
    # The same refusal's opening words, whole where a terminal folded the line after them.
    r"|To serve at least one request with the models?'s? max seq len \(\d+\)"
    r"|is larger than the maximum number of tokens that can be stored in KV cache"
    # The engine's death, by the names only vLLM gives it (an OOM above it is then vLLM's).
    r"|EngineDeadError: EngineCore encountered|MQEngineDeadError: Engine loop is not running"
    # V1's process prefixes on a traceback's frames pasted without the logger's header
    # (https://github.com/vllm-project/vllm/issues/24814); an OOM line alone under such a prefix
    # stays PyTorch's reader's, which reads tqdm's shard progress beside it
    r"|(?m:^\((?:EngineCore(?:_DP\d+)?|APIServer|Worker(?:_[TPDE]P\d+)*|VllmWorker rank=\d+) "
    r"pid=\d+\) +File \"[^\"]+\", line \d+, in )"
)
SNIFF_MARKERS: Final = (
    STATS_LITERAL,
    "vLLM API server version",
    "LLM engine (v",
    "non-default args:",
    "KV cache size:",
    "# GPU blocks:",
    "Available KV cache memory",
    "Loading model weights took",
    "Model loading took",
    "Received request ",
    "Added request ",
    "EngineCore",
    "[loggers.py:",
    "metrics.py:",
)
