"""Replay speed: the compiled event simulator against the per-token reference, side by side.

1. A slice of the synthetic day (the first ``--slice`` requests, a pool tight enough to run dry)
   is replayed by both simulators; the run fails unless every request's outcome, every series
   point and every total agree. Both wall times and their ratio are printed.
2. The whole day (``--requests``, two million by default) is replayed by the fast simulator
   alone under three settings: an ample pool, a tight pool (preemption storms at the daily
   peak), and ``reserve``.

0. The crossover: plain Python against compiled by workload size, beside what loading the
   compiled kernel costs a fresh process (``oomtrace.replay.compiled.CROSSOVER_REQUESTS``).

Run: ``python benchmarks/replay_bench.py`` (about a minute on two cores; the first run also
compiles the simulator). Figures are wall-clock seconds on this machine, not a promise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_gen import day_of_traffic

from oomtrace.replay import ReplaySettings, runner, workload_from_frame
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


LOAD_COMPILED = """
import time
c = time.process_time()
from oomtrace.replay.compiled import compiled_simulate
compiled_simulate()
print(time.process_time() - c)
"""


def crossover(sizes: list[int]) -> None:
    """Where the compiled kernel starts to pay: plain Python against compiled by workload size, and
    what loading the compiled kernel from its cache costs a fresh process (numba's import
    included): :data:`oomtrace.replay.compiled.CROSSOVER_REQUESTS` is where they meet."""
    runner.simulate(day_of_traffic(100), ReplaySettings(1_000), engine="compiled")  # compiled once
    load = float(
        subprocess.run(
            [sys.executable, "-c", LOAD_COMPILED], capture_output=True, text=True, check=True
        ).stdout
    )
    print(f"crossover: loading the compiled kernel in a fresh process costs {load:.2f} CPU s")
    day = day_of_traffic(max(sizes))
    settings = ReplaySettings(30_000, max_num_seqs=256)
    for size in sizes:
        part = workload_from_frame(day.requests.head(size).drop("arrival"))
        arrays = runner.request_arrays(part, settings)
        cpu = {}
        for engine in ("python", "compiled"):
            start = time.process_time()
            runner.simulate(part, settings, arrays=arrays, engine=engine)
            cpu[engine] = time.process_time() - start
        cheaper = "compiled" if cpu["python"] > cpu["compiled"] + load else "python"
        print(
            f"  {size:>9,} requests: python {cpu['python']:7.3f} s, compiled "
            f"{cpu['compiled']:7.3f} s (+{load:.2f} s to load): {cheaper} is cheaper"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", type=int, default=3_000)
    parser.add_argument("--slice-blocks", type=int, default=1_500)
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument(
        "--crossover", type=int, nargs="+", default=[2_000, 10_000, 20_000, 50_000, 200_000]
    )
    args = parser.parse_args()
    crossover(args.crossover)
    compare_on_slice(args.slice, args.slice_blocks)
    full_day(args.requests)


if __name__ == "__main__":
    main()
