"""vLLM's start-up lines as data: what the engine states about itself (weights, memory
profiling, KV cache budget and blocks, engine arguments), which become ``engine_config`` keys.
Each entry has the pattern, the version family it proves (a lower bound; ``None`` when it
proves nothing), a real sample line and what that sample must yield; ``docs/formats/vllm.md``
says where in vLLM's source each form comes from.

Group names in ``pattern`` and ``extras`` are ``<key>__<conversion>``; conversions are
:data:`Conversion`. vLLM prints "GB" for GiB in its early weight-loading line (the value is
``bytes / 2**30``), hence ``gb_means_gib`` there and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from oomtrace.ingest.vllm.line_patterns import Family

Conversion = Literal["gib", "gb_means_gib", "int", "float", "str", "bool"]


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
        "weights 0.7.x, 'GB' meaning GiB (V1 and V0)", "Model loading took",
        r"^Model loading took (?P<model_weights_bytes__gb_means_gib>[\d.]+) GB and "
        r"(?P<model_load_seconds__float>[\d.]+) seconds",
        "Model loading took 14.9889 GB and 5.263157 seconds",
        {"model_weights_bytes": _gib(14.9889), "model_load_seconds": 5.263157},
    ),
    ConfigLine(
        "free memory refused at start-up (V1 0.9+)",
        "on startup is less than desired GPU memory utilization",
        r"Free memory on device(?: \S+)? \((?P<initial_free_bytes__gib>[\d.]+)/"
        r"(?P<device_total_bytes__gib>[\d.]+) GiB\) on startup is less than desired GPU memory "
        r"utilization \((?P<gpu_memory_utilization__float>[\d.]+), "
        r"(?P<requested_memory_bytes__gib>[\d.]+) GiB\)",
        "ValueError: Free memory on device cuda:0 (22.76/24.0 GiB) on startup is less than desired "
        "GPU memory utilization (0.97, 23.28 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.",
        {"initial_free_bytes": _gib(22.76), "device_total_bytes": _gib(24.0),
         "gpu_memory_utilization": 0.97, "requested_memory_bytes": _gib(23.28)},
        "v1-0.8.5",
    ),
    ConfigLine(
        # vllm/v1/worker/utils.py (0.11+), an INFO pair on a start-up that passed the check
        "free memory at start-up (V1 0.11+)", "GiB) on startup.",
        r"Free memory on device(?: \S+)? \((?P<initial_free_bytes__gib>[\d.]+)/"
        r"(?P<device_total_bytes__gib>[\d.]+) GiB\) on startup\.",
        "Free memory on device (110.37/121.69 GiB) on startup.",
        {"initial_free_bytes": _gib(110.37), "device_total_bytes": _gib(121.69)},
    ),
    ConfigLine(
        "utilisation asked for (V1 0.11+)", "Desired GPU memory utilization is (",
        r"Desired GPU memory utilization is \((?P<gpu_memory_utilization__float>[\d.]+), "
        r"(?P<requested_memory_bytes__gib>[\d.]+) GiB\)",
        "Desired GPU memory utilization is (0.87, 105.87 GiB).",
        {"gpu_memory_utilization": 0.87, "requested_memory_bytes": _gib(105.87)},
    ),
    ConfigLine(
        # the same record goes on (vllm/v1/worker/gpu_worker.py): what profiling measured, then
        # the KV cache it holds; vllm-ascend's NPU worker (2026) writes "Actual usage: X GiB for
        # weights, ..." (vllm-project/vllm-ascend PR 8289)
        "profiled use (V1 0.11+)", "GiB for weight",
        r"Actual usage(?: is|:) (?P<profiled_weights_bytes__gib>[\d.]+) GiB for weights?, "
        r"(?P<activation_peak_bytes__gib>-?[\d.]+) GiB for peak activation, "
        r"(?P<non_torch_bytes__gib>-?[\d.]+) GiB for non-torch memory",
        "Actual usage is 13.72 GiB for weight, 1.83 GiB for peak activation, 0.04 GiB for "
        "non-torch memory, and 0.0 GiB for CUDAGraph memory.",
        {"profiled_weights_bytes": _gib(13.72), "activation_peak_bytes": _gib(1.83),
         "non_torch_bytes": _gib(0.04)},
    ),
    ConfigLine(
        # later releases count the weights in with the non-torch memory
        "profiled use, weights with non-torch (V1)", "(weights + non-torch), ",
        r"Actual usage is [\d.]+ GiB for consumed memory \(weights \+ non-torch\), "
        r"(?P<activation_peak_bytes__gib>-?[\d.]+) GiB for peak activation",
        "Actual usage is 2.81 GiB for consumed memory (weights + non-torch), 0.57 GiB for peak "
        "activation, and 0.22 GiB for CUDAGraph memory.",
        {"activation_peak_bytes": _gib(0.57)},
    ),
    ConfigLine(
        "KV cache in use after profiling (V1 0.11+)", "Current kv cache memory in use is",
        r"Current kv cache memory in use is (?P<available_kv_cache_bytes__gib>[\d.]+) GiB",
        "Current kv cache memory in use is 24.38 GiB.",
        {"available_kv_cache_bytes": _gib(24.38)},
    ),
    ConfigLine(
        # The refusal states the length asked for and (V0) the tokens the cache holds.
        "max seq len refused (V0)",
        "is larger than the maximum number of tokens that can be stored in KV cache",
        r"max seq len \((?P<max_model_len__int>\d+)\) is larger than the maximum number of "
        r"tokens that can be stored in KV cache \((?P<kv_cache_tokens__int>\d+)\)",
        "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens "
        "that can be stored in KV cache (3664). Try increasing gpu_memory_utilization or "
        "decreasing max_model_len when initializing the engine.",
        {"max_model_len": 4096, "kv_cache_tokens": 3664},
    ),
    ConfigLine(
        "max seq len refused (V1)", "KV cache is needed",
        r"max seq len \((?P<max_model_len__int>\d+)\), \([\d.]+ Gi?B KV cache is needed",
        "ValueError: To serve at least one request with the models's max seq len (262144), (36.0 "
        "GiB KV cache is needed, which is larger than the available KV cache memory (6.94 GiB).",
        {"max_model_len": 262144}, "v1-0.7",
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
        # vllm/v1/worker/gpu_worker.py (0.21+): the utilisation asked for, with what it comes to
        # now that the CUDA-graph estimate is taken off the KV budget.
        "utilisation with CUDA-graph profiling (V1 0.21+)", "CUDA graph memory profiling is",
        r"^CUDA graph memory profiling is enabled .*?The current --gpu-memory-utilization="
        r"(?P<gpu_memory_utilization__float>[\d.]+) is equivalent",
        "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
        "--gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9129 without "
        "CUDA graph memory profiling.",
        {"gpu_memory_utilization": 0.92}, "v1-0.20",
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
        "blocks override V1 (--num-gpu-blocks-override)", "Overriding num_gpu_blocks=",
        r"^Overriding num_gpu_blocks=(?P<profiled_num_gpu_blocks__int>\d+) with "
        r"num_gpu_blocks_override=(?P<num_gpu_blocks__int>\d+)",
        "Overriding num_gpu_blocks=128 with num_gpu_blocks_override=40",
        {"profiled_num_gpu_blocks": 128, "num_gpu_blocks": 40},
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
        # 0.9.0 printed it without "Engine 000: " (vllm/v1/metrics/loggers.py)
        r"^(?:Engine \d+: )?vllm cache_config_info with initialization after num_gpu_blocks is: "
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
        # 0.2.x printed no version in it (vllm/engine/llm_engine.py of 0.2.7)
        "engine config line, no version (<= 0.2)", "LLM engine with config:",
        r"^Initializing an LLM engine with config: model='?(?P<model__str>[^',]+)'?,",
        "Initializing an LLM engine with config: model='/models/alpaca-2', tokenizer='/models/"
        "alpaca-2', tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code"
        "=False, dtype=torch.float16, max_seq_len=4096, download_dir=None, load_format=auto, "
        "tensor_parallel_size=1, quantization=None, enforce_eager=False, seed=0)",
        {"model": "/models/alpaca-2", "max_model_len": 4096, "dtype": "float16",
         "tensor_parallel_size": 1},
        "v0", extras=_ENGINE_CONFIG,
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
        # V1's sampler warm-up runs max_num_seqs dummy requests and says how many when it fails
        # (vllm/v1/worker/gpu_worker.py; vllm#15617, llm-d#787)
        "max_num_seqs from the sampler warm-up's OOM", "when warming up sampler with",
        r"when warming up sampler with (?P<max_num_seqs__int>\d+) dummy requests",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine.",
        {"max_num_seqs": 1024}, "v1-0.7",
    ),
    ConfigLine(
        "chunked prefill budget", "Chunked prefill is enabled with max_num_batched_tokens=",
        r"^Chunked prefill is enabled with max_num_batched_tokens=(?P<max_num_batched_tokens__int>"
        r"\d+)",
        "Chunked prefill is enabled with max_num_batched_tokens=8192.",
        {"max_num_batched_tokens": 8192},
    ),
)  # fmt: skip
