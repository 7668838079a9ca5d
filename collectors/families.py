"""Which Prometheus families the collector keeps, per engine: memory and admission only.

Data, not code (one table per dialect), so that a renamed metric is a one-line change. Names are
the *exposed* names (what ``/metrics`` prints, ``_total`` included for counters), taken from
``shared/reference/formats.md`` §1.2.1 (vLLM), §3.3 (DCGM), §4.1 (SGLang), §5 (TGI), §6
(llama.cpp). Histograms are left out on purpose: they are most of a scrape's bytes and say
nothing about memory at an instant.
"""

from __future__ import annotations

from typing import Final

VLLM: Final = frozenset(
    {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason",
        "vllm:num_requests_swapped",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:cpu_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:gpu_prefix_cache_hit_rate",
        "vllm:cpu_prefix_cache_hit_rate",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_cached_total",
        "vllm:request_success_total",
        "vllm:admission_rejections_total",
        "vllm:engine_sleep_state",
        "vllm:avg_prompt_throughput_toks_per_s",
        "vllm:avg_generation_throughput_toks_per_s",
    }
)

SGLANG: Final = frozenset(
    {
        "sglang:token_usage",
        "sglang:num_used_tokens",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:max_total_num_tokens",
        "sglang:full_token_usage",
        "sglang:swa_token_usage",
        "sglang:mamba_usage",
        "sglang:kv_used_tokens",
        "sglang:kv_available_tokens",
        "sglang:kv_evictable_tokens",
        "sglang:kv_cache_memory_usage_gb",
        "sglang:weight_memory_usage_gb",
        "sglang:startup_available_gpu_memory_gb",
        "sglang:num_retracted_reqs",
        "sglang:num_retracted_requests_total",
        "sglang:num_paused_reqs",
        "sglang:cache_hit_rate",
        "sglang:gen_throughput",
        "sglang:context_len",
        "sglang:page_size",
        "sglang:num_pages",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:cached_tokens_total",
        "sglang:num_requests_total",
        "sglang:num_aborted_requests_total",
    }
)

TGI: Final = frozenset(
    {
        "tgi_queue_size",
        "tgi_batch_current_size",
        "tgi_batch_current_max_tokens",
        "tgi_batch_max_total_tokens",
        "tgi_batch_concat",
        "tgi_request_count",
        "tgi_request_success",
        "tgi_request_failure",
    }
)

LLAMA_CPP: Final = frozenset(
    {
        "llamacpp:kv_cache_usage_ratio",
        "llamacpp:kv_cache_tokens",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "llamacpp:n_tokens_max",
        "llamacpp:n_busy_slots_per_decode",
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:prompt_tokens_cached_total",
    }
)

DCGM: Final = frozenset(
    {
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_FB_TOTAL",
        "DCGM_FI_DEV_XID_ERRORS",
    }
)

# Configuration-like families: written once per segment and whenever their text changes.
INFO: Final = frozenset({"vllm:cache_config_info"})

KEEP: Final = VLLM | SGLANG | TGI | LLAMA_CPP | DCGM
