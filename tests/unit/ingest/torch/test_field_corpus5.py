"""Ollama's and TGI's logs in shapes public threads show them that were refused before: Ollama's
own start-up lines with no runner line yet, its scheduler's ``parallel=N``, and TGI's lines with
the colour codes syslog wrote as text glued to the launcher's name."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace


def _trace(tmp_path: Path, text: str) -> Trace:
    path = tmp_path / "server.log"
    path.write_text(text)
    trace = ingest_paths([path], IngestOptions(year=2026))
    assert trace.manifest.sources[0].parser == "pytorch-log"
    return trace


def test_ollamas_gpu_discovery_marks_its_log(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/8377 (Ollama 0.5 under systemd, two GPUs found,
    # the runner not started yet)
    text = (
        "Jan 10 16:30:57 node1 ollama[119046]: [GPU-08cf14dc-3d8a-c656-c643-4ba2eb37b51f] CUDA "
        "totalMem 15978 mb\n"
        "Jan 10 16:30:57 node1 ollama[119046]: releasing cuda driver library\n"
        "Jan 10 16:30:58 node1 ollama[119046]: time=2025-01-10T16:30:58.528+01:00 level=INFO "
        'source=server.go:104 msg="system memory" total="46.8 GiB" free="40.2 GiB" '
        'free_swap="62.0 GiB"\n'
        "Jan 10 16:30:58 node1 ollama[119046]: time=2025-01-10T16:30:58.528+01:00 level=DEBUG "
        'source=memory.go:107 msg=evaluating library=cuda gpu_count=2 available="[23.3 GiB '
        '15.5 GiB]"\n'
    )
    trace = _trace(tmp_path, text)
    assert trace.events.filter(pl.col("kind") == "oom").height == 0


def test_ollamas_scheduler_states_the_parallel_requests(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/8825 (Ollama 0.5 on Windows, two GPUs)
    text = (
        'time=2025-02-04T16:56:25.304Z level=INFO source=sched.go:730 msg="new model will fit '
        'in available VRAM, loading" model=C:\\Users\\AI\\.ollama\\models\\blobs\\sha256-6150cb38 '
        'library=cuda parallel=4 required="23.4 GiB"\n'
        'time=2025-02-04T16:56:25.332Z level=INFO source=memory.go:356 msg="offload to cuda" '
        "layers.requested=-1 layers.model=65 layers.offload=65 layers.split=33,32 "
        'memory.available="[14.9 GiB 14.9 GiB]" memory.gpu_overhead="1.0 GiB" '
        'memory.required.full="23.4 GiB" memory.required.partial="23.4 GiB" '
        'memory.required.kv="2.0 GiB" memory.required.allocations="[12.0 GiB 11.4 GiB]"\n'
    )
    config = _trace(tmp_path, text).manifest.engine_config
    assert config["max_num_seqs"] == 4
    assert config["available_kv_cache_bytes"] == 2 * 2**30


def test_tgi_lines_whose_escaped_colour_is_glued_to_the_launchers_name(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1763 (TGI 1.4 on SageMaker:
    # CloudWatch's time, then TGI's line with each ESC written as '#033')
    text = (
        "2024-04-18T18:44:03.144-04:00   #033[2m2024-04-18T22:43:58.111453Z#033[0m #033[32m "
        "INFO#033[0m #033[1mshard-manager#033[0m: #033[2mtext_generation_launcher#033[0m#033[2m:"
        "#033[0m Waiting for shard to be ready... #033[2m#033[3mrank#033[0m#033[2m=#033[0m0"
        "#033[0m\n\n"
        "2024-04-18T18:44:13.144-04:00   #033[2m2024-04-18T22:44:08.150056Z#033[0m #033[32m "
        "INFO#033[0m #033[1mshard-manager#033[0m: #033[2mtext_generation_launcher#033[0m#033[2m:"
        "#033[0m Waiting for shard to be ready... #033[2m#033[3mrank#033[0m#033[2m=#033[0m0"
        "#033[0m\n"
    )
    trace = _trace(tmp_path, text)
    assert trace.events.height == 0


def test_ollamas_plan_for_the_cpu_is_no_gpu_kv_pool(tmp_path: Path) -> None:
    # https://github.com/atineiatte/deep-research-at-home/issues/14 (Ollama 0.9 with no GPU used:
    # the KV cache it plans is in host memory; quoted with "> " and the host name replaced)
    text = (
        "> Jun 05 12:36:11 <ollama server> ollama[25973]: time=2025-06-05T12:36:11.458Z "
        "level=INFO source=server.go:168 msg=offload library=cpu layers.requested=-1 "
        'layers.model=49 layers.offload=0 layers.split="" memory.available="[29.5 GiB]" '
        'memory.gpu_overhead="0 B" memory.required.full="10.5 GiB" memory.required.partial="0 B" '
        'memory.required.kv="1.3 GiB" memory.required.allocations="[10.5 GiB]"\n'
        "> Jun 05 12:36:11 <ollama server> ollama[25973]: time=2025-06-05T12:36:11.709Z "
        'level=INFO source=server.go:431 msg="starting llama server" cmd="/mnt/data/ollama/bin/'
        "ollama runner --ollama-engine --model /mnt/data/ollama/blobs/sha256-e8ad13ef --ctx-size "
        '8192 --batch-size 512 --threads 42 --no-mmap --parallel 2 --port 35253"\n'
    )
    config = _trace(tmp_path, text).manifest.engine_config
    assert (config["kv_cache_tokens"], config["max_num_seqs"]) == (8192, 2)
    assert "available_kv_cache_bytes" not in config
    assert "initial_free_bytes" not in config
