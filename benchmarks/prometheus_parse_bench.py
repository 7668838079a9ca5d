"""Prometheus ingest speed, side by side with the straightforward way, in one run.

Three inputs, generated here:

1. ``curl`` loop: a file of full-size vLLM expositions (V1 0.11 names: gauges, counters, 13
   histograms with ``_created`` series, ``cache_config_info``, process metrics; ~340 lines a
   scrape) separated by ``# oomtrace-scrape`` lines. oomtrace (Polars classifies every line,
   prometheus_client parses only the mapped families) against the straightforward parser
   (prometheus_client over every scrape, keeping the mapped samples).
2. Collector capture: scrapes holding only the mapped families (what ``oomtrace collect`` keeps),
   through :func:`parse_scrapes` against the same straightforward parser: here every line is a
   mapped one, so prometheus_client's per-line cost is all there is.
3. query_range JSON: the raw frame built from the ``values`` arrays with one Polars frame per
   series against two flat comprehensions (what ``prometheus_query`` does).

    python benchmarks/prometheus_parse_bench.py [--scrapes 2000] [--captures 50000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from prometheus_client.parser import text_string_to_metric_families

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.prometheus.dialects import CACHE_CONFIG_INFO, WANTED_NAMES
from oomtrace.ingest.prometheus.text_parser import parse_scrapes

T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)
LABELS = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
HISTOGRAMS = [
    "iteration_tokens_total",
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_inference_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "request_prompt_tokens",
    "request_generation_tokens",
    "request_params_max_tokens",
    "request_params_n",
    "request_max_num_generation_tokens",
]


def exposition(i: int) -> str:
    """One full vLLM /metrics body; values move with ``i``."""
    out = []
    for name, kind, value in (
        ("num_requests_running", "gauge", 40 + i % 9),
        ("num_requests_waiting", "gauge", i % 17),
        ("kv_cache_usage_perc", "gauge", (i % 100) / 100),
        ("num_preemptions_total", "counter", i // 50),
        ("prompt_tokens_total", "counter", 1843211 + i * 97),
        ("generation_tokens_total", "counter", 27453 + i * 31),
        ("prefix_cache_queries_total", "counter", 9000 + i),
        ("prefix_cache_hits_total", "counter", 4000 + i),
    ):
        out += [f"# HELP vllm:{name} {name}.", f"# TYPE vllm:{name} {kind}"]
        out.append(f"vllm:{name}{{{LABELS}}} {float(value)!r}")
        if kind == "counter":
            out.append(f"vllm:{name.removesuffix('_total')}_created{{{LABELS}}} 1.79e+09")
    for reason in ("stop", "length", "abort"):
        out.append(f'vllm:request_success_total{{{LABELS},finished_reason="{reason}"}} {i}.0')
    for name in HISTOGRAMS:
        out += [f"# HELP vllm:{name} {name}.", f"# TYPE vllm:{name} histogram"]
        for le in [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 8192, "+Inf"]:
            le_text = le if le == "+Inf" else f"{float(le)}"
            out.append(f'vllm:{name}_bucket{{engine="0",le="{le_text}",model_name="m"}} {float(i)}')
        out.append(f'vllm:{name}_count{{engine="0",model_name="m"}} {float(i)}')
        out.append(f'vllm:{name}_sum{{engine="0",model_name="m"}} {float(i * 3)}')
        out.append(f'vllm:{name}_created{{engine="0",model_name="m"}} 1.79e+09')
    out.append(
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
        'engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="27000",swap_space="4"} 1.0'
    )
    out += [f"process_virtual_memory_bytes {1e10 + i}", f"python_gc_objects_collected_total {i}"]
    return "\n".join(out) + "\n"


def straightforward(scrapes: list[tuple[datetime, str]]) -> int:
    """The obvious parser: prometheus_client over every scrape, keeping the mapped samples
    (cache_config_info aside: it becomes engine_config, not rows)."""
    ts: list[datetime] = []
    names: list[str] = []
    values: list[float] = []
    for when, text in scrapes:
        for fam in text_string_to_metric_families(text):
            for sample in fam.samples:
                if sample.name in WANTED_NAMES and sample.name != CACHE_CONFIG_INFO:
                    ts.append(when)
                    names.append(sample.name)
                    values.append(sample.value)
    return pl.DataFrame({"ts": ts, "name": names, "value": values}).height


def timed(label: str, mb: float, func: object) -> float:
    start = time.perf_counter()
    rows = func()  # type: ignore[operator]
    seconds = time.perf_counter() - start
    print(f"  {label:44} {seconds:7.2f} s  {mb / seconds:7.1f} MB/s  ({rows:,} rows)")
    return seconds


def curl_loop(n: int, work: Path) -> None:
    scrapes = [(T0 + timedelta(seconds=i / 10), exposition(i)) for i in range(n)]
    path = work / "curl_loop.prom"
    with path.open("w") as out:
        for when, text in scrapes:
            out.write(f"# oomtrace-scrape {when.isoformat().replace('+00:00', 'Z')}\n{text}")
    mb = path.stat().st_size / 1e6
    lines = sum(t.count("\n") for _, t in scrapes)
    print(f"1. curl loop: {n:,} full vLLM scrapes, {lines:,} lines, {mb:.1f} MB")
    ours = timed(
        "oomtrace ingest (prometheus)",
        mb,
        lambda: ingest_paths([path], IngestOptions()).samples.height,
    )
    peer = timed("prometheus_client on every line", mb, lambda: straightforward(scrapes))
    print(f"  ratio: oomtrace is {peer / ours:.1f}x the straightforward parser")


def capture(n: int) -> None:
    wanted = [
        line
        for line in exposition(0).splitlines()
        if line.split("{")[0] in WANTED_NAMES and line.split("{")[0] != CACHE_CONFIG_INFO
    ]
    scrapes = [
        (T0 + timedelta(seconds=i / 10), "\n".join(wanted).replace(" 40.0", f" {i % 50}.0") + "\n")
        for i in range(n)
    ]
    mb = sum(len(t) for _, t in scrapes) / 1e6
    print(f"2. collector capture: {n:,} scrapes of the {len(wanted)} mapped lines, {mb:.1f} MB")
    diag = SourceDiagnostics("bench", "prometheus", "n")
    ours = timed("parse_scrapes", mb, lambda: _height(parse_scrapes(scrapes, diag).samples))
    peer = timed("prometheus_client on every line", mb, lambda: straightforward(scrapes))
    print(f"  ratio: oomtrace is {peer / ours:.1f}x the straightforward parser")


def _height(frame: pl.DataFrame | None) -> int:
    return 0 if frame is None else frame.height


def query_json(series: int, points: int) -> None:
    result = [
        {
            "metric": {"__name__": "vllm:kv_cache_usage_perc", "engine": str(i)},
            "values": [[1741942800 + j * 0.1, str(j / 1000)] for j in range(points)],
        }
        for i in range(series)
    ]
    mb = len(json.dumps(result)) / 1e6
    print(f"3. query_range JSON values: {series:,} series x {points:,} points, {mb:.1f} MB")
    schema = {"t": pl.Float64, "v": pl.String}

    def per_series() -> int:
        frames = [pl.DataFrame(s["values"], schema=schema, orient="row") for s in result]
        return pl.concat(frames).height

    def comprehension() -> int:
        t = pl.Series([p[0] for s in result for p in s["values"]], dtype=pl.Float64)
        v = pl.Series([p[1] for s in result for p in s["values"]], dtype=pl.String)
        return pl.DataFrame({"t": t, "v": v}).height

    a = timed("one Polars frame per series", mb, per_series)
    b = timed("two flat comprehensions (used)", mb, comprehension)
    print(f"  ratio: comprehensions are {a / b:.1f}x per-series frames")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=2000)
    parser.add_argument("--captures", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        curl_loop(args.scrapes, Path(tmp))
    capture(args.captures)
    query_json(100, 10_000)
    query_json(10_000, 100)


if __name__ == "__main__":
    main()
