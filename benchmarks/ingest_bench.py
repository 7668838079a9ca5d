"""Ingest speed: the whole ``oomtrace ingest`` command on a large vLLM log, beside a per-line
regex parser (the baseline) and reading the file (the floor), in one run.

Generates the log of :mod:`ingest_log` (``--size``, ``--shape``) in a temporary directory, then
runs, round after round (``--repeat``), each in a fresh process:

* ``floor``: reading the file in 1 MiB pieces (wall time from start to exit);
* ``baseline``: :func:`ingest_log.baseline`, one Python ``re`` pass per family on every line
  (wall time from start to the end of its parsing; its facts are written after, untimed);
* ``oomtrace``: ``python -m oomtrace ingest LOG -o DIR --force``, the command a user runs (format
  sniffed, canonical Parquet tables and manifest written), from start to exit;
* ``no-scan``: the same command without the compiled scanner (as where the C extension was not
  built: every line read by the vectorised reader).

The project's modules are byte-compiled first, as an installed package's are: each run then
loads them as a user's command does, rather than compiling their source again where the
environment says not to write bytecode (``PYTHONDONTWRITEBYTECODE``, about 0.25 CPU s a run).

CPU seconds and peak memory are what the operating system counted for each process. Then it
cross-checks that oomtrace and the baseline read the same facts off the same lines: every
request's arrival (time, id, ``max_tokens``, prompt token count) and abort, that each "Added
request" is the arrival already told, every stats value, every OOM's sizes and device, and the
start-up figures. A difference is printed and the run fails (exit 1).

It prints each round, then each peer's best round and the ratios::

    python benchmarks/ingest_bench.py --size 1GB --repeat 3
    python benchmarks/ingest_bench.py --size 200MB --shape 0.11 --keep /tmp/bench.log
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest_log  # noqa: E402

PEERS: Final = ("floor", "baseline", "oomtrace", "no-scan")
# oomtrace without its compiled scanner (as where the C extension was not built).
_NO_SCANNER: Final = (
    "import sys; from oomtrace.ingest.vllm import chunk_reading as c; "
    "c.scanner_available = lambda: False; from oomtrace.cli import cli; cli(sys.argv[1:])"
)
_FLOOR: Final = (
    "import sys\nwith open(sys.argv[1], 'rb') as f:\n    while f.read(1 << 20):\n        pass\n"
)
_STATS: Final = {
    "prompt_throughput_tokens_per_s": ("prompt_tps", 1.0),
    "generation_throughput_tokens_per_s": ("gen_tps", 1.0),
    "requests_running": ("running", 1.0),
    "requests_waiting": ("waiting", 1.0),
    "kv_usage_ratio": ("kv_pct", 0.01),
    "prefix_cache_hit_ratio": ("prefix_pct", 0.01),
}
_STATS_FIELDS: Final = (
    "engine", "prompt_tps", "gen_tps", "running", "swapped", "pending", "waiting", "deferred",
    "preemptions", "kv_pct", "prefix_pct",
)  # fmt: skip


def _measured(argv: list[str], name: str, *, timed_itself: bool = False) -> dict[str, Any]:
    """Run ``argv`` in its own process: wall time from start to exit, and the CPU seconds and
    peak resident memory the operating system counted for it (wait4); ``timed_itself``: the
    process prints those of its own work as its last line, and they count instead."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE if timed_itself else subprocess.DEVNULL,
    )  # fmt: skip
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{name} failed with exit code {proc.returncode}")
    result = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
              "peak_rss_mib": usage.ru_maxrss / 1024}  # fmt: skip
    if timed_itself:
        # The baseline times its parsing itself: writing its facts afterwards is not its work.
        result |= json.loads(out.decode().strip().splitlines()[-1])
    return result


def run_round(log: Path, work: Path) -> dict[str, dict[str, Any]]:
    """One measurement of each peer, in turn."""
    facts = work / "facts"
    trace = work / "trace"
    command = ["ingest", str(log), "-o", str(trace), "--force"]
    return {
        "floor": _measured([sys.executable, "-S", "-c", _FLOOR, str(log)], "floor"),
        "baseline": _measured(
            [sys.executable, __file__, "--child", str(log), str(facts), repr(time.time())],
            "baseline",
            timed_itself=True,
        ),
        "oomtrace": _measured([sys.executable, "-m", "oomtrace", *command], "oomtrace"),
        "no-scan": _measured([sys.executable, "-c", _NO_SCANNER, *command], "no-scan"),
    }


def _child(log: Path, facts_dir: Path, spawned: float) -> None:
    """The baseline in its own process: parse, report the time it took from the moment it was
    started, then write what it read (for the cross-check)."""
    facts, _ = ingest_log.baseline(log)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    timing = {"wall_s": time.time() - spawned, "cpu_s": usage.ru_utime + usage.ru_stime,
              "peak_rss_mib": usage.ru_maxrss / 1024}  # fmt: skip
    _write_facts(facts, facts_dir)
    print(json.dumps(timing))


def _write_facts(facts: ingest_log.Facts, out: Path) -> None:
    import polars as pl

    out.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(facts.received, schema=["when", "request_id", "max_tokens", "prompt_tokens"],
                 orient="row").write_parquet(out / "received.parquet")  # fmt: skip
    pl.DataFrame(facts.simple, schema=["when", "what", "request_id"], orient="row").write_parquet(
        out / "simple.parquet"
    )
    pl.DataFrame(facts.stats, schema=["when", *_STATS_FIELDS], orient="row").write_parquet(
        out / "stats.parquet"
    )
    pl.DataFrame(facts.ooms, schema=["when", "tried", "device", "total", "free"],
                 orient="row").write_parquet(out / "ooms.parquet")  # fmt: skip
    (out / "config.json").write_text(json.dumps(facts.config))


def cross_check(facts_dir: Path, trace_dir: Path) -> list[str]:
    """What oomtrace's trace and the baseline's facts disagree on (empty: nothing), and what
    was compared."""
    import polars as pl

    from oomtrace.ingest.torch.oom_text import REPEAT_WINDOW_S
    from oomtrace.units import parse_bytes

    def when(frame: pl.DataFrame) -> pl.DataFrame:
        stamp = pl.col("when").str.to_datetime(
            "%Y-%m-%dT%H:%M:%S%.fZ", time_unit="ns", time_zone="UTC"
        )
        return frame.with_columns(ts=stamp).drop("when")

    requests = pl.read_parquet(trace_dir / "requests.parquet")
    samples = pl.read_parquet(trace_dir / "samples.parquet")
    events = pl.read_parquet(trace_dir / "events.parquet")
    config = json.loads((trace_dir / "manifest.json").read_text())["engine_config"]
    problems: list[str] = []

    def same(name: str, ours: pl.DataFrame, theirs: pl.DataFrame) -> None:
        keys = ours.columns
        ours, theirs = ours.sort(keys), theirs.select(keys).sort(keys)
        if ours.equals(theirs):
            print(f"  {name}: {ours.height:,} the same")
            return
        only_ours = ours.join(theirs, on=keys, how="anti", nulls_equal=True)
        only_theirs = theirs.join(ours, on=keys, how="anti", nulls_equal=True)
        problems.append(
            f"{name}: oomtrace {ours.height:,}, baseline {theirs.height:,}; only in oomtrace "
            f"{only_ours.head(3).rows()}, only in the baseline {only_theirs.head(3).rows()}"
        )

    received = when(pl.read_parquet(facts_dir / "received.parquet")).with_columns(
        pl.col("max_tokens").cast(pl.Int64, strict=False), pl.col("prompt_tokens").cast(pl.Int64)
    )
    same("arrivals (time, id, max_tokens, prompt tokens)",
         requests.filter(pl.col("event") == "arrived").select(
             "ts", "request_id", "max_tokens", "prompt_tokens"), received)  # fmt: skip
    simple = when(pl.read_parquet(facts_dir / "simple.parquet"))
    same("aborts (time, id)",
         requests.filter(pl.col("event") == "aborted").select("ts", "request_id"),
         simple.filter(pl.col("what") == "Aborted"))  # fmt: skip
    added = simple.filter(pl.col("what") == "Added").get_column("request_id")
    arrived = requests.filter(pl.col("event") == "arrived").get_column("request_id")
    untold = added.filter(~added.is_in(arrived.implode()))
    if untold.len() or requests.filter(pl.col("event") == "admitted").height:
        problems.append(f"'Added request' lines not joined to their arrival: {untold.head(3)}")
    else:
        print(f"  'Added request' lines: {added.len():,}, each the arrival already told")
    stats = when(pl.read_parquet(facts_dir / "stats.parquet"))
    theirs = pl.concat(
        stats.select("ts", metric=pl.lit(metric), value=pl.col(field).cast(pl.Float64) * scale)
        for metric, (field, scale) in _STATS.items()
    )
    ours = samples.filter(pl.col("metric").is_in(list(_STATS))).select("ts", "metric", "value")
    same("stats samples (time, metric, value)", ours.with_columns(pl.col("value").round(9)),
         theirs.with_columns(pl.col("value").round(9)))  # fmt: skip
    ooms = when(pl.read_parquet(facts_dir / "ooms.parquet")).select(
        "ts",
        device=pl.col("device").cast(pl.Int32),
        requested_bytes=pl.col("tried").map_elements(parse_bytes, return_dtype=pl.Int64),
        total_bytes=pl.col("total").map_elements(parse_bytes, return_dtype=pl.Int64),
        free_bytes=pl.col("free").map_elements(parse_bytes, return_dtype=pl.Int64),
    )
    # One failure printed again (a worker's traceback, then its wrapper) is one OOM: identical
    # messages for one device within REPEAT_WINDOW_S count once (oomtrace.ingest.torch.oom_text).
    key = ["device", "requested_bytes", "free_bytes"]
    previous = pl.col("ts").shift(1).over(key)
    gap = (pl.col("ts") - previous).dt.total_seconds()
    ooms = ooms.sort("ts").filter(previous.is_null() | (gap > REPEAT_WINDOW_S))
    same("OOMs (time, device, requested, total, free)",
         events.filter(pl.col("kind") == "oom").select(ooms.columns), ooms)  # fmt: skip
    stated = json.loads((facts_dir / "config.json").read_text())
    expected = {
        "model_weights_bytes": parse_bytes(f"{stated['model_weights_bytes']} GiB"),
        "available_kv_cache_bytes": parse_bytes(f"{stated['available_kv_cache_bytes']} GiB"),
        "kv_cache_tokens": int(stated["kv_cache_tokens"].replace(",", "")),
        "max_concurrency": float(stated["max_concurrency"]),
    }
    got = {key: config.get(key) for key in expected}
    if got != expected:
        problems.append(f"start-up figures: oomtrace {got}, baseline {expected}")
    else:
        print(f"  start-up figures: {len(expected)} the same")
    return problems


def _best(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each peer's best round (least wall time; on a shared machine the others are noise)."""
    return {name: min((r[name] for r in rounds), key=lambda m: m["wall_s"]) for name in PEERS}


def _report(results: dict[str, dict[str, Any]], size: int) -> None:
    mb = size / 1e6
    for name in PEERS:
        r = results[name]
        print(
            f"  {name:9} {r['wall_s']:7.2f} s wall ({mb / r['wall_s']:7.1f} MB/s)  "
            f"{r['cpu_s']:7.2f} s CPU  peak {r['peak_rss_mib']:6.0f} MiB"
        )
    base, floor = results["baseline"], results["floor"]
    for name in PEERS[2:]:
        ours = results[name]
        print(
            f"  {name} is {base['wall_s'] / ours['wall_s']:.1f}x the baseline in wall time and "
            f"{base['cpu_s'] / ours['cpu_s']:.1f}x in CPU time; it takes "
            f"{ours['wall_s'] / floor['wall_s']:.1f}x the floor's wall time ({mb:,.0f} MB)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", default="1GB", help="log size, e.g. 1GB, 200MB (default 1GB)")
    parser.add_argument("--keep", type=Path, help="write the log here and keep it (reused)")
    parser.add_argument(
        "--shape", choices=["0.12", "0.11"], default="0.12",
        help="request lines as vLLM 0.12+ prints them (params only, the default) or as 0.11 "
        "does (also prompt text and token ids)",
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=3,
        help="rounds of the three measurements (default 3); the summary takes each peer's best",
    )  # fmt: skip
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(Path(args.child[0]), Path(args.child[1]), float(args.child[2]))
        return
    from oomtrace.units import parse_bytes

    for package in ("oomtrace", "collectors", "benchmarks"):
        compileall.compile_dir(ROOT / package, quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = args.keep or work / "vllm-server.log"
        if not (args.keep and log.exists()):
            started = time.perf_counter()
            size = ingest_log.generate(log, parse_bytes(args.size, what="--size"), args.shape)
            print(f"generated {size / 1e6:,.0f} MB in {time.perf_counter() - started:.0f} s: {log}")
        size = log.stat().st_size
        rounds = []
        for number in range(1, args.repeat + 1):
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            print(f"round {number} (load average {load:.1f}, {os.cpu_count()} CPUs):")
            rounds.append(run_round(log, work))
            _report(rounds[-1], size)
        print("cross-check, the facts both read off the same lines:")
        problems = cross_check(work / "facts", work / "trace")
    if len(rounds) > 1:
        print(f"best of {len(rounds)} rounds:")
        _report(_best(rounds), size)
    if problems:
        for problem in problems:
            print(f"DIFFERENT: {problem}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
