"""Which Prometheus series mean what: every engine's exposed names by version, as data.

One row per exposed sample name (reference/formats.md §1.2, §3.3, §4.1, §5, §6), each with the
exposition line that exercises it; ``tests/unit/ingest/prometheus/test_dialects.py`` runs every
sample through the parser. A row whose ``metric`` is None is a family oomtrace knows and
deliberately does not map (``why`` says why); a family in no row is counted as unmapped.

Version families are data too: :data:`FAMILIES` names the family a set of exposed names points
to, first match wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MiB: Final = 1 << 20


@dataclass(frozen=True)
class Series:
    """One exposed sample name and what it becomes.

    ``scale`` turns the exposed unit into the canonical one (DCGM's MiB into bytes).
    ``priority``: when two names give the same metric for one series at one instant (vLLM
    0.9.2-0.10.x exports both KV usage names), the lower number is kept.
    ``reason``: the row applies only to samples whose ``reason`` label has this value.
    """

    name: str
    engine: str
    metric: str | None
    versions: str
    sample: str
    scale: float = 1.0
    priority: int = 0
    reason: str | None = None
    why: str = ""


def _v(
    name: str,
    metric: str | None,
    versions: str,
    sample: str,
    *,
    priority: int = 0,
    reason: str | None = None,
    why: str = "",
) -> Series:
    return Series(
        f"vllm:{name}", "vllm", metric, versions, sample, priority=priority, reason=reason, why=why
    )


_VL = '{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
_VL0 = '{model_name="Qwen/Qwen2.5-Coder-32B-Instruct"}'
_SG = '{engine_type="unified",model_name="Qwen-32B",pp_rank="0",tp_rank="0"}'
_DC = '{gpu="0",UUID="GPU-34319582-d595-d1c7-d1d2-179bcfa61660",device="nvidia0",Hostname="ub20-a100-k8s"}'  # noqa: E501

SERIES: Final[tuple[Series, ...]] = (
    # vLLM (V0 and V1; labels model_name, plus engine from V1 0.8.5)
    _v("kv_cache_usage_perc", "kv_usage_ratio", "0.9.2-", f"vllm:kv_cache_usage_perc{_VL} 0.9871"),
    _v(
        "gpu_cache_usage_perc",
        "kv_usage_ratio",
        "V0 0.4.3-0.10.x; V1 0.7.3-0.11.0 (hidden in 0.11)",
        f"vllm:gpu_cache_usage_perc{_VL0} 0.25",
        priority=1,
    ),
    _v(
        "num_requests_running", "requests_running", "0.4.3-", f"vllm:num_requests_running{_VL} 48.0"
    ),
    _v(
        "num_requests_waiting", "requests_waiting", "0.4.3-", f"vllm:num_requests_waiting{_VL} 17.0"
    ),
    _v(
        "num_requests_swapped",
        "requests_swapped",
        "0.4.3-0.8.5 (V0)",
        f"vllm:num_requests_swapped{_VL0} 2.0",
    ),
    _v(
        "num_requests_waiting_by_reason",
        "requests_deferred",
        "0.20.0-",
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 3.0',
        reason="deferred",
    ),
    _v(
        "num_preemptions_total",
        "preemptions_total",
        "0.4.3- (counter; code name num_preemptions from 0.9.2)",
        f"vllm:num_preemptions_total{_VL} 12.0",
    ),
    _v(
        "gpu_prefix_cache_hit_rate",
        "prefix_cache_hit_ratio",
        "0.5.5-0.8.5 (V0)",
        f"vllm:gpu_prefix_cache_hit_rate{_VL0} 0.5",
    ),
    _v(
        "avg_prompt_throughput_toks_per_s",
        "prompt_throughput_tokens_per_s",
        "0.4.3-0.6.6 (V0)",
        f"vllm:avg_prompt_throughput_toks_per_s{_VL0} 1523.4",
    ),
    _v(
        "avg_generation_throughput_toks_per_s",
        "generation_throughput_tokens_per_s",
        "0.4.3-0.6.6 (V0)",
        f"vllm:avg_generation_throughput_toks_per_s{_VL0} 812.5",
    ),
    _v(
        "cpu_cache_usage_perc",
        None,
        "0.4.3-0.8.5 (V0)",
        f"vllm:cpu_cache_usage_perc{_VL0} 0.0",
        why="CPU swap space usage; no canonical metric",
    ),
    # SGLang (per scheduler process: tp_rank/pp_rank/dp_rank labels from 0.5; pid on some)
    Series(
        "sglang:token_usage", "sglang", "kv_usage_ratio", "0.3.6-", f"sglang:token_usage{_SG} 0.87"
    ),
    Series(
        "sglang:num_used_tokens",
        "sglang",
        "kv_tokens_used",
        "0.3.6-",
        f"sglang:num_used_tokens{_SG} 496211.0",
    ),
    Series(
        "sglang:kv_used_tokens",
        "sglang",
        "kv_tokens_used",
        "0.5.23-",
        f"sglang:kv_used_tokens{_SG} 496211.0",
        priority=1,
    ),
    Series(
        "sglang:max_total_num_tokens",
        "sglang",
        "kv_tokens_total",
        "0.5.7-",
        f"sglang:max_total_num_tokens{_SG} 570979.0",
    ),
    Series(
        "sglang:num_running_reqs",
        "sglang",
        "requests_running",
        "all",
        f"sglang:num_running_reqs{_SG} 1.0",
    ),
    Series(
        "sglang:num_queue_reqs",
        "sglang",
        "requests_waiting",
        "all",
        f"sglang:num_queue_reqs{_SG} 4.0",
    ),
    Series(
        "sglang:num_retracted_reqs",
        "sglang",
        "preemptions_in_interval",
        "0.5.3- (gauge with pid label)",
        'sglang:num_retracted_reqs{dp_rank="5",engine_type="unified",model_name="deepseek-r1",'
        'pid="915",pp_rank="0",tp_rank="5"} 2.0',
    ),
    Series(
        "sglang:num_retracted_requests_total",
        "sglang",
        "preemptions_total",
        "0.5.7-",
        f"sglang:num_retracted_requests_total{_SG} 9.0",
    ),
    Series(
        "sglang:cache_hit_rate",
        "sglang",
        "prefix_cache_hit_ratio",
        "all",
        f"sglang:cache_hit_rate{_SG} 0.3",
    ),
    Series(
        "sglang:gen_throughput",
        "sglang",
        "generation_throughput_tokens_per_s",
        "all",
        f"sglang:gen_throughput{_SG} 0.8371284457403783",
    ),
    # TGI (metrics-rs: counters without _total, no labels on these gauges)
    Series("tgi_queue_size", "tgi", "requests_waiting", "all", "tgi_queue_size 3"),
    Series("tgi_batch_current_size", "tgi", "requests_running", "all", "tgi_batch_current_size 12"),
    Series(
        "tgi_batch_max_total_tokens",
        "tgi",
        "kv_tokens_total",
        "all (set at warm-up)",
        "tgi_batch_max_total_tokens 150000",
    ),
    Series(
        "tgi_batch_current_max_tokens",
        "tgi",
        None,
        "all",
        "tgi_batch_current_max_tokens 48000",
        why="tokens the current batch may grow to: a reservation, not occupied KV",
    ),
    # llama.cpp server (hand-written exposition, no labels, nan before the first decode)
    Series(
        "llamacpp:kv_cache_usage_ratio",
        "llamacpp",
        "kv_usage_ratio",
        "late 2024 (removed later)",
        "llamacpp:kv_cache_usage_ratio 0.42",
    ),
    Series(
        "llamacpp:kv_cache_tokens",
        "llamacpp",
        "kv_tokens_used",
        "late 2024 (removed later)",
        "llamacpp:kv_cache_tokens 3441",
    ),
    Series(
        "llamacpp:requests_processing",
        "llamacpp",
        "requests_running",
        "all",
        "llamacpp:requests_processing 4",
    ),
    Series(
        "llamacpp:requests_deferred",
        "llamacpp",
        "requests_deferred",
        "all",
        "llamacpp:requests_deferred 2",
    ),
    Series(
        "llamacpp:n_tokens_max",
        "llamacpp",
        "kv_tokens_max_seen",
        "2025- (exposed as a counter)",
        "llamacpp:n_tokens_max 8190",
    ),
    Series(
        "llamacpp:prompt_tokens_seconds",
        "llamacpp",
        "prompt_throughput_tokens_per_s",
        "all",
        "llamacpp:prompt_tokens_seconds 911.2",
    ),
    Series(
        "llamacpp:predicted_tokens_seconds",
        "llamacpp",
        "generation_throughput_tokens_per_s",
        "all",
        "llamacpp:predicted_tokens_seconds 38.5",
    ),
    # DCGM exporter (framebuffer in MiB; gpu label = device index)
    Series(
        "DCGM_FI_DEV_FB_USED",
        "dcgm",
        "device_used_bytes",
        "all",
        f"DCGM_FI_DEV_FB_USED{_DC} 4845",
        scale=MiB,
    ),
    Series(
        "DCGM_FI_DEV_FB_FREE",
        "dcgm",
        "device_free_bytes",
        "all",
        f"DCGM_FI_DEV_FB_FREE{_DC} 35690",
        scale=MiB,
    ),
    Series(
        "DCGM_FI_DEV_FB_RESERVED",
        "dcgm",
        "device_reserved_bytes",
        "default counters since 3.x",
        f"DCGM_FI_DEV_FB_RESERVED{_DC} 525",
        scale=MiB,
    ),
    Series(
        "DCGM_FI_DEV_FB_TOTAL",
        "dcgm",
        "device_total_bytes",
        "custom counters file only",
        f"DCGM_FI_DEV_FB_TOTAL{_DC} 40960",
        scale=MiB,
    ),
    Series(
        "DCGM_FI_DEV_XID_ERRORS",
        "dcgm",
        None,
        "all",
        f"DCGM_FI_DEV_XID_ERRORS{_DC} 0",
        why="the last Xid seen; a change becomes an `xid` event, not a sample",
    ),
)

BY_NAME: Final[dict[str, tuple[Series, ...]]] = {}
for _s in SERIES:
    BY_NAME[_s.name] = (*BY_NAME.get(_s.name, ()), _s)

# vLLM's CacheConfig, exposed as the labels of a gauge that is always 1.
CACHE_CONFIG_INFO: Final = "vllm:cache_config_info"
CACHE_CONFIG_SAMPLE: Final = (
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
    'engine="0",gpu_memory_utilization="0.9",kv_cache_max_concurrency="7.81",'
    'kv_cache_size_tokens="432000",num_gpu_blocks="27000",sliding_window="None"} 1.0'
)
# label -> (engine_config key, type). "None" values are left out.
CACHE_CONFIG_KEYS: Final[dict[str, tuple[str, type]]] = {
    "block_size": ("block_size", int),
    "num_gpu_blocks": ("num_gpu_blocks", int),
    "num_cpu_blocks": ("num_cpu_blocks", int),
    "num_gpu_blocks_override": ("num_gpu_blocks_override", int),
    "gpu_memory_utilization": ("gpu_memory_utilization", float),
    "cache_dtype": ("cache_dtype", str),
    "enable_prefix_caching": ("enable_prefix_caching", bool),
    "sliding_window": ("sliding_window", int),
    "cpu_offload_gb": ("cpu_offload_gb", float),
    "kv_cache_memory_bytes": ("kv_cache_memory_bytes", int),
    "kv_cache_size_tokens": ("kv_cache_tokens", int),
    "kv_cache_max_concurrency": ("max_concurrency", float),
}
# Gauges that state a capacity fixed at start-up: their first value also goes to engine_config.
CONFIG_GAUGES: Final[dict[str, str]] = {
    "sglang:max_total_num_tokens": "kv_cache_tokens",
    "tgi_batch_max_total_tokens": "kv_cache_tokens",
}

# Labels that place a series. DCGM's gpu is the device index; UUID/pci_bus_id name the GPU.
DEVICE_LABEL: Final = "gpu"
DEVICE_REF_LABELS: Final = ("UUID", "uuid", "pci_bus_id")
HOST_LABELS: Final = ("Hostname", "hostname")
MIG_LABELS: Final = ("GPU_I_ID", "GPU_I_PROFILE")
PID_LABEL: Final = "pid"
# Ranks that repeat one scheduler's state (SGLang TP/PP ranks): the lowest is kept.
REPLICA_LABELS: Final = ("tp_rank", "pp_rank")
# Labels that separate independent series (data-parallel engines, targets, models): kept apart
# in the source name when a file holds more than one value.
QUALIFIER_LABELS: Final = (
    "engine",
    "dp_rank",
    "engine_type",
    "model_name",
    "instance",
    "pod",
    "namespace",
    "container",
)
LABELS: Final = (
    DEVICE_LABEL,
    *DEVICE_REF_LABELS,
    *HOST_LABELS,
    *MIG_LABELS,
    PID_LABEL,
    *REPLICA_LABELS,
    *QUALIFIER_LABELS,
    "reason",
)

# Families mapped or used, for collectors that keep a scrape small.
WANTED_NAMES: Final = frozenset({*BY_NAME, CACHE_CONFIG_INFO})


@dataclass(frozen=True)
class Family:
    """A version family, recognised by exposed names present (all of) and absent (none of)."""

    engine: str
    label: str
    present: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()


FAMILIES: Final[tuple[Family, ...]] = (
    Family("vllm", "V0 metrics (<= 0.7, or V0 forced up to 0.10)", ("vllm:num_requests_swapped",)),
    Family(
        "vllm",
        "V1 0.9.2-0.11 (both KV usage names)",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    ),
    Family("vllm", "V1 >= 0.9.2 (kv_cache_usage_perc)", ("vllm:kv_cache_usage_perc",)),
    Family("vllm", "V1 0.7.3-0.9.1 (gpu_cache_usage_perc)", ("vllm:gpu_cache_usage_perc",)),
    Family("sglang", ">= 0.5.23 (kv_used_tokens)", ("sglang:kv_used_tokens",)),
    Family("sglang", ">= 0.5.7 (max_total_num_tokens)", ("sglang:max_total_num_tokens",)),
    Family("sglang", "<= 0.5.6", ("sglang:token_usage",)),
    Family("tgi", "router metrics", ("tgi_queue_size",)),
    Family("llamacpp", "late 2024 (KV gauges)", ("llamacpp:kv_cache_usage_ratio",)),
    Family("llamacpp", "2025 and later (n_tokens_max only)", ("llamacpp:n_tokens_max",)),
)
ENGINES: Final = ("vllm", "sglang", "tgi", "llamacpp")
