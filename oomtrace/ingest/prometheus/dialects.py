"""Which Prometheus series mean what: the rows of the shared family table
(:mod:`collectors.prometheus_families`, which the live collector filters by too) that ingest
reads, with the engine-specific knowledge only ingest needs (labels, configuration gauges,
version families).

A row whose ``metric`` is None is a family ingest knows and deliberately does not map (``why``
says why); a family in no row is counted as unmapped. Each row carries the exposition line that
exercises it; ``tests/unit/ingest/prometheus/test_dialects.py`` runs every sample through the
parser. What each family is, engine by engine and with its upstream source, is written up in
``docs/formats/prometheus.md``.

Version families are data too: :data:`FAMILIES` names the family a set of exposed names points
to, first match wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from collectors.prometheus_families import FAMILIES as SHARED_FAMILIES
from collectors.prometheus_families import INFO, PrometheusFamily

# The uses ingest reads: a canonical metric, an event, or a known family it maps to nothing.
_READ: Final = frozenset({"mapped", "event", "known"})

# One exposed sample name and what it becomes (see PrometheusFamily for the fields).
Series = PrometheusFamily

SERIES: Final[tuple[Series, ...]] = tuple(f for f in SHARED_FAMILIES if f.use in _READ)

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

# Families mapped or used: the only sample lines ingest parses.
WANTED_NAMES: Final = frozenset({*BY_NAME, *INFO})


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
