"""Failures the held-out round of session 8 found unread, each from the public thread named: a
TensorRT build's error-code out-of-memory and llama.cpp's loader failing a device's buffer."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest.torch.oom_text import extract_ooms
from tests.factories import text_trace


def _ooms(tmp_path: Path, text: str) -> pl.DataFrame:
    trace = text_trace(tmp_path, "paste.txt", text)
    assert trace.manifest.sources[0].parser == "pytorch-log"
    return trace.events.filter(pl.col("kind") == "oom")


def test_tensorrts_error_code_out_of_memory_is_one_failure(tmp_path: Path) -> None:
    # https://github.com/ELS-RD/transformer-deploy/issues/60: the builder's failure told twice in
    # one second, then the errors it caused
    text = (
        "[03/18/2022-12:51:55] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::161] "
        "Error Code 2: OutOfMemory (no further information)\n"
        "[03/18/2022-12:51:55] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::161] "
        "Error Code 2: OutOfMemory (no further information)\n"
        "[03/18/2022-12:51:55] [TRT] [E] 10: [optimizer.cpp::computeCosts::2011] Error Code 10: "
        "Internal Error (Could not find any implementation for node "
        "{ForeignNode[encoder.embed_tokens.weight...Mul_406]}.)\n"
        "[03/18/2022-12:51:55] [TRT] [E] 2: [builder.cpp::buildSerializedNetwork::609] Error "
        "Code 2: Internal Error (Assertion enginePtr != nullptr failed. )\n"
    )
    ooms = _ooms(tmp_path, text)
    assert ooms.select("ts", "requested_bytes").rows() == [
        (datetime(2022, 3, 18, 12, 51, 55, tzinfo=UTC), None)
    ]


def test_llama_cpps_loader_names_the_device_whose_buffer_failed(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/9170: Ollama relays the runner's last words
    text = (
        "ollama run deepseek-r1:671b  --verbose\n"
        "Error: llama runner process has terminated: error loading model: unable to allocate "
        "CUDA2 buffer\n"
    )
    ooms = _ooms(tmp_path, text)
    assert ooms.select("device", "requested_bytes").rows() == [(2, None)]


def test_a_host_buffer_is_no_devices_failure(tmp_path: Path) -> None:
    # the same loader's words for pinned host memory (its buffer type CUDA_Host): no GPU OOM
    lines = pl.DataFrame(
        {
            "ts": [datetime(2025, 2, 20, tzinfo=UTC)],
            "text": ["error loading model: unable to allocate CUDA_Host buffer"],
        }
    )
    events, _ = extract_ooms(lines)
    assert events.height == 0
