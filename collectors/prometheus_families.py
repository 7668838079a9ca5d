"""Every Prometheus family oomtrace knows, per engine, and what becomes of it: one table for the
collector (which families a live capture keeps) and for ingest (which it maps to the canonical
vocabulary). Plain data and the standard library only: the collector runs beside the engine
without the analyzer, and ``oomtrace.ingest.prometheus.dialects`` derives its table from this one.

``name`` is the *exposed* name: what ``/metrics`` prints on the ``# TYPE`` line and on the samples
(``_total`` included for counters). ``use`` says what oomtrace does with the family:

* ``mapped``: the collector keeps it and ingest maps it to the canonical ``metric``;
* ``event``: kept, and ingest turns its changes into events (DCGM's last Xid);
* ``config``: kept apart from the per-scrape text, once per segment and on change
  (``vllm:cache_config_info``), and read into ``engine_config``;
* ``known``: kept; ingest knows it and deliberately maps it to nothing (``why`` says why, and
  ingest's diagnostics repeat it);
* ``raw``: kept in the capture for whoever reads it later; ingest counts it as unmapped;
* ``dropped``: deliberately not kept (``why``). Histograms are dropped on purpose: they are most
  of a scrape's bytes and say nothing about memory at an instant.

A family in no row is dropped by the collector and counted as unmapped by ingest. Where each
name comes from (engine source file and release) is written up in ``docs/formats/prometheus.md``;
``versions`` is the span of releases that expose it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Final, Literal

Use = Literal["mapped", "event", "config", "known", "raw", "dropped"]
Engine = Literal["vllm", "sglang", "tgi", "llamacpp", "dcgm"]
MiB: Final = 1 << 20
KEPT_USES: Final[frozenset[Use]] = frozenset({"mapped", "event", "known", "raw"})


@dataclass(frozen=True)
class PrometheusFamily:
    """One exposed family and what becomes of it.

    ``scale`` turns the exposed unit into the canonical one (DCGM's MiB into bytes).
    ``priority``: when two names give one metric for one series at one instant (vLLM
    0.9.2-0.10.x exports both KV usage names), the lower number is kept. ``reason``: the row
    applies only to samples whose ``reason`` label has this value. ``sample`` is an exposition
    line of the family (ingest's tests parse each mapped one).
    """

    name: str
    engine: Engine
    use: Use
    metric: str | None = None
    versions: str = ""
    why: str = ""
    sample: str = ""
    scale: float = 1.0
    priority: int = 0
    reason: str | None = None


_VL = '{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
_VL0 = '{model_name="Qwen/Qwen2.5-Coder-32B-Instruct"}'
_SG = '{engine_type="unified",model_name="Qwen-32B",pp_rank="0",tp_rank="0"}'
_DC = '{gpu="0",UUID="GPU-34319582-d595-d1c7-d1d2-179bcfa61660",device="nvidia0",Hostname="ub20-a100-k8s"}'  # noqa: E501


_COUNTER = "a cumulative counter: kept for rates around an incident; no canonical metric"
_PREFIX_COUNTER = "prefix-cache counter: kept for hit rates over a window; no canonical metric"
_HISTOGRAM = "a histogram: most of a scrape's bytes, nothing about memory at an instant"
_CONFIG_GAUGE = "a start-up setting exposed as a gauge: kept; engine_config has it from the log"


def _prefixed(
    prefix: str,
    engine: Engine,
    name: str,
    use: Use,
    metric: str | None = None,
    versions: str = "",
    *,
    why: str = "",
    sample: str = "",
    priority: int = 0,
    reason: str | None = None,
) -> PrometheusFamily:
    return PrometheusFamily(
        prefix + name, engine, use, metric, versions, why, sample, priority=priority, reason=reason
    )


_vllm = partial(_prefixed, "vllm:", "vllm")
_sglang = partial(_prefixed, "sglang:", "sglang")


FAMILIES: Final[tuple[PrometheusFamily, ...]] = (
    # vLLM (V0 and V1; labels model_name, plus engine from V1 0.8.5)
    _vllm("kv_cache_usage_perc", "mapped", "kv_usage_ratio", "0.9.2-",
          sample=f"vllm:kv_cache_usage_perc{_VL} 0.9871"),
    _vllm("gpu_cache_usage_perc", "mapped", "kv_usage_ratio",
          "V0 0.4.3-0.10.x; V1 0.7.3-0.11.0 (hidden in 0.11)",
          sample=f"vllm:gpu_cache_usage_perc{_VL0} 0.25", priority=1),
    _vllm("num_requests_running", "mapped", "requests_running", "0.4.3-",
          sample=f"vllm:num_requests_running{_VL} 48.0"),
    _vllm("num_requests_waiting", "mapped", "requests_waiting", "0.4.3-",
          sample=f"vllm:num_requests_waiting{_VL} 17.0"),
    _vllm("num_requests_swapped", "mapped", "requests_swapped", "0.4.3-0.8.5 (V0)",
          sample=f"vllm:num_requests_swapped{_VL0} 2.0"),
    _vllm("num_requests_waiting_by_reason", "mapped", "requests_deferred", "0.20.0-",
          sample='vllm:num_requests_waiting_by_reason{engine="0",model_name="m",'
          'reason="deferred"} 3.0',
          reason="deferred"),
    _vllm("num_preemptions_total", "mapped", "preemptions_total",
          "0.4.3- (counter; code name num_preemptions from 0.9.2)",
          sample=f"vllm:num_preemptions_total{_VL} 12.0"),
    _vllm("gpu_prefix_cache_hit_rate", "mapped", "prefix_cache_hit_ratio", "0.5.5-0.8.5 (V0)",
          sample=f"vllm:gpu_prefix_cache_hit_rate{_VL0} 0.5"),
    _vllm("avg_prompt_throughput_toks_per_s", "mapped", "prompt_throughput_tokens_per_s",
          "0.4.3-0.6.6 (V0)", sample=f"vllm:avg_prompt_throughput_toks_per_s{_VL0} 1523.4"),
    _vllm("avg_generation_throughput_toks_per_s", "mapped", "generation_throughput_tokens_per_s",
          "0.4.3-0.6.6 (V0)", sample=f"vllm:avg_generation_throughput_toks_per_s{_VL0} 812.5"),
    _vllm("cpu_cache_usage_perc", "known", None, "0.4.3-0.8.5 (V0)",
          why="CPU swap space usage; no canonical metric",
          sample=f"vllm:cpu_cache_usage_perc{_VL0} 0.0"),
    _vllm("cache_config_info", "config", None, "0.5.5-",
          why="the engine's CacheConfig as labels of a gauge that is always 1"),
    _vllm("cpu_prefix_cache_hit_rate", "raw", None, "V0, 0.6.6",
          why="V0's CPU prefix-cache hit rate; no canonical metric"),
    _vllm("gpu_prefix_cache_queries_total", "raw", None, "V1, by 0.11.0", why=_PREFIX_COUNTER),
    _vllm("gpu_prefix_cache_hits_total", "raw", None, "V1, by 0.11.0", why=_PREFIX_COUNTER),
    _vllm("prefix_cache_queries_total", "raw", None, "by 0.11.0", why=_PREFIX_COUNTER),
    _vllm("prefix_cache_hits_total", "raw", None, "by 0.11.0", why=_PREFIX_COUNTER),
    _vllm("prompt_tokens_total", "raw", None, "0.6.6-", why=_COUNTER),
    _vllm("generation_tokens_total", "raw", None, "0.6.6-", why=_COUNTER),
    _vllm("prompt_tokens_cached_total", "raw", None, "by 0.33.0", why=_COUNTER),
    _vllm("request_success_total", "raw", None, "0.6.6-", why=_COUNTER),
    _vllm("admission_rejections_total", "raw", None, "by 0.33.0",
          why="requests the front end refused at its queue limit; no canonical metric"),
    _vllm("engine_sleep_state", "raw", None, "by 0.33.0",
          why="whether the engine sleeps (sleep mode frees its GPU memory); no canonical metric"),
    _vllm("iteration_tokens_total", "dropped", None, "0.6.6-", why=_HISTOGRAM),
    _vllm("request_prompt_tokens", "dropped", None, "0.6.6-", why=_HISTOGRAM),
    _vllm("request_params_max_tokens", "dropped", None, "0.6.6-", why=_HISTOGRAM),
    _vllm("time_to_first_token_seconds", "dropped", None, "0.6.6-", why=_HISTOGRAM),
    # SGLang (per scheduler process: tp_rank/pp_rank/dp_rank labels from 0.5; pid on some)
    _sglang("token_usage", "mapped", "kv_usage_ratio", "0.3.6-",
            sample=f"sglang:token_usage{_SG} 0.87"),
    _sglang("num_used_tokens", "mapped", "kv_tokens_used", "0.3.6-",
            sample=f"sglang:num_used_tokens{_SG} 496211.0"),
    _sglang("kv_used_tokens", "mapped", "kv_tokens_used", "0.5.23-",
            sample=f"sglang:kv_used_tokens{_SG} 496211.0", priority=1),
    _sglang("max_total_num_tokens", "mapped", "kv_tokens_total", "0.5.7-",
            sample=f"sglang:max_total_num_tokens{_SG} 570979.0"),
    _sglang("num_running_reqs", "mapped", "requests_running", "all",
            sample=f"sglang:num_running_reqs{_SG} 1.0"),
    _sglang("num_queue_reqs", "mapped", "requests_waiting", "all",
            sample=f"sglang:num_queue_reqs{_SG} 4.0"),
    _sglang("num_retracted_reqs", "mapped", "preemptions_in_interval",
            "0.5.3- (gauge with pid label)",
            sample='sglang:num_retracted_reqs{dp_rank="5",engine_type="unified",model_name='
            '"deepseek-r1",pid="915",pp_rank="0",tp_rank="5"} 2.0'),
    _sglang("num_retracted_requests_total", "mapped", "preemptions_total", "0.5.7-",
            sample=f"sglang:num_retracted_requests_total{_SG} 9.0"),
    _sglang("cache_hit_rate", "mapped", "prefix_cache_hit_ratio", "all",
            sample=f"sglang:cache_hit_rate{_SG} 0.3"),
    _sglang("gen_throughput", "mapped", "generation_throughput_tokens_per_s", "all",
            sample=f"sglang:gen_throughput{_SG} 0.8371284457403783"),
    _sglang("full_token_usage", "raw", None, "by 0.5.23",
            why="a hybrid model's full-attention pool usage; the batch log line reads it too"),
    _sglang("swa_token_usage", "raw", None, "by 0.5.23",
            why="a hybrid model's sliding-window pool usage; the batch log line reads it too"),
    _sglang("mamba_usage", "mapped", "state_usage_ratio", "by 0.5.23",
            sample=f"sglang:mamba_usage{_SG} 0.8"),
    _sglang("kv_available_tokens", "raw", None, "by 0.5.23",
            why="free KV pool tokens; used and total tokens are mapped"),
    _sglang("kv_evictable_tokens", "raw", None, "by 0.5.23",
            why="KV pool tokens the radix cache could evict; no canonical metric"),
    _sglang("kv_cache_memory_usage_gb", "raw", None, "by 0.5.23", why=_CONFIG_GAUGE),
    _sglang("weight_memory_usage_gb", "raw", None, "by 0.5.23", why=_CONFIG_GAUGE),
    _sglang("startup_available_gpu_memory_gb", "raw", None, "by 0.5.23", why=_CONFIG_GAUGE),
    _sglang("context_len", "raw", None, "by 0.5.23", why=_CONFIG_GAUGE),
    _sglang("page_size", "raw", None, "by 0.5.23", why=_CONFIG_GAUGE),
    _sglang("num_pages", "raw", None, "by 0.5.23", why=_CONFIG_GAUGE),
    _sglang("num_paused_reqs", "raw", None, "by 0.5.23",
            why="requests paused by the scheduler; no canonical metric"),
    _sglang("prompt_tokens_total", "raw", None, "0.4.3-", why=_COUNTER),
    _sglang("generation_tokens_total", "raw", None, "0.4.3-", why=_COUNTER),
    _sglang("cached_tokens_total", "raw", None, "by 0.5.23", why=_COUNTER),
    _sglang("num_requests_total", "raw", None, "0.4.3-", why=_COUNTER),
    _sglang("num_aborted_requests_total", "raw", None, "by 0.5.23", why=_COUNTER),
    _sglang("time_to_first_token_seconds", "dropped", None, "0.4.3-", why=_HISTOGRAM),
    _sglang("inter_token_latency_seconds", "dropped", None, "by 0.5.23", why=_HISTOGRAM),
    # TGI (metrics-rs: counters without _total, no labels on these gauges)
    PrometheusFamily("tgi_queue_size", "tgi", "mapped", "requests_waiting", "all",
                     sample="tgi_queue_size 3"),
    PrometheusFamily("tgi_batch_current_size", "tgi", "mapped", "requests_running", "all",
                     sample="tgi_batch_current_size 12"),
    PrometheusFamily("tgi_batch_max_total_tokens", "tgi", "mapped", "kv_tokens_total",
                     "all (set at warm-up)", sample="tgi_batch_max_total_tokens 150000"),
    PrometheusFamily("tgi_batch_current_max_tokens", "tgi", "known", None, "all",
                     why="tokens the current batch may grow to: a reservation, not occupied KV",
                     sample="tgi_batch_current_max_tokens 48000"),
    PrometheusFamily("tgi_batch_concat", "tgi", "raw", None, "v3.3.7",
                     why="batches concatenated, by reason: a counter; no canonical metric"),
    PrometheusFamily("tgi_request_count", "tgi", "raw", None, "v3.3.7", why=_COUNTER),
    PrometheusFamily("tgi_request_success", "tgi", "raw", None, "v3.3.7", why=_COUNTER),
    PrometheusFamily("tgi_request_failure", "tgi", "raw", None, "v3.3.7", why=_COUNTER),
    PrometheusFamily("tgi_request_duration", "tgi", "dropped", None, "v3.3.7", why=_HISTOGRAM),
    PrometheusFamily("tgi_batch_inference_duration", "tgi", "dropped", None, "v3.3.7",
                     why=_HISTOGRAM),
    # llama.cpp server (hand-written exposition, no labels, nan before the first decode)
    PrometheusFamily("llamacpp:kv_cache_usage_ratio", "llamacpp", "mapped", "kv_usage_ratio",
                     "late 2024 (removed later)", sample="llamacpp:kv_cache_usage_ratio 0.42"),
    PrometheusFamily("llamacpp:kv_cache_tokens", "llamacpp", "mapped", "kv_tokens_used",
                     "late 2024 (removed later)", sample="llamacpp:kv_cache_tokens 3441"),
    PrometheusFamily("llamacpp:requests_processing", "llamacpp", "mapped", "requests_running",
                     "all", sample="llamacpp:requests_processing 4"),
    PrometheusFamily("llamacpp:requests_deferred", "llamacpp", "mapped", "requests_deferred",
                     "all", sample="llamacpp:requests_deferred 2"),
    PrometheusFamily("llamacpp:n_tokens_max", "llamacpp", "mapped", "kv_tokens_max_seen",
                     "2025- (exposed as a counter)", sample="llamacpp:n_tokens_max 8190"),
    PrometheusFamily("llamacpp:prompt_tokens_seconds", "llamacpp", "mapped",
                     "prompt_throughput_tokens_per_s", "all",
                     sample="llamacpp:prompt_tokens_seconds 911.2"),
    PrometheusFamily("llamacpp:predicted_tokens_seconds", "llamacpp", "mapped",
                     "generation_throughput_tokens_per_s", "all",
                     sample="llamacpp:predicted_tokens_seconds 38.5"),
    PrometheusFamily("llamacpp:n_busy_slots_per_decode", "llamacpp", "raw", None, "2024-",
                     why="average busy slots per decode call (exposed as a counter); no "
                     "canonical metric"),
    PrometheusFamily("llamacpp:prompt_tokens_total", "llamacpp", "raw", None, "all",
                     why=_COUNTER),
    PrometheusFamily("llamacpp:tokens_predicted_total", "llamacpp", "raw", None, "all",
                     why=_COUNTER),
    PrometheusFamily("llamacpp:prompt_tokens_cached_total", "llamacpp", "raw", None, "2025-",
                     why=_COUNTER),
    PrometheusFamily("llamacpp:prompt_seconds_total", "llamacpp", "dropped", None, "all",
                     why="time spent on prompts: the throughput gauges already divide it out"),
    PrometheusFamily("llamacpp:tokens_predicted_seconds_total", "llamacpp", "dropped", None,
                     "all", why="time spent generating: the throughput gauges divide it out"),
    PrometheusFamily("llamacpp:n_decode_total", "llamacpp", "dropped", None, "2024-",
                     why="decode calls: a counter of work, nothing about memory"),
    # DCGM exporter (framebuffer in MiB; gpu label = device index)
    PrometheusFamily("DCGM_FI_DEV_FB_USED", "dcgm", "mapped", "device_used_bytes", "all",
                     sample=f"DCGM_FI_DEV_FB_USED{_DC} 4845", scale=MiB),
    PrometheusFamily("DCGM_FI_DEV_FB_FREE", "dcgm", "mapped", "device_free_bytes", "all",
                     sample=f"DCGM_FI_DEV_FB_FREE{_DC} 35690", scale=MiB),
    PrometheusFamily("DCGM_FI_DEV_FB_RESERVED", "dcgm", "mapped", "device_reserved_bytes",
                     "default counters since 3.x", sample=f"DCGM_FI_DEV_FB_RESERVED{_DC} 525",
                     scale=MiB),
    PrometheusFamily("DCGM_FI_DEV_FB_TOTAL", "dcgm", "mapped", "device_total_bytes",
                     "custom counters file only", sample=f"DCGM_FI_DEV_FB_TOTAL{_DC} 40960",
                     scale=MiB),
    PrometheusFamily("DCGM_FI_DEV_XID_ERRORS", "dcgm", "event", None, "all",
                     why="the last Xid seen; a change becomes an `xid` event, not a sample",
                     sample=f"DCGM_FI_DEV_XID_ERRORS{_DC} 0"),
    PrometheusFamily("DCGM_FI_DEV_GPU_UTIL", "dcgm", "dropped", None, "default counters",
                     why="compute utilisation, nothing about memory"),
    PrometheusFamily("DCGM_FI_DEV_MEM_COPY_UTIL", "dcgm", "dropped", None, "default counters",
                     why="memory-bus utilisation, not memory held"),
)  # fmt: skip

# What the live collector keeps in each scrape, and what it keeps apart as configuration.
KEEP: Final = frozenset(f.name for f in FAMILIES if f.use in KEPT_USES)
INFO: Final = frozenset(f.name for f in FAMILIES if f.use == "config")
