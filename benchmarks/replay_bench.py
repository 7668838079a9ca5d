"""Replay speed: the event simulator (in C) against the per-token reference, side by side.

1. A slice of the synthetic day (the first ``--slice`` requests, a pool tight enough to run dry)
   is replayed by both simulators; the run fails unless every request's outcome, every series
   point and every total agree. Both wall times and their ratio are printed.
2. The whole day (``--requests``, two million by default) is replayed by the fast simulator
   alone under three settings: an ample pool, a tight pool (preemption storms at the daily
   peak), and ``reserve``.

0. The crossover: the kernel as plain Python against the C kernel by workload size, beside what
   loading the C kernel costs a fresh process (``oomtrace.replay.compiled.CROSSOVER_REQUESTS``).

Run: ``python benchmarks/replay_bench.py`` (about a minute on two cores). Figures are wall-clock
seconds on this machine, not a promise.
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
    runner.simulate(part, settings, probes, arrays=arrays)  # imports and page faults first
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


# Loading the C kernel alone (its shared library, found as the package would find it, without
# importing the package) in a fresh process: the CPU seconds it costs.
LOAD_KERNEL = """
import importlib.util, sys, time
spec = importlib.util.find_spec("oomtrace.replay._kernel")
c = time.process_time()
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(time.process_time() - c)
"""


def fresh_process_cpu(code: str) -> float:
    """CPU seconds ``code`` reports in a fresh process."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout)


def crossover(sizes: list[int], repeats: int = 5) -> None:
    """Where the C kernel starts to pay: plain Python against C by workload size (CPU seconds,
    best of ``repeats`` alternating runs), beside what loading the C kernel costs a fresh process
    (median of ``repeats``). :data:`oomtrace.replay.compiled.CROSSOVER_REQUESTS` is the smallest
    size from which C, its load included, is cheaper."""
    load = sorted(fresh_process_cpu(LOAD_KERNEL) for _ in range(repeats))[repeats // 2]
    print(
        f"crossover: in a fresh process, loading the C kernel costs {1e3 * load:.3f} CPU ms "
        f"(median of {repeats})"
    )
    day = day_of_traffic(max(sizes))
    settings = ReplaySettings(30_000, max_num_seqs=256)
    smallest_c_wins = None
    for size in sizes:
        part = workload_from_frame(day.requests.head(size).drop("arrival"))
        arrays = runner.request_arrays(part, settings)
        best = {"python": float("inf"), "compiled": float("inf")}
        outputs = {}
        for _ in range(repeats if size <= 20_000 else 1):
            for engine in ("python", "compiled"):
                start = time.process_time()
                raw = runner.simulate(part, settings, arrays=arrays, engine=engine)
                best[engine] = min(best[engine], time.process_time() - start)
                outputs[engine] = raw
        same = all(
            np.array_equal(getattr(outputs["python"], k), getattr(outputs["compiled"], k))
            for k in ("state", "series", "totals", "log")
        )
        if not same:
            raise SystemExit(f"{size:,} requests: the Python and C kernels disagree")
        cheaper = "C" if best["python"] > best["compiled"] + load else "python"
        if cheaper == "C" and smallest_c_wins is None:
            smallest_c_wins = size
        print(
            f"  {size:>9,} requests: python {1e3 * best['python']:9.3f} ms, C "
            f"{1e3 * best['compiled']:8.3f} ms ({best['python'] / best['compiled']:,.0f}x; "
            f"+{1e3 * load:.3f} ms to load it); "
            f"identical arrays; {cheaper} is cheaper"
        )
    print(
        f"  C is cheaper from {smallest_c_wins:,} requests on (set: "
        f"{compiled.CROSSOVER_REQUESTS:,})"
        if smallest_c_wins is not None
        else "  python was cheaper at every size"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", type=int, default=3_000)
    parser.add_argument("--slice-blocks", type=int, default=1_500)
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument(
        "--crossover", type=int, nargs="+", default=[1, 10, 100, 1_000, 10_000, 100_000]
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
