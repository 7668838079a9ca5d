"""``oomtrace report`` as a whole command, beside its floors, in one run.

Two inputs:

* a shipped sample incident (``sample_logs/vllm-kv-exhaustion``: raw logs, ingested and analysed
  on the fly, then reported), the first run in a fresh cache folder (the JavaScript bundle is
  built) and the runs after it (read from the cache);
* a generated day (device memory at 100 Hz: 8.64 million samples with one 10 ms spike;
  allocator and scheduler series at 1 Hz; two million requests with lifecycle events; an OOM
  at 22:13 and 5,000 resident intervals in its window), reported from saved findings
  (``--findings``, what ``oomtrace analyze --json`` wrote), analysed by the report itself (no
  ``--findings``: the analysis' lazy scan, then the report), and reported without an incident
  (every chart then covers the whole day).

Each command runs as its own process, ``--repeat`` times; the table gives the median wall time,
CPU time (user + system) and peak memory of each, and their ratios to two floors measured the
same way: a Python process that imports what a report needs (Polars, Altair) and does nothing
else; and one that reads the day's three tables whole (what the report did before it scanned
only its span). The outputs are checked: the day's report names the findings' class and
culprits, and its whole-day memory chart still holds the one-sample spike.

Run: ``python benchmarks/report_bench.py [--repeat 3] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from oomtrace.schema import SCHEMA_VERSION, SCHEMAS, conform
from oomtrace.trace import Manifest, Trace, write_trace

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
T0 = datetime(2025, 3, 14, tzinfo=UTC)
DAY_S = 86_400
SPIKE_S = 61_234.56
OOM_S = 80_000.0


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
    # one sample 4 GiB above the rest: the spike a whole-day chart must still show
    spike_row = int(SPIKE_S * hz)
    used = used.with_columns(
        pl.when(pl.int_range(0, n) == spike_row)
        .then(pl.lit(23.5 * GiB))
        .otherwise(pl.col("value"))
        .round(0)
        .alias("value")
    )
    seconds = pl.DataFrame({"s": pl.int_range(0, DAY_S, eager=True)})
    slow = [
        seconds.select(
            (pl.lit(T0) + pl.duration(seconds=pl.col("s"))).alias("ts"),
            pl.lit(metric).alias("metric"),
            expr.alias("value"),
        )
        for metric, expr in (
            ("device_total_bytes", pl.lit(24.0 * GiB)),
            ("torch_reserved_bytes", pl.lit(20.0 * GiB)),
            (
                "torch_allocated_bytes",
                (pl.lit(16.0 * GiB) + (pl.col("s") % 600) * 2_000_000).cast(pl.Float64),
            ),
            ("requests_running", (pl.col("s") % 64).cast(pl.Float64)),
            ("requests_waiting", (pl.col("s") % 7).cast(pl.Float64)),
        )
    ]
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
    events = [
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
        for event, offset_ms in (("arrived", 0), ("admitted", 50), ("finished", 20_000))
    ]
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
        engine={"name": "vllm", "version": "0.13.0"},
        engine_config={"model_weights_bytes": 15 * GiB, "available_kv_cache_bytes": 4 * GiB},
    )
    return Trace(
        conform("samples", samples.sort("ts")),
        conform("requests", lifecycle),
        conform("events", oom),
        manifest,
    )


def _iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def findings(lanes: int = 5_000) -> dict[str, Any]:
    """Findings of the published shape for the generated day: a KV exhaustion at the OOM."""
    rows = [
        {
            "request_id": f"req-{k}",
            "seg": 0,
            "from_ts": _iso(OOM_S - 60 + k * 0.01),
            "to_ts": _iso(OOM_S),
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
        "trace": {"start": _iso(0), "end": _iso(DAY_S - 0.01)},
        "kv_model": {"pool_bytes": 4 * GiB},
        "incidents": [
            {
                "id": "I1",
                "class": "kv_exhaustion",
                "start": _iso(OOM_S - 60),
                "window_start": _iso(OOM_S - 60),
                "peak_ts": _iso(OOM_S),
                "peak_bytes": 24 * GiB,
                "capacity_bytes": 4 * GiB,
                "coverage": 0.8,
                "culprits": culprits,
                "requests_in_window": rows,
            }
        ],
    }


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_mib: float


# A small process starts each command and reports its resources: a child forked from this
# process (which holds a generated day) would count this process's memory as its own peak.
MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - start
if done.returncode:
    sys.exit(done.stderr.decode()[-2000:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps([wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss]))
"""


def run(command: Sequence[str], env: dict[str, str]) -> Run:
    """One process: wall time, CPU (user + system) and peak resident memory."""
    done = subprocess.run(
        [sys.executable, "-S", "-c", MEASURE, *command],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr}")
    wall, cpu, peak_kib = json.loads(done.stdout)
    return Run(wall, cpu, peak_kib / 1024)


def median(runs: list[Run]) -> Run:
    return Run(
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.cpu_s for r in runs),
        max(r.peak_mib for r in runs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="Keep the trace and reports here.")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2_000_000)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="oomtrace-report-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    day = out / "day"
    manifest = day / "manifest.json"
    # a day kept from an earlier run is reused unless an older schema wrote it (a table whose
    # columns differ from today's is read whole, not scanned: the figures would be of that)
    stale = (
        not manifest.exists()
        or json.loads(manifest.read_text(encoding="utf-8")).get("schema_version") != SCHEMA_VERSION
        or any(
            dict(pl.read_parquet_schema(day / f"{name}.parquet")) != dict(SCHEMAS[name])
            for name in ("samples", "requests", "events")
        )
    )
    if stale:
        write_trace(generate(args.requests), day, overwrite=True)
    saved = out / "findings.json"
    saved.write_text(json.dumps(findings()), encoding="utf-8")
    none = out / "no-incident.json"
    none.write_text(json.dumps({"findings_version": 1, "incidents": []}), encoding="utf-8")
    cache = out / "cache"
    # As a user runs it: compiled modules are written and reused (this sandbox may disable it).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["OOMTRACE_CACHE_DIR"] = str(cache)
    oomtrace = [sys.executable, "-m", "oomtrace"]
    sample = str(ROOT / "sample_logs" / "vllm-kv-exhaustion")
    floor_import = [sys.executable, "-c", "import polars, altair"]
    floor_read = [
        sys.executable,
        "-c",
        (
            "import sys, polars as pl; [pl.read_parquet(f'{sys.argv[1]}/{t}.parquet') "
            "for t in ('samples', 'requests', 'events')]"
        ),
        str(day),
    ]
    commands = {
        "floor: start Python, import Polars and Altair": floor_import,
        "floor: read the day's tables whole": floor_read,
        "sample incident, raw logs -> HTML": [
            *oomtrace, "report", sample, "-o", str(out / "sample.html"), "--force"
        ],
        "day, --findings -> HTML": [
            *oomtrace, "report", str(day), "--findings", str(saved),
            "-o", str(out / "day.html"), "--force",
        ],
        "day, analysed by the report (no --findings) -> HTML": [
            *oomtrace, "report", str(day), "-o", str(out / "day-analysed.html"), "--force",
        ],
        "day, no incident (whole day drawn) -> HTML": [
            *oomtrace, "report", str(day), "--findings", str(none),
            "-o", str(out / "whole-day.html"), "--force",
        ],
    }  # fmt: skip
    # the first run of all: a fresh cache, the bundle built once
    subprocess.run(["rm", "-rf", str(cache)], check=True)
    first = run(commands["sample incident, raw logs -> HTML"], env)
    results: dict[str, Run] = {}
    for label, command in commands.items():
        results[label] = median([run(command, env) for _ in range(args.repeat)])
    check(out, day, saved, none, env, oomtrace)
    importing = results["floor: start Python, import Polars and Altair"]
    reading = results["floor: read the day's tables whole"]
    print(
        f"{'command':46} {'wall s':>7} {'CPU s':>7} {'peak MiB':>9} {'x import':>9} {'x read':>7}"
    )
    print(
        f"{'sample incident, first run (fresh cache)':46} {first.wall_s:7.2f} {first.cpu_s:7.2f} "
        f"{first.peak_mib:9.0f} {first.cpu_s / importing.cpu_s:9.1f} {'':>7}"
    )
    for label, r in results.items():
        print(
            f"{label:46} {r.wall_s:7.2f} {r.cpu_s:7.2f} {r.peak_mib:9.0f} "
            f"{r.cpu_s / importing.cpu_s:9.1f} {r.cpu_s / reading.cpu_s:7.2f}"
        )
    print(f"\n(median of {args.repeat} runs; ratios are of CPU time; outputs in {out})")


def check(
    out: Path, day: Path, saved: Path, none: Path, env: dict[str, str], oomtrace: list[str]
) -> None:
    """The day's reports say what the findings say, and the whole-day chart keeps the spike."""
    with_incident = subprocess.run(
        [*oomtrace, "report", str(day), "--findings", str(saved), "--format", "json"],
        env=env,
        capture_output=True,
        check=True,
    )
    doc = json.loads(with_incident.stdout)
    named = [c["request_id"] for c in doc["verdict"]["culprits"]]
    expected = [c["request_id"] for c in findings()["incidents"][0]["culprits"]]
    if doc["verdict"]["class"] != "kv_exhaustion" or named != expected:
        raise SystemExit(f"the day's report disagrees with its findings: {named[:3]}")
    whole = subprocess.run(
        [*oomtrace, "report", str(day), "--findings", str(none), "--format", "json"],
        env=env,
        capture_output=True,
        check=True,
    )
    memory = next(s for s in json.loads(whole.stdout)["sections"] if s["key"] == "memory")
    data = memory["charts"][0]["data"]
    highest = max(
        v for s, v in zip(data["series"], data["value"], strict=True) if s == "device used"
    )
    if highest != int(23.5 * GiB):
        raise SystemExit(f"the whole-day chart lost the spike: highest {highest / GiB:.2f} GiB")
    print("checked: the day's report names the findings' culprits; the whole-day chart keeps the "
          "23.50 GiB one-sample spike")  # fmt: skip


if __name__ == "__main__":
    main()
