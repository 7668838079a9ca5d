"""Replay speed: the compiled event simulator against the per-token reference, side by side.

1. A slice of the synthetic day (the first ``--slice`` requests, a pool tight enough to run dry)
   is replayed by both simulators; the run fails unless every request's outcome, every series
   point and every total agree. Both wall times and their ratio are printed.
2. The whole day (``--requests``, two million by default) is replayed by the fast simulator
   alone under three settings: an ample pool, a tight pool (preemption storms at the daily
   peak), and ``reserve``.

0. The crossovers: plain Python against compiled by workload size, beside what compiling the
   kernel and loading it from the cache cost a fresh process
   (``oomtrace.replay.compiled.CROSSOVER_REQUESTS`` and ``COLD_CROSSOVER_REQUESTS``).

Run: ``python benchmarks/replay_bench.py`` (about a minute on two cores; the first run also
compiles the simulator). Figures are wall-clock seconds on this machine, not a promise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_gen import day_of_traffic

from oomtrace.replay import ReplaySettings, compiled, runner, workload_from_frame
from oomtrace.replay.reference import simulate_reference

T = TypeVar("T")


def timed(label: str, func: Callable[..., T], *args: Any) -> tuple[T, float]:
    start = time.perf_counter()
    out = func(*args)
    wall = time.perf_counter() - start
    print(f"  {label:<44} {wall:8.3f} s")
    return out, wall


def compare_on_slice(size: int, kv_blocks: int) -> None:
    day = day_of_traffic()
    part = workload_from_frame(day.requests.head(size).drop("arrival"))
    settings = ReplaySettings(kv_blocks=kv_blocks, block_size=16, max_num_seqs=64)
    arrays = runner.request_arrays(part, settings)
    end = int(arrays["arr"].max()) * 2
    probes = np.linspace(0, end, 500).astype(np.int64)
    tokens = int(arrays["o"].sum())
    print(f"slice: {size:,} requests, {tokens:,} output tokens, pool {kv_blocks:,} blocks")
    runner.simulate(part, settings, probes, arrays=arrays)  # compile or load the cache first
    fast, t_fast = timed("fast event simulator", runner.simulate, part, settings, probes, arrays)
    ref, t_ref = timed(
        "per-token reference simulator",
        simulate_reference,
        arrays,
        settings.kv_blocks,
        runner.limits_array(settings),
        probes,
    )
    state, series, totals = ref
    cols = [5, 6, 7, 8]
    agree = (
        np.array_equal(fast.state[:, cols], state[:, cols])
        and np.array_equal(fast.series, series)
        and np.array_equal(fast.totals, totals)
    )
    print(f"  preemptions {int(totals[2]):,}, first overflow at {totals[1] / 1e9:.3f} s")
    print(f"  agree: {agree}; reference / fast = {t_ref / t_fast:,.0f}x")
    print(f"  token events/s: reference {tokens / t_ref:,.0f}, fast {tokens / t_fast:,.0f}")
    if not agree:
        raise SystemExit("the simulators disagree on the slice")


def full_day(requests: int) -> None:
    day, _ = timed("generate the day", day_of_traffic, requests)
    tokens = int(day.requests["output_tokens"].sum())
    print(f"day: {day.size:,} requests, {tokens:,} output tokens")
    runs = {
        "on-demand, 30,000 blocks (ample)": ReplaySettings(30_000, max_num_seqs=256),
        "on-demand, 12,000 blocks (storms at peak)": ReplaySettings(12_000, max_num_seqs=256),
        "reserve, 30,000 blocks": ReplaySettings(30_000, max_num_seqs=256, policy="reserve"),
    }
    for label, settings in runs.items():
        arrays = runner.request_arrays(day, settings)
        raw, wall = timed(label, runner.simulate, day, settings, None, arrays)
        print(
            f"    {day.size / wall:,.0f} requests/s, {tokens / wall:,.0f} token-equivalents/s; "
            f"peak {int(raw.totals[0]):,} blocks, {int(raw.totals[2]):,} preemptions"
        )


# A two-request replay in a fresh process, its CPU seconds printed: with
# OOMTRACE_REPLAY_ENGINE=compiled it compiles the kernel (empty cache) or loads it; with
# "python" it is the floor subtracted from both (interpreter, imports, the replay itself).
TINY_REPLAY = """
import time
c = time.process_time()
from oomtrace.replay import ReplaySettings, replay, workload_from_arrays
w = workload_from_arrays([0.0, 0.5], [40, 50], [8, 9])
replay(w, ReplaySettings(kv_blocks=60, block_size=16), series_points=0)
print(time.process_time() - c)
"""


def fresh_process_cpu(code: str, cache: str, engine: str) -> float:
    """CPU seconds ``code`` reports in a fresh process with ``cache`` as the user's cache."""
    env = {**os.environ, "OOMTRACE_CACHE_DIR": cache, "OOMTRACE_REPLAY_ENGINE": engine}
    env.pop("NUMBA_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return float(done.stdout)


def crossover(sizes: list[int]) -> None:
    """Where the compiled kernel starts to pay: plain Python against compiled by workload size,
    beside what a fresh process pays to compile the kernel (an empty cache) and to load it from
    the cache (numba's import included). :data:`oomtrace.replay.compiled.CROSSOVER_REQUESTS` is
    where Python's extra time meets the load, ``COLD_CROSSOVER_REQUESTS`` where it meets
    compiling; both are printed from the per-request costs of the largest size."""
    with tempfile.TemporaryDirectory() as cache:
        plain = fresh_process_cpu(TINY_REPLAY, cache, "python")
        compile_cpu = fresh_process_cpu(TINY_REPLAY, cache, "compiled") - plain
        load = fresh_process_cpu(TINY_REPLAY, cache, "compiled") - plain
    print(
        f"crossover: in a fresh process, compiling the kernel costs {compile_cpu:.2f} CPU s and "
        f"loading it from the cache {load:.2f} CPU s (numba's import included)"
    )
    runner.simulate(day_of_traffic(100), ReplaySettings(1_000), engine="compiled")  # loaded here
    day = day_of_traffic(max(sizes))
    settings = ReplaySettings(30_000, max_num_seqs=256)
    per_request = {}
    for size in sizes:
        part = workload_from_frame(day.requests.head(size).drop("arrival"))
        arrays = runner.request_arrays(part, settings)
        cpu = {}
        for engine in ("python", "compiled"):
            start = time.process_time()
            runner.simulate(part, settings, arrays=arrays, engine=engine)
            cpu[engine] = time.process_time() - start
        per_request = {engine: cpu[engine] / size for engine in cpu}
        cheaper = "compiled" if cpu["python"] > cpu["compiled"] + load else "python"
        print(
            f"  {size:>9,} requests: python {cpu['python']:7.3f} s, compiled "
            f"{cpu['compiled']:7.3f} s (+{load:.2f} s to load): {cheaper} is cheaper"
        )
    saved = per_request["python"] - per_request["compiled"]
    print(
        f"  per request: python {1e6 * per_request['python']:.1f} µs, compiled "
        f"{1e6 * per_request['compiled']:.2f} µs; compiled pays from about "
        f"{load / saved:,.0f} requests with the cache warm, {(compile_cpu + load) / saved:,.0f} "
        f"while nothing is compiled (set: {compiled.CROSSOVER_REQUESTS:,} and "
        f"{compiled.COLD_CROSSOVER_REQUESTS:,})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", type=int, default=3_000)
    parser.add_argument("--slice-blocks", type=int, default=1_500)
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument(
        "--crossover", type=int, nargs="+", default=[2_000, 10_000, 20_000, 50_000, 200_000]
    )
    parser.add_argument("--crossover-only", action="store_true")
    args = parser.parse_args()
    crossover(args.crossover)
    if args.crossover_only:
        return
    compare_on_slice(args.slice, args.slice_blocks)
    full_day(args.requests)


if __name__ == "__main__":
    main()
