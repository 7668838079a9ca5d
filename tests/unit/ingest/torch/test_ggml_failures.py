"""llama.cpp's (ggml's) allocation failures in the shapes public threads show: its CUDA error
report that names the device on the next line, and the buffer line a runner's relayed last words
keep without the allocating line above it."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace


def _ooms(tmp_path: Path, text: str) -> list[tuple[object, ...]]:
    path = tmp_path / "server.log"
    path.write_text(text)
    trace: Trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.sources[0].parser == "pytorch-log"
    ooms = trace.events.filter(pl.col("kind") == "oom")
    return ooms.select("device", "requested_bytes").rows()


def test_ggmls_2023_cuda_error_names_its_device_on_the_next_line(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/issues/3199 (build 1233): CUDA_CHECK's report
    text = (
        "main: build = 1233 (98311c4)\n"
        "main: seed  = 1694805687\n"
        "\n"
        "CUDA error 2 at /data/llama.cpp/ggml-cuda.cu:5509: out of memory\n"
        "current device: 0\n"
        "(textgen) [root@pve0 bin]#\n"
    )
    assert _ooms(tmp_path, text) == [(0, None)]


def test_ggmls_2024_report_names_the_device_and_the_pool_call(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/3237 (Ollama 0.1.28 on Windows)
    text = (
        "CUDA error: out of memory\n"
        "  current device: 0, in function ggml_cuda_pool_malloc_vmm at "
        "C:\\Users\\jmorg\\git\\ollama\\llm\\llama.cpp\\ggml-cuda.cu:8583\n"
        "  cuMemCreate(&handle, reserve_size, &prop, 0)\n"
        "GGML_ASSERT: C:\\Users\\jmorg\\git\\ollama\\llm\\llama.cpp\\ggml-cuda.cu:256: "
        '!"CUDA error"\n'
    )
    assert _ooms(tmp_path, text) == [(0, None)]


def test_the_buffer_line_alone_is_the_failure_in_bytes(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/9782: the client relays the runner's last words
    text = (
        "$ ollama run qwen3:8b \n"
        "Error: llama runner process has terminated: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 838447104\n"
    )
    assert _ooms(tmp_path, text) == [(0, 838447104)]


def test_the_buffer_line_under_the_allocating_line_is_the_same_failure(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/issues/16725 (a HIP build: ROCm0 in the buffer line)
    text = (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 14136.04 MiB on device 0: "
        "cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296\n"
        "graph_reserve: failed to allocate compute buffers\n"
    )
    assert _ooms(tmp_path, text) == [(0, round(14136.04 * 2**20))]
