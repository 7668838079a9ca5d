"""vLLM's log lines, per version family, as data: each entry has the pattern, the version family
it proves (a lower bound; ``None`` when it proves nothing), a real sample line (from
reference/formats.md, which cites the release and source line of each) and what that sample
must yield. ``tests/unit/ingest/vllm/test_line_patterns.py`` runs every sample through the parser.

Group names in ``pattern`` and ``extras`` are ``<key>__<conversion>``; conversions are
:data:`Conversion`. vLLM prints "GB" for GiB in its early weight-loading line (the value is
``bytes / 2**30``), hence ``gb_means_gib`` there and nowhere else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

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

Conversion = Literal["gib", "gb_means_gib", "int", "float", "str", "bool"]

# The engine's own prefix: level, MM-DD HH:MM:SS, [file:line] (bracketed from 0.8).
HEADER: Final = (
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>[0-9]{2}-[0-9]{2}) "
    r"(?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,][0-9]+)? (?P<br>\[)?[^\s\]]+:[0-9]+\] "
)
# A second record glued onto a line (a missing newline), with its optional process prefix.
GLUED: Final = (
    r"(?:\((?:[^()\n]|\([^()\n]*\))*? ?pid=\d+(?:, ip=[0-9A-Za-z.:\-]+)?\) )?"
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d (?:\[[^\s\]]+:\d+\]|"
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
    r"(?:, (?P<device>[A-Za-z]+(?: \+ host)?) KV cache usage: (?P<kv_pct>[\d.]+)%)?"
    r"(?:, CPU KV cache usage: [\d.]+%)?"
    r"(?:, Prefix cache hit rate: (?P<prefix_pct>[\d.]+)%)?"
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
        "V1 0.30+ device-aware, no prefix-cache queries",
        "v1-0.30",
        "Engine 000: Avg prompt throughput: 0.9 tokens/s, Avg generation throughput: 6.3 "
        "tokens/s, Running: 1 reqs, Waiting: 0 reqs, XPU KV cache usage: 0.6%",
        {"requests_running": 1, "kv_usage_ratio": 0.006},
    ),
)  # fmt: skip


# --- startup: what the engine states about itself -> manifest engine_config -----------------


@dataclass(frozen=True)
class ConfigLine:
    """A startup line; its named groups (and ``extras``, each searched anywhere in the line)
    become ``engine_config`` keys. ``expect`` is what ``sample`` yields."""

    name: str
    literal: str
    pattern: str
    sample: str
    expect: Mapping[str, object]
    family: Family | None = None
    extras: tuple[tuple[str, str, Conversion], ...] = ()


_GIB = 1 << 30


def _gib(value: float) -> int:
    return round(value * _GIB)


_ARGS_DICT: Final[tuple[tuple[str, str, Conversion], ...]] = (
    ("model", r"'model': '([^']+)'", "str"),
    ("max_model_len", r"'max_model_len': (\d+)", "int"),
    ("max_num_seqs", r"'max_num_seqs': (\d+)", "int"),
    ("max_num_batched_tokens", r"'max_num_batched_tokens': (\d+)", "int"),
    ("gpu_memory_utilization", r"'gpu_memory_utilization': ([\d.]+)", "float"),
    ("block_size", r"'block_size': (\d+)", "int"),
    ("tensor_parallel_size", r"'tensor_parallel_size': (\d+)", "int"),
    ("kv_cache_dtype", r"'kv_cache_dtype': '([^']+)'", "str"),
    ("max_log_len", r"'max_log_len': (\d+)", "int"),
)
_ARGS_NAMESPACE: Final[tuple[tuple[str, str, Conversion], ...]] = (
    ("model", r"[(,] model='([^']+)'", "str"),
    ("max_model_len", r"\bmax_model_len=(\d+)", "int"),
    ("max_num_seqs", r"\bmax_num_seqs=(\d+)", "int"),
    ("max_num_batched_tokens", r"\bmax_num_batched_tokens=(\d+)", "int"),
    ("gpu_memory_utilization", r"\bgpu_memory_utilization=([\d.]+)", "float"),
    ("block_size", r"\bblock_size=(\d+)", "int"),
    ("tensor_parallel_size", r"\btensor_parallel_size=(\d+)", "int"),
    ("kv_cache_dtype", r"\bkv_cache_dtype='?([\w]+)", "str"),
    ("max_log_len", r"\bmax_log_len=(\d+)", "int"),
)
_ENGINE_CONFIG: Final[tuple[tuple[str, str, Conversion], ...]] = (
    ("max_model_len", r"\bmax_seq_len=(\d+)", "int"),
    ("tensor_parallel_size", r"\btensor_parallel_size=(\d+)", "int"),
    ("pipeline_parallel_size", r"\bpipeline_parallel_size=(\d+)", "int"),
    ("data_parallel_size", r"\bdata_parallel_size=(\d+)", "int"),
    ("dtype", r"\bdtype=(?:torch\.)?(\w+)", "str"),
    ("kv_cache_dtype", r"\bkv_cache_dtype=(\w+)", "str"),
    ("quantization", r"\bquantization=(\w+)", "str"),
    ("enable_prefix_caching", r"\benable_prefix_caching=(True|False)", "bool"),
    ("served_model_name", r"\bserved_model_name=([^,]+),", "str"),
)

CONFIG_LINES: Final[tuple[ConfigLine, ...]] = (
    ConfigLine(
        "weights, 'GB' meaning GiB (V0 <= 0.7, V1 0.7.3)", "Loading model weights took",
        r"^Loading model weights took (?P<model_weights_bytes__gb_means_gib>[\d.]+) GB",
        "Loading model weights took 67.7229 GB", {"model_weights_bytes": _gib(67.7229)},
    ),
    ConfigLine(
        "weights 0.8 - 0.11", "Model loading took",
        r"^Model loading took (?P<model_weights_bytes__gib>[\d.]+) GiB and "
        r"(?P<model_load_seconds__float>[\d.]+) seconds",
        "Model loading took 14.9889 GiB and 4.261813 seconds",
        {"model_weights_bytes": _gib(14.9889), "model_load_seconds": 4.261813}, "v1-0.7",
    ),
    ConfigLine(
        "weights 0.12+", "Model loading took",
        r"^Model loading took (?P<model_weights_bytes__gib>[\d.]+) GiB memory and "
        r"(?P<model_load_seconds__float>[\d.]+) seconds",
        "Model loading took 15.27 GiB memory and 6.123456 seconds",
        {"model_weights_bytes": _gib(15.27)}, "v1-0.12",
    ),
    ConfigLine(
        "profiling V0 0.6.4", "Memory profiling results:",
        r"^Memory profiling results: total_gpu_memory=(?P<device_total_bytes__gib>[\d.]+)GiB "
        r"initial_memory_usage=[\d.]+GiB peak_torch_memory=(?P<torch_peak_bytes__gib>[\d.]+)GiB "
        r"memory_usage_post_profile=[\d.]+GiB non_torch_memory=(?P<non_torch_bytes__gib>-?[\d.]+)"
        r"GiB kv_cache_size=(?P<available_kv_cache_bytes__gib>-?[\d.]+)GiB "
        r"gpu_memory_utilization=(?P<gpu_memory_utilization__float>[\d.]+)",
        "Memory profiling results: total_gpu_memory=79.15GiB initial_memory_usage=15.52GiB "
        "peak_torch_memory=16.21GiB memory_usage_post_profile=15.76GiB non_torch_memory=0.24GiB "
        "kv_cache_size=54.79GiB gpu_memory_utilization=0.90",
        {"device_total_bytes": _gib(79.15), "available_kv_cache_bytes": _gib(54.79),
         "gpu_memory_utilization": 0.9}, "v0",
    ),
    ConfigLine(
        "profiling V0 0.6.6+, line 1", "Memory profiling takes",
        r"^Memory profiling takes [\d.]+ seconds$",
        "Memory profiling takes 17.59 seconds", {}, "v0",
    ),
    ConfigLine(
        "profiling V0 0.6.6+, line 2", "the current vLLM instance can use total_gpu_memory",
        r"^the current vLLM instance can use total_gpu_memory \((?P<device_total_bytes__gib>"
        r"[\d.]+)GiB\) x gpu_memory_utilization \((?P<gpu_memory_utilization__float>[\d.]+)\) = "
        r"(?P<requested_memory_bytes__gib>[\d.]+)GiB",
        "the current vLLM instance can use total_gpu_memory (23.58GiB) x gpu_memory_utilization "
        "(0.99) = 23.35GiB",
        {"device_total_bytes": _gib(23.58), "gpu_memory_utilization": 0.99,
         "requested_memory_bytes": _gib(23.35)}, "v0",
    ),
    ConfigLine(
        "profiling V0 0.6.6+, line 3", "model weights take",
        r"^model weights take (?P<profiled_weights_bytes__gib>-?[\d.]+)GiB; non_torch_memory "
        r"takes (?P<non_torch_bytes__gib>-?[\d.]+)GiB; PyTorch activation peak memory takes "
        r"(?P<activation_peak_bytes__gib>-?[\d.]+)GiB; the rest of the memory reserved for KV "
        r"Cache is (?P<available_kv_cache_bytes__gib>-?[\d.]+)GiB",
        "model weights take 21.21GiB; non_torch_memory takes 0.20GiB; PyTorch activation peak "
        "memory takes 0.37GiB; the rest of the memory reserved for KV Cache is 1.57GiB.",
        {"profiled_weights_bytes": _gib(21.21), "activation_peak_bytes": _gib(0.37),
         "available_kv_cache_bytes": _gib(1.57)}, "v0",
    ),
    ConfigLine(
        "profiling V1 0.10 - 0.33 (DEBUG)", "Total non KV cache memory",
        r"^Memory profiling takes [\d.]+ seconds\. Total non KV cache memory: "
        r"(?P<non_kv_cache_bytes__gib>[\d.]+)GiB; torch peak memory increase: "
        r"(?P<activation_peak_bytes__gib>-?[\d.]+)GiB; (?:non-torch forward increase memory: "
        r"(?P<non_torch_bytes__gib>-?[\d.]+)GiB|total consumed \(from mem_get_info\): "
        r"[\d.]+GiB); weights memory: (?P<profiled_weights_bytes__gib>[\d.]+)GiB",
        "Memory profiling takes 5.12 seconds. Total non KV cache memory: 16.58GiB; torch peak "
        "memory increase: 1.39GiB; non-torch forward increase memory: 0.20GiB; weights memory: "
        "14.99GiB.",
        {"non_kv_cache_bytes": _gib(16.58), "profiled_weights_bytes": _gib(14.99)}, "v1-0.8.5",
    ),
    ConfigLine(
        "free memory V1 (DEBUG)", "Initial free memory:",
        r"^Initial free memory: (?P<initial_free_bytes__gib>[\d.]+) GiB; Requested memory: "
        r"(?P<gpu_memory_utilization__float>[\d.]+) \(util\), (?P<requested_memory_bytes__gib>"
        r"[\d.]+) GiB",
        "Initial free memory: 78.66 GiB; Requested memory: 0.90 (util), 71.24 GiB",
        {"initial_free_bytes": _gib(78.66), "gpu_memory_utilization": 0.9}, "v1-0.8.5",
    ),
    ConfigLine(
        "KV budget V1 0.9+", "Available KV cache memory:",
        r"^Available KV cache memory: (?P<available_kv_cache_bytes__gib>-?[\d.]+) GiB",
        "Available KV cache memory: 2.30 GiB", {"available_kv_cache_bytes": _gib(2.30)},
        "v1-0.8.5",
    ),
    ConfigLine(
        "blocks V0 <= 0.6", "# GPU blocks: ",
        r"^# GPU blocks: (?P<num_gpu_blocks__int>\d+), # CPU blocks: (?P<num_cpu_blocks__int>\d+)",
        "# GPU blocks: 27871, # CPU blocks: 2048",
        {"num_gpu_blocks": 27871, "num_cpu_blocks": 2048}, "v0",
    ),
    ConfigLine(
        "blocks V0 0.7 - 0.10 (device name)", " blocks: ",
        r"^# (?P<block_device__str>[a-z]+) blocks: (?P<num_gpu_blocks__int>\d+), # CPU blocks: "
        r"(?P<num_cpu_blocks__int>\d+)",
        "# cuda blocks: 1381, # CPU blocks: 2048", {"num_gpu_blocks": 1381}, "v0",
    ),
    ConfigLine(
        "blocks V1 0.6.6 - 0.7.3", "# GPU blocks: ",
        r"^# GPU blocks: (?P<num_gpu_blocks__int>\d+)$",
        "# GPU blocks: 1381", {"num_gpu_blocks": 1381}, "v1-0.7",
    ),
    ConfigLine(
        "KV size V1 0.8 - 0.27", "KV cache size: ",
        r"^GPU KV cache size: (?P<kv_cache_tokens__int>[\d,]+) tokens$",
        "GPU KV cache size: 2,042,016 tokens", {"kv_cache_tokens": 2042016}, "v1-0.7",
    ),
    ConfigLine(
        "KV size and concurrency, one line, 0.28+", "KV cache size: ",
        r"^(?P<kv_device__str>GPU|GPU \+ host|[A-Z]+) KV cache size: (?P<kv_cache_tokens__int>"
        r"[\d,]+) tokens, Maximum concurrency for (?P<max_concurrency_tokens__int>[\d,]+) tokens "
        r"per request: (?P<max_concurrency__float>[\d.]+)x",
        "GPU KV cache size: 67,856 tokens, Maximum concurrency for 32,768 tokens per request: "
        "2.07x",
        {"kv_cache_tokens": 67856, "max_concurrency_tokens": 32768, "max_concurrency": 2.07},
        "v1-0.20",
    ),
    ConfigLine(
        "concurrency 0.6.3 - 0.27", "Maximum concurrency for ",
        r"^Maximum concurrency for (?P<max_concurrency_tokens__int>[\d,]+) tokens per request: "
        r"(?P<max_concurrency__float>[\d.]+)x",
        "Maximum concurrency for 120,000 tokens per request: 2.48x",
        {"max_concurrency_tokens": 120000, "max_concurrency": 2.48},
    ),
    ConfigLine(
        "blocks after init, V1 0.8.5+", "with initialization after num_gpu_blocks is",
        r"^Engine \d+: vllm cache_config_info with initialization after num_gpu_blocks is: "
        r"(?P<num_gpu_blocks__int>\d+)",
        "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 4741",
        {"num_gpu_blocks": 4741}, "v1-0.8.5",
    ),
    ConfigLine(
        "CUDA graphs", "Graph capturing finished in",
        r"^Graph capturing finished in (?P<cuda_graph_seconds__float>[\d.]+) secs?"
        r"(?:, took (?P<cuda_graph_bytes__gib>-?[\d.]+) GiB)?",
        "Graph capturing finished in 12 secs, took 0.52 GiB",
        {"cuda_graph_seconds": 12.0, "cuda_graph_bytes": _gib(0.52)},
    ),
    ConfigLine(
        "init done 0.6.6 - 0.16", "init engine (profile, create kv cache, warmup model) took",
        r"^init engine \(profile, create kv cache, warmup model\) took "
        r"(?P<init_engine_seconds__float>[\d.]+) seconds",
        "init engine (profile, create kv cache, warmup model) took 55.31 seconds",
        {"init_engine_seconds": 55.31},
    ),
    ConfigLine(
        "init done 0.20+", "init engine (profile, create kv cache, warmup model) took",
        r"^init engine \(profile, create kv cache, warmup model\) took "
        r"(?P<init_engine_seconds__float>[\d.]+) s(?: |$)",
        "init engine (profile, create kv cache, warmup model) took 41.20 s (compilation: 20.10 s)",
        {"init_engine_seconds": 41.2}, "v1-0.20",
    ),
    ConfigLine(
        "engine config line", "LLM engine (v",
        r"^Initializing an? (?:(?P<engine_kind__str>V[01]) )?LLM engine \(v(?P<version__str>"
        r"[^)\s]+)\) with config: model='?(?P<model__str>[^',]+)'?,",
        "Initializing a V1 LLM engine (v0.8.3) with config: model='Qwen/Qwen2.5-7B-Instruct', "
        "speculative_config=None, tokenizer='Qwen/Qwen2.5-7B-Instruct', skip_tokenizer_init="
        "False, tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16,"
        " max_seq_len=102400, download_dir=None, load_format=auto, tensor_parallel_size=1, "
        "pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
        "enforce_eager=True, kv_cache_dtype=auto,  device_config=cuda, seed=None, "
        "served_model_name=Qwen/Qwen2.5-7B-Instruct, enable_prefix_caching=True, "
        "chunked_prefill_enabled=True",
        {"version": "0.8.3", "model": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 102400,
         "tensor_parallel_size": 1, "dtype": "bfloat16", "enable_prefix_caching": True},
        extras=_ENGINE_CONFIG,
    ),
    ConfigLine(
        "API server version", "vLLM API server version",
        r"^vLLM API server version (?P<version__str>\S+)",
        "vLLM API server version 0.10.1", {"version": "0.10.1"},
    ),
    ConfigLine(
        "non-default args 0.9+", "non-default args: {", r"^non-default args: \{",
        "non-default args: {'model': 'Qwen/Qwen3-0.6B', 'max_model_len': 8192, "
        "'gpu_memory_utilization': 0.85, 'max_num_seqs': 64, 'block_size': 32}",
        {"model": "Qwen/Qwen3-0.6B", "max_model_len": 8192, "gpu_memory_utilization": 0.85,
         "max_num_seqs": 64, "block_size": 32},
        extras=_ARGS_DICT,
    ),
    ConfigLine(
        "args Namespace (<= 0.8)", "args: Namespace(", r"^args: Namespace\(",
        "args: Namespace(host=None, port=8000, model='meta-llama/Llama-3.1-8B-Instruct', "
        "tokenizer=None, block_size=16, max_model_len=8192, gpu_memory_utilization=0.9, "
        "max_num_seqs=256, max_num_batched_tokens=None, max_log_len=None)",
        {"model": "meta-llama/Llama-3.1-8B-Instruct", "block_size": 16, "max_num_seqs": 256},
        extras=_ARGS_NAMESPACE,
    ),
    ConfigLine(
        "resolved max model len", "Using max model len",
        r"^Using max model len (?P<max_model_len__int>\d+)", "Using max model len 32768",
        {"max_model_len": 32768},
    ),
    ConfigLine(
        "max_num_seqs default (DEBUG)", "Setting max_num_seqs to",
        r"^Setting max_num_seqs to (?P<max_num_seqs__int>\d+) for",
        "Setting max_num_seqs to 1024 for OPENAI_API_SERVER usage context.",
        {"max_num_seqs": 1024},
    ),
    ConfigLine(
        "chunked prefill budget", "Chunked prefill is enabled with max_num_batched_tokens=",
        r"^Chunked prefill is enabled with max_num_batched_tokens=(?P<max_num_batched_tokens__int>"
        r"\d+)",
        "Chunked prefill is enabled with max_num_batched_tokens=8192.",
        {"max_num_batched_tokens": 8192},
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
        "KV cache too small for one request (V1)", "startup_kv_insufficient", "KV cache is needed",
        r"max seq len \((?P<len>\d+)\), \((?P<requested_bytes__gib>[\d.]+) GiB KV cache is needed"
        r", which is larger than the available KV cache memory \((?P<free_bytes__gib>-?[\d.]+) "
        r"GiB\)\. Based on the available memory, the estimated maximum model length is "
        r"(?P<estimate>\d+)",
        "max seq len {len} needs {requested_bytes__gib} GiB of KV cache; "
        "{free_bytes__gib} GiB available; estimated maximum model length {estimate}",
        "ValueError: To serve at least one request with the models's max seq len (131072), "
        "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.38 "
        "GiB). Based on the available memory, the estimated maximum model length is 76784. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
        "engine.",
        "v1-0.7",
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
        "V0 MQ engine already dead", "engine_dead", "MQLLMEngine is already dead",
        r"MQLLMEngine is already dead", "the V0 engine process is dead",
        "MQLLMEngine is already dead, terminating server process", "v0",
    ),
    EventLine(
        "V0 background loop errored", "engine_dead", "Background loop has errored already",
        r"Background loop has errored already", "the V0 background loop failed",
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored "
        "already.",
        "v0",
    ),
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


# --- request lifecycle -----------------------------------------------------------------------


@dataclass(frozen=True)
class RequestLine:
    """A request lifecycle line: ``pattern`` captures ``id`` (or ``ids``, comma-joined)."""

    name: str
    event: str
    literal: str
    pattern: str
    sample: str
    expect: Mapping[str, object]
    family: Family | None = None

    @property
    def lead(self) -> str:
        """The words the line starts with (what the classifier saw)."""
        found = re.match(r"\^([A-Za-z]+(?: [a-z]+)?)", self.pattern)
        return found.group(1) if found else ""


# The request line of every version (the one a busy server prints most).
RECEIVED: Final = r"^Received request (?P<id>[^\s:]+): (?:prompt|params): "

REQUEST_LINES: Final[tuple[RequestLine, ...]] = (
    RequestLine(
        "received <= 0.11 (prompt, params, token ids)", "arrived", "Received request ", RECEIVED,
        "Received request cmpl-02f7ed907eda4ad590c0fa925b945247-0: prompt: 'The future of AI is',"
        " params: SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
        "repetition_penalty=1.05, temperature=0.0, top_p=1.0, top_k=-1, min_p=0.0, seed=None, "
        "stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, ignore_eos="
        "False, max_tokens=7, min_tokens=0, logprobs=None, prompt_logprobs=None, "
        "skip_special_tokens=True, spaces_between_special_tokens=True, truncate_prompt_tokens="
        "None, guided_decoding=None, extra_args=None), prompt_token_ids: [785, 3853, 315, 15235, "
        "374], lora_request: None, prompt_adapter_request: None.",
        {"request_id": "cmpl-02f7ed907eda4ad590c0fa925b945247-0", "max_tokens": 7,
         "prompt_tokens": 5},
    ),
    RequestLine(
        "received 0.12+ (params only)", "arrived", "Received request ", RECEIVED,
        "Received request chatcmpl-5b1a: params: SamplingParams(n=1, temperature=0.7, top_p=1.0,"
        " stop=[')'], max_tokens=512, min_tokens=0, logprobs=None, structured_outputs=None, "
        "extra_args=None), lora_request: None.",
        {"request_id": "chatcmpl-5b1a", "max_tokens": 512, "prompt_tokens": None},
    ),
    RequestLine(
        "request details 0.12+ (DEBUG)", "arrived", " details: prompt: ",
        r"^Request (?P<id>[^\s:]+) details: prompt: ",
        "Request chatcmpl-5b1a details: prompt: 'max_tokens=9 is what I want', prompt_token_ids:"
        " [1, 2, 3], prompt_embeds shape: None.",
        {"request_id": "chatcmpl-5b1a", "prompt_tokens": 3},
    ),
    RequestLine(
        "added (engine side)", "admitted", "Added request ", r"^Added request (?P<id>\S+)$",
        "Added request cmpl-02f7ed907eda4ad590c0fa925b945247-0.",
        {"request_id": "cmpl-02f7ed907eda4ad590c0fa925b945247-0"},
    ),
    RequestLine(
        "finished (V0 AsyncLLMEngine)", "finished", "Finished request ",
        r"^Finished request (?P<id>\S+)$",
        "Finished request cmpl-50c32d7a66084c3f9980d2bf06d79900-0.",
        {"request_id": "cmpl-50c32d7a66084c3f9980d2bf06d79900-0"}, "v0",
    ),
    RequestLine(
        "aborted (V0, V1 <= 0.9; V1 0.10+ comma-joined)", "aborted", "Aborted request",
        r"^Aborted request(?:\(s\))? (?P<ids>.+)$",
        "Aborted request(s) chatcmpl-a1, chatcmpl-b2.", {"request_id": "chatcmpl-a1"},
    ),
    RequestLine(
        "aborted or failed (V1 0.8.5+)", "aborted", "Request ",
        r"^Request (?P<id>\S+) (?P<what>aborted|failed)(?: \((?P<why>[^)]*)\))?",
        "Request chatcmpl-c3 failed (engine dead).", {"request_id": "chatcmpl-c3"}, "v1-0.8.5",
    ),
    RequestLine(
        "rejected, full waiting queue", "rejected", "was rejected due to a full waiting queue",
        r"^Request (?P<id>\S+) was rejected due to a full waiting queue",
        "Request chatcmpl-d4 was rejected due to a full waiting queue (log every 100 requests)",
        {"request_id": "chatcmpl-d4"},
    ),
    RequestLine(
        "client disconnect", "aborted", "cancelled by client disconnect",
        r"^Streaming request (?P<id>\S+) cancelled by client disconnect",
        "Streaming request chatcmpl-e5 cancelled by client disconnect",
        {"request_id": "chatcmpl-e5"},
    ),
    RequestLine(
        "generated response (output logging, 0.10.1+)", "finished", "Generated response ",
        r"^Generated response (?P<id>[^\s:]+)(?P<stream> \(streaming (?:delta|complete)\))?"
        r"(?P<details> details)?: ",
        "Generated response chatcmpl-f6: output: 'Paris.', output_token_ids: [60704, 13, 2], "
        "finish_reason: stop",
        {"request_id": "chatcmpl-f6", "output_tokens": 3},
    ),
    RequestLine(
        "preempted (V0 warning)", "preempted", PREEMPT_LITERAL, PREEMPT, PREEMPT_SAMPLE,
        {"request_id": "147"}, "v0",
    ),
    RequestLine(
        "resumed after preemption (LMCache connector)", "resumed", "has been resumed",
        r"^Preempted request (?P<id>\S+) has been resumed",
        "Preempted request cmpl-9f-0 has been resumed!", {"request_id": "cmpl-9f-0"},
    ),
)  # fmt: skip

# Lines that can carry prompt or output text: never shown as a skipped-line example.
PRIVATE_MARKERS: Final = ("prompt", "output", "JSON body", "messages", "text", "Received ")

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
