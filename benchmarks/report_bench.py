"""How long the report takes for a day-long trace, and how big it gets.

A generated day: device memory sampled at 100 Hz (8.64 million samples) with one 10 ms spike,
allocator and scheduler series at 1 Hz, two million requests with lifecycle events, an OOM, and
5,000 resident intervals in the incident window. The report is built from findings of the
analysis' published shape. Measured side by side in the same run:

* the floor: reading the trace's Parquet files back;
* the peer for the display reduction: a per-bucket mean (``group_by_dynamic``), which is what
  a chart library would do and which loses the spike; ours keeps the min and max per bucket.

Run: ``python benchmarks/report_bench.py [--out DIR]``; prints times, ratios and output sizes.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from oomtrace.report import ReportOptions, build_report, javascript_bundle, render
from oomtrace.report.downsample import peak_preserving
from oomtrace.schema import conform
from oomtrace.trace import Manifest, Trace, read_trace, write_trace

GiB = 1 << 30
T0 = datetime(2025, 3, 14, tzinfo=UTC)
DAY_S = 86_400
SPIKE_S = 61_234.56
OOM_S = 80_000.0
T = TypeVar("T")


def timed(label: str, fn: Callable[[], T], results: dict[str, float]) -> T:
    start = time.perf_counter()
    value = fn()
    results[label] = time.perf_counter() - start
    return value


def generate(requests: int = 2_000_000) -> Trace:
    hz = 100
    n = DAY_S * hz
    ms = pl.int_range(0, n, eager=True) * (1000 // hz)
    ts = pl.lit(T0) + pl.duration(milliseconds=ms)
    wave = (pl.int_range(0, n, eager=True) % 60_000).cast(pl.Float64) / 60_000
    used = pl.DataFrame({"i": pl.int_range(0, n, eager=True)}).select(
        ts.alias("ts"),
        pl.lit("device_used_bytes").alias("metric"),
        (pl.lit(18.0 * GiB) + wave * 3 * GiB).alias("value"),
    )
    # one sample 4 GiB above the rest: the spike the report must still show
    spike_row = int(SPIKE_S * hz)
    used = used.with_columns(
        pl.when(pl.int_range(0, n) == spike_row)
        .then(pl.lit(23.5 * GiB))
        .otherwise(pl.col("value"))
        .round(0)
        .alias("value")
    )
    seconds = pl.DataFrame({"s": pl.int_range(0, DAY_S, eager=True)})
    slow = []
    for metric, expr in (
        ("device_total_bytes", pl.lit(24.0 * GiB)),
        ("torch_reserved_bytes", pl.lit(20.0 * GiB)),
        (
            "torch_allocated_bytes",
            (pl.lit(16.0 * GiB) + (pl.col("s") % 600) * 2_000_000).cast(pl.Float64),
        ),
        ("requests_running", (pl.col("s") % 64).cast(pl.Float64)),
        ("requests_waiting", (pl.col("s") % 7).cast(pl.Float64)),
    ):
        slow.append(
            seconds.select(
                (pl.lit(T0) + pl.duration(seconds=pl.col("s"))).alias("ts"),
                pl.lit(metric).alias("metric"),
                expr.alias("value"),
            )
        )
    samples = pl.concat([used, *slow]).with_columns(
        node=pl.lit("node-a"),
        source=pl.lit("bench"),
        device=pl.lit(0, pl.Int32),
        pid=pl.lit(None, pl.Int64),
    )
    r = pl.DataFrame({"k": pl.int_range(0, requests, eager=True)})
    arrive_ms = (pl.col("k") * (DAY_S * 1000 // requests)).cast(pl.Int64)
    base = r.select(
        pl.format("req-{}", pl.col("k")).alias("request_id"),
        arrive_ms.alias("ms"),
        (pl.col("k") % 4000 + 100).alias("prompt_tokens"),
        pl.lit(1024, pl.Int64).alias("max_tokens"),
        (pl.col("k") % 900 + 10).alias("output_tokens"),
    )
    events = []
    for event, offset_ms in (("arrived", 0), ("admitted", 50), ("finished", 20_000)):
        events.append(
            base.select(
                (pl.lit(T0) + pl.duration(milliseconds=pl.col("ms") + offset_ms)).alias("ts"),
                "request_id",
                pl.lit(event).alias("event"),
                "prompt_tokens",
                "max_tokens",
                pl.when(pl.lit(event == "finished"))
                .then(pl.col("output_tokens"))
                .alias("output_tokens"),
            )
        )
    lifecycle = (
        pl.concat(events).with_columns(node=pl.lit("node-a"), source=pl.lit("bench")).sort("ts")
    )
    oom = pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=OOM_S)],
            "kind": ["oom"],
            "node": ["node-a"],
            "source": ["bench"],
            "requested_bytes": [2 * GiB],
            "detail": ["CUDA out of memory. Tried to allocate 2.00 GiB"],
        }
    )
    manifest = Manifest(
        nodes=["node-a"],
        engine={"name": "vllm"},
        engine_config={"model_weights_bytes": 15 * GiB, "available_kv_cache_bytes": 4 * GiB},
    )
    return Trace(
        conform("samples", samples.sort("ts")),
        conform("requests", lifecycle),
        conform("events", oom),
        manifest,
    )


def findings(lanes: int = 5_000) -> dict[str, Any]:
    def iso(s: float) -> str:
        return (T0 + timedelta(seconds=s)).isoformat().replace("+00:00", "Z")

    rows = [
        {
            "request_id": f"req-{k}",
            "seg": 0,
            "from_ts": iso(OOM_S - 60 + k * 0.01),
            "to_ts": iso(OOM_S),
            "tokens_from": 100,
            "tokens_to": 100 + k,
            "bytes_to": (100 + k) * 131072,
            "end_basis": "stated",
            "culprit_rank": None,
        }
        for k in range(lanes)
    ]
    culprits = [
        {
            "rank": i + 1,
            "request_id": f"req-{lanes - 1 - i}",
            "share": 0.05,
            "tokens": 5000,
            "bytes": 5000 * 131072,
            "reason": "resident at the spike",
        }
        for i in range(10)
    ]
    return {
        "findings_version": 1,
        "incidents": [
            {
                "class": "kv_exhaustion",
                "start": iso(OOM_S - 60),
                "peak_ts": iso(OOM_S),
                "peak_bytes": 24 * GiB,
                "coverage": 0.8,
                "culprits": culprits,
                "requests_in_window": rows,
            }
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="Keep the trace and reports here.")
    parser.add_argument("--requests", type=int, default=2_000_000)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="oomtrace-report-bench-"))
    results: dict[str, float] = {}
    trace = timed("generate", lambda: generate(args.requests), results)
    print(f"trace: {trace.samples.height:,} samples, {trace.requests.height:,} request events")
    write_trace(trace, out / "trace", overwrite=True)
    trace = timed("read trace (floor)", lambda: read_trace(out / "trace"), results)
    from oomtrace.report.inputs import from_findings_document

    memory = trace.samples.filter(pl.col("metric") == "device_used_bytes").select(
        "ts", pl.col("metric").alias("series"), "value"
    )
    kept = timed(
        "downsample: min+max per bucket (ours)",
        lambda: peak_preserving(memory, max_buckets=1000),
        results,
    )
    every = f"{(DAY_S * 1000) // 1000}ms"
    mean = timed(
        "downsample: mean per bucket (peer)",
        lambda: memory.group_by_dynamic("ts", every=every).agg(pl.col("value").mean()),
        results,
    )
    timed("javascript bundle (once per process)", javascript_bundle, results)
    inputs = from_findings_document(findings(), trace)
    report = timed("build report model", lambda: build_report(inputs, ReportOptions()), results)
    sizes: dict[str, int] = {}
    for fmt, name in (
        ("html", "incident.html"),
        ("json", "incident.json"),
        ("text", "incident.txt"),
        ("markdown", "incident.md"),
    ):
        rendered = timed(
            f"render {fmt}",
            lambda fmt=fmt: render(report, fmt, asset_dir="incident-charts"),
            results,
        )  # type: ignore[misc]
        (out / name).write_text(rendered.text, encoding="utf-8")
        size = len(rendered.text.encode())
        for asset, data in rendered.assets.items():
            (out / asset).parent.mkdir(parents=True, exist_ok=True)
            (out / asset).write_bytes(data)
            size += len(data)
        sizes[fmt] = size
    floor = results["read trace (floor)"]
    print(f"\n{'step':42} {'seconds':>9} {'x floor':>8}")
    for label, seconds in results.items():
        print(f"{label:42} {seconds:9.3f} {seconds / floor:8.2f}")
    ratio = (
        results["downsample: min+max per bucket (ours)"]
        / results["downsample: mean per bucket (peer)"]
    )
    print(f"\nmin+max vs mean downsampling time: {ratio:.2f}x")
    print(
        f"spike kept: ours max {kept['value'].max() / GiB:.2f} GiB, "
        f"mean-per-bucket max {mean['value'].max() / GiB:.2f} GiB (recorded 23.50 GiB)"
    )
    total = results["build report model"] + results["render html"]
    print(f"report (model + HTML): {total:.2f} s = {total / floor:.1f}x reading the trace")
    for fmt, size in sizes.items():
        print(f"size {fmt:9} {size / 1e6:7.2f} MB")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MiB; outputs in {out}")


if __name__ == "__main__":
    main()
