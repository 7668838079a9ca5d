"""A deterministic day of synthetic traffic for the replay benchmark.

Arrivals follow a daily cycle (a Poisson process whose rate swings between 40 % and 160 % of the
mean), prompt and output lengths are log-normal and capped, each request has its own prefill time
(prompt at about 10,000 tokens/s) and decode speed (40 to 90 tokens/s). Everything comes from one
seeded generator, so a size and a seed always give the same workload.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from oomtrace.replay.workload import Workload, workload_from_frame

DAY_S = 86_400


def day_of_traffic(requests: int = 2_000_000, *, seed: int = 7, span_s: float = DAY_S) -> Workload:
    rng = np.random.default_rng(seed)
    # thinning a Poisson process: rate(t) = mean * (1 + 0.6 sin(2 pi t / day))
    candidates = rng.uniform(0.0, span_s, size=int(requests * 1.7))
    keep = rng.uniform(0.0, 1.6, size=candidates.size) < 1 + 0.6 * np.sin(
        2 * np.pi * candidates / DAY_S
    )
    arrivals = np.sort(candidates[keep])[:requests]
    n = arrivals.size
    prompt = np.clip(rng.lognormal(np.log(600), 1.0, n), 8, 16_000).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(220), 0.9, n), 1, 4_000).astype(np.int64)
    frame = pl.DataFrame(
        {
            "arrival_ns": (arrivals * 1e9).astype(np.int64),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "max_tokens": np.maximum(output, 1024),
            "prefill_ns": (prompt / 10_000 * 1e9).astype(np.int64) + 5_000_000,
            "decode_ns_per_token": (1e9 / rng.uniform(40, 90, n)).astype(np.int64),
        }
    )
    return workload_from_frame(frame)
