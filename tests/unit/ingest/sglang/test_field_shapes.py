"""SGLang batch lines in shapes met in the field (public issue threads): read like the others."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths


def _metric(path: Path, metric: str) -> list[float]:
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.sources[0].parser == "sglang-log"
    return trace.samples.filter(pl.col("metric") == metric).sort("ts")["value"].to_list()


def test_hisparse_lines_read_the_device_pool_not_the_host_pool(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/pull/22331 (HiSparse decode lines): the device pool
    # stays at 20800 tokens while the host pool grows
    path = tmp_path / "hisparse.log"
    path.write_text(
        "".join(
            f"[2026-04-08 14:10:0{s} TP0] Decode batch, #running-req: 5, #gpu-token: 20800, "
            f"gpu token usage: 0.29, #cpu-token: {cpu}, cpu token usage: {usage}, cuda graph: "
            f"True, gen throughput (token/s): 153.62, #queue-req: 0\n"
            for s, cpu, usage in ((0, 42022, "0.29"), (2, 42222, "0.30"), (3, 42422, "0.30"))
        )
    )
    assert _metric(path, "kv_tokens_used") == [20800, 20800, 20800]
    assert _metric(path, "kv_usage_ratio") == [0.29, 0.29, 0.29]
    assert _metric(path, "requests_running") == [5, 5, 5]
