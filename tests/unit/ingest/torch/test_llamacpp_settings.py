"""What llama.cpp and Ollama state about the KV cache before serving becomes engine settings:
Ollama's offload plan (its scheduler's logfmt line before it starts llama.cpp), the server's
slots, the context's size."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.units import GiB, MiB
from tests.unit.ingest.torch.settings import engine_config_of

OFFLOAD_LINES = [
    pytest.param(
        # https://github.com/ollama/ollama/issues/8447 (a 415.7 GiB model on one 24 GB card: 5
        # of 62 layers offloaded), behind a compose prefix
        'ollama  | time=2025-01-16T04:29:50.741Z level=INFO source=server.go:104 msg="system '
        'memory" total="628.5 GiB" free="623.2 GiB" free_swap="0 B"\n'
        'ollama  | time=2025-01-16T04:29:50.909Z level=INFO source=memory.go:356 msg="offload '
        'to cuda" layers.requested=-1 layers.model=62 layers.offload=5 layers.split="" '
        'memory.available="[23.3 GiB]" memory.gpu_overhead="0 B" memory.required.full="415.7 '
        'GiB" memory.required.partial="17.6 GiB" memory.required.kv="9.5 GiB" '
        'memory.required.allocations="[17.6 GiB]" memory.weights.total="385.0 GiB"\n',
        round(9.5 * GiB),
        round(23.3 * GiB),
        id="offload-to-cuda-compose",
    ),
    pytest.param(
        # https://github.com/ollama/ollama/pull/12000 (msg=offload library=cuda, via journald)
        "Aug 22 17:36:22 amobile ollama[30907]: time=2025-08-22T17:36:22.027-04:00 level=INFO "
        "source=server.go:175 msg=offload library=cuda layers.requested=-1 layers.model=49 "
        'layers.offload=48 layers.split="" memory.available="[11.1 GiB]" memory.gpu_overhead="0 '
        'B" memory.required.full="11.4 GiB" memory.required.partial="8.9 GiB" '
        'memory.required.kv="992.0 MiB" memory.required.allocations="[8.9 GiB]"\n',
        992 * MiB,
        round(11.1 * GiB),
        id="offload-library-journald",
    ),
]


@pytest.mark.parametrize(("text", "kv_bytes", "free_bytes"), OFFLOAD_LINES)
def test_the_offload_plan_gives_the_kv_cache_and_the_free_memory(
    tmp_path: Path, text: str, kv_bytes: int, free_bytes: int
) -> None:
    config = engine_config_of(tmp_path, text)
    assert config["available_kv_cache_bytes"] == kv_bytes
    assert config["initial_free_bytes"] == free_bytes


def test_free_memory_of_several_gpus_is_no_single_figure(tmp_path: Path) -> None:
    # the same line as Ollama prints it for two GPUs (one figure per GPU in the list)
    config = engine_config_of(
        tmp_path,
        'time=2025-01-10T16:30:58.528+01:00 level=INFO source=memory.go:356 msg="offload to '
        'cuda" layers.requested=-1 layers.model=65 layers.offload=65 layers.split=33,32 '
        'memory.available="[23.3 GiB 15.5 GiB]" memory.required.kv="2.0 GiB"\n',
    )
    assert config["available_kv_cache_bytes"] == 2 * GiB
    assert "initial_free_bytes" not in config


def test_the_servers_slots_in_ollama_01s_json_log_are_the_sequences(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/3431 (llama.cpp's server embedded in Ollama 0.1:
    # its JSON records between Go logfmt and GIN access lines)
    config = engine_config_of(
        tmp_path,
        "llama_new_context_with_model: KV self size  = 2560.00 MiB, K (f16): 1280.00 MiB, V "
        "(f16): 1280.00 MiB\n"
        '{"function":"initialize","level":"INFO","line":444,"msg":"initializing slots",'
        '"n_slots":1,"tid":"240","timestamp":1711936563}\n'
        'time=2024-03-31T18:56:03.805-07:00 level=INFO source=dyn_ext_server.go:159 msg="Starting '
        'llama main loop"\n'
        "[GIN] 2024/03/31 - 18:56:03 | 200 |    9.3664512s |   192.168.50.60 | POST     "
        '"/api/chat"\n',
    )
    assert config["available_kv_cache_bytes"] == 2560 * MiB
    assert config["max_num_seqs"] == 1


def test_the_servers_slots_in_its_text_log(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/pull/26297 (durations since start, level letters)
    config = engine_config_of(
        tmp_path,
        "1.06.520.077 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 51748.72 MiB on "
        "device 1: cudaMalloc failed: out of memory\n"
        "1.07.304.130 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 50176, "
        "kv_unified = 'false'\n",
    )
    assert config["max_num_seqs"] == 1


def test_a_2024_contexts_n_ctx_is_the_cache_in_cells(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/pull/8035 (mid-2024: two GPUs, no kv_size line; the
    # KV buffers of each device add up to the context's KV self size)
    config = engine_config_of(
        tmp_path,
        "ggml_cuda_init: found 2 CUDA devices:\n"
        "llm_load_tensors:      CUDA0 buffer size = 12633.25 MiB\n"
        "llama_new_context_with_model: n_ctx      = 8192\n"
        "llama_new_context_with_model: n_batch    = 2048\n"
        "llama_kv_cache_init:  CUDA_Host KV buffer size =    64.00 MiB\n"
        "llama_kv_cache_init:      CUDA0 KV buffer size =  1472.00 MiB\n"
        "llama_kv_cache_init:      CUDA1 KV buffer size =  1024.00 MiB\n"
        "llama_new_context_with_model: KV self size  = 2560.00 MiB, K (f16): 1280.00 MiB, V "
        "(f16): 1280.00 MiB\n",
    )
    assert config["kv_cache_tokens"] == 8192
    assert config["available_kv_cache_bytes"] == 2560 * MiB


def test_the_per_sequence_context_is_not_the_cache(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/issues/9390 (n_ctx and kv_size agree there; the
    # per-sequence context is not the cache)
    config = engine_config_of(
        tmp_path,
        "llama_init_from_model: n_seq_max     = 8\n"
        "llama_init_from_model: n_ctx         = 16384\n"
        "llama_init_from_model: n_ctx_per_seq = 2048\n"
        "llama_kv_cache_init: kv_size = 16384, offload = 1, type_k = 'q4_0', type_v = 'f16', "
        "n_layer = 61, can_shift = 0\n",
    )
    assert (config["kv_cache_tokens"], config["max_num_seqs"]) == (16384, 8)


# https://github.com/ollama/ollama/issues/9782 (journald in an Italian locale: lower-case "mar"):
# the plan, then the runner's command line with the context it sized for all its slots.
OLLAMA_RUNNER = (
    "mar 15 11:39:23 acquario3 ollama[87551]: time=2025-03-15T11:39:23.725+01:00 level=INFO "
    "source=server.go:130 msg=offload library=cuda layers.requested=-1 layers.model=41 "
    'layers.offload=41 layers.split="" memory.available="[47.3 GiB]" memory.gpu_overhead="0 B" '
    'memory.required.full="11.5 GiB" memory.required.kv="1.6 GiB"\n'
    "mar 15 11:39:23 acquario3 ollama[87551]: time=2025-03-15T11:39:23.725+01:00 level=INFO "
    'source=server.go:380 msg="starting llama server" cmd="/usr/local/bin/ollama runner --model '
    "/usr/share/ollama/.ollama/models/blobs/sha256-fd7b --ctx-size 8192 --batch-size 512 "
    '--n-gpu-layers 41 --threads 64 --parallel 4 --port 35965"\n'
    "mar 15 11:39:23 acquario3 ollama[87551]: time=2025-03-15T11:39:23.725+01:00 level=INFO "
    'source=sched.go:450 msg="loaded runners" count=1\n'
)


def test_ollamas_runner_command_gives_the_cache_cells_and_the_slots(tmp_path: Path) -> None:
    config = engine_config_of(tmp_path, OLLAMA_RUNNER)
    assert config["kv_cache_tokens"] == 8192
    assert config["max_num_seqs"] == 4
    assert config["available_kv_cache_bytes"] == round(1.6 * GiB)


def test_the_runners_own_context_line_outranks_its_command_line(tmp_path: Path) -> None:
    runner = "llama_new_context_with_model: n_ctx      = 4096\n"
    config = engine_config_of(tmp_path, OLLAMA_RUNNER + runner)
    assert config["kv_cache_tokens"] == 4096


def test_the_early_2024_servers_slot_list_gives_the_sequences(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/pull/5104: the server lists its slots, one a line
    config = engine_config_of(
        tmp_path,
        "llama_new_context_with_model: n_ctx      = 1024\n"
        "llama_new_context_with_model: KV self size  =  160.00 MiB, K (f16):   80.00 MiB, V "
        "(f16):   80.00 MiB\n"
        "Available slots:\n"
        " -> Slot 0 - max context: 512\n"
        " -> Slot 1 - max context: 512\n"
        '{"timestamp":1706462747,"level":"INFO","function":"main","line":2998,"message":"model '
        'loaded"}\n',
    )
    assert config["max_num_seqs"] == 2
    assert config["kv_cache_tokens"] == 1024
    assert config["available_kv_cache_bytes"] == 160 * MiB


def test_ollama_012s_device_layout_sums_the_kv_cache_over_its_gpus(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/13235 (0.13 under journald): one line a device and
    # kind; a second load's layout is not added to the first
    prefix = "Nov 25 06:43:11 ai ollama[95]: time=2025-11-25T06:43:11.515+02:00 level=INFO "
    layout = "".join(
        f'{prefix}source=device.go:{line} msg="{kind}" device={device} size="{size}"\n'
        for line, kind, device, size in (
            (240, "model weights", "CUDA2", "5.1 GiB"),
            (251, "kv cache", "CUDA0", "2.5 GiB"),
            (251, "kv cache", "CUDA1", "2.5 GiB"),
            (251, "kv cache", "CUDA2", "1.2 GiB"),
            (262, "compute graph", "CUDA0", "1.5 GiB"),
        )
    )
    again = f'{prefix}source=device.go:251 msg="kv cache" device=CUDA0 size="7.0 GiB"\n'
    config = engine_config_of(tmp_path, layout + again)
    assert config["available_kv_cache_bytes"] == round(2.5 * GiB) * 2 + round(1.2 * GiB)


def test_the_runners_lines_behind_journalds_prefix_mark_a_llama_cpp_log(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/8271 (Ollama 0.5 under systemd): no failure in the
    # part pasted, the runner's start-up lines behind the journal's prefix
    prefix = "Dec 31 01:58:01 FORGE ollama[555324]: "
    config = engine_config_of(
        tmp_path,
        f"{prefix}llama_new_context_with_model: n_ctx_per_seq (2048) < n_ctx_train (131072) -- "
        "the full capacity of the model will not be utilized\n"
        f"{prefix}llama_kv_cache_init:      CUDA0 KV buffer size =   896.00 MiB\n"
        f"{prefix}llama_new_context_with_model: KV self size  =  896.00 MiB, K (f16):  448.00 "
        "MiB, V (f16):  448.00 MiB\n"
        f"{prefix}[GIN] 2024/12/31 - 01:58:01 | 200 |  1.386181264s |       127.0.0.1 | POST     "
        '"/api/generate"\n',
    )
    assert config["available_kv_cache_bytes"] == 896 * MiB


def test_pinned_host_memory_that_failed_is_no_device_oom(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/pull/5469: ggml falls back to pageable host memory
    path = tmp_path / "server.log"
    prefix = "Jul 10 16:29:17 DESKTOP ollama[180]: "
    path.write_text(
        f"{prefix}llm_load_tensors: ggml ctx size =    0.83 MiB\n"
        f"{prefix}ggml_cuda_host_malloc: failed to allocate 16607.35 MiB of pinned memory: out of "
        "memory\n"
        f"{prefix}llm_load_tensors: offloading 11 repeating layers to GPU\n"
    )
    trace = ingest_paths([path], IngestOptions())
    assert trace.events.filter(pl.col("kind") == "oom").height == 0
