"""Generate a day of serving data as a trace directory, for ``analyze_bench.py``.

Deterministic (seeded). Defaults: 24 hours, memory sampled at 100 Hz (device used, allocator
allocated and reserved: three series), engine metrics at 1 Hz, two million requests with their
lifecycle (arrived, admitted, first token, finished; one in twenty preempted and resumed, with
the count it had reached), and one OOM at the end.

    python benchmarks/analyze_data.py --out /tmp/day --requests 2000000 --hours 24 --hz 100
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from oomtrace.schema import TS
from oomtrace.trace import Manifest, Trace, write_trace
from oomtrace.units import GiB, MiB

T0 = datetime(2025, 3, 14, 0, 0, 0, tzinfo=UTC)
NODE = "node-a"
BLOCK = 16
BYTES_PER_BLOCK = 2 * MiB
POOL_BLOCKS = 30_000
RATE = 30.0  # tokens per second per request


def _ts(seconds: np.ndarray) -> pl.Series:
    ns = (seconds * 1e9).astype(np.int64) + int(T0.timestamp() * 1e9)
    return pl.Series("ts", ns).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").cast(TS)


def requests_frame(n: int, seconds: float, rng: np.random.Generator) -> pl.DataFrame:
    arrive = np.sort(rng.uniform(0, seconds * 0.98, n))
    admit = arrive + rng.exponential(0.2, n)
    prompt = np.clip(rng.lognormal(6.5, 0.8, n), 8, 16000).astype(np.int64)
    output = np.clip(rng.lognormal(5.3, 0.9, n), 2, 4000).astype(np.int64)
    max_tokens = np.maximum(output, 512 + (rng.integers(0, 4, n) * 512))
    prefill = 0.05 + prompt / 20000.0
    first = admit + prefill
    finish = first + (output - 1) / RATE
    preempt = rng.random(n) < 0.05
    pause = rng.exponential(2.0, n)
    cut = np.maximum((output * rng.uniform(0.2, 0.8, n)).astype(np.int64), 1)
    t_pre = first + (cut - 1) / RATE
    finish = np.where(preempt, finish + pause, finish)
    base = pl.DataFrame({"i": np.arange(n)}).with_columns(
        request_id=pl.lit("cmpl-") + pl.col("i").cast(pl.String)
    )

    def rows(
        event: str, at: np.ndarray, mask: np.ndarray | None = None, **cols: np.ndarray
    ) -> pl.DataFrame:
        frame = base.with_columns(
            ts=_ts(at), event=pl.lit(event), **{k: pl.Series(k, v) for k, v in cols.items()}
        )
        return frame if mask is None else frame.filter(pl.Series(mask))

    parts = [
        rows("arrived", arrive, prompt_tokens=prompt, max_tokens=max_tokens),
        rows("admitted", admit),
        rows("first_token", first, output_tokens=np.ones(n, dtype=np.int64)),
        rows("preempted", t_pre, preempt, output_tokens=cut),
        rows("resumed", t_pre + pause, preempt),
        rows("finished", finish, output_tokens=output),
    ]
    frame = pl.concat(parts, how="diagonal").with_columns(
        node=pl.lit(NODE), source=pl.lit("engine-log")
    )
    return frame.sort("ts").drop("i")


def samples_frame(seconds: float, hz: float, rng: np.random.Generator) -> pl.DataFrame:
    fast = np.arange(0, seconds, 1.0 / hz)
    n = fast.size
    wave = (np.sin(fast / 600.0) + 1) * 2 * GiB
    allocated = (40 * GiB + wave + rng.normal(0, 64 * MiB, n)).round()
    reserved = allocated + 512 * MiB
    device = reserved + 768 * MiB
    ts = _ts(fast)
    fast_frames = [
        pl.DataFrame({"ts": ts, "metric": m, "value": v, "source": s, "pid": p})
        for m, v, s, p in (
            ("device_used_bytes", device, "nvml", None),
            ("torch_allocated_bytes", allocated, "torch", 4242),
            ("torch_reserved_bytes", reserved, "torch", 4242),
        )
    ]
    slow = np.arange(0, seconds, 1.0)
    usage = np.clip(0.5 + 0.3 * np.sin(slow / 900.0) + rng.normal(0, 0.02, slow.size), 0, 1)
    slow_ts = _ts(slow)
    slow_frames = [
        pl.DataFrame({"ts": slow_ts, "metric": m, "value": v, "source": "metrics", "pid": None})
        for m, v in (
            ("kv_blocks_used", (usage * POOL_BLOCKS).round()),
            ("kv_blocks_total", np.full(slow.size, float(POOL_BLOCKS))),
            ("requests_running", rng.poisson(200, slow.size).astype(float)),
            ("requests_waiting", rng.poisson(3, slow.size).astype(float)),
        )
    ]
    frame = pl.concat(
        [f.with_columns(pl.col("pid").cast(pl.Int64)) for f in fast_frames + slow_frames]
    )
    return frame.with_columns(
        node=pl.lit(NODE),
        device=pl.when(
            pl.col("metric").str.starts_with("kv_") | pl.col("metric").str.starts_with("requests_")
        )
        .then(None)
        .otherwise(0)
        .cast(pl.Int32),
    )


def generate(out: Path, *, requests: int, hours: float, hz: float, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    seconds = hours * 3600.0
    started = time.perf_counter()
    reqs = requests_frame(requests, seconds, rng)
    samples = samples_frame(seconds, hz, rng)
    oom_ts = _ts(np.array([seconds - 1.0]))
    events = pl.DataFrame(
        {
            "ts": oom_ts,
            "node": [NODE],
            "source": ["engine-log"],
            "device": pl.Series([0], dtype=pl.Int32),
            "kind": ["oom"],
            "requested_bytes": [2 * GiB],
            "total_bytes": [80 * GiB],
            "free_bytes": [GiB],
        }
    )
    manifest = Manifest(
        nodes=[NODE],
        engine={"name": "vllm"},
        engine_config={
            "block_size": BLOCK,
            "num_gpu_blocks": POOL_BLOCKS,
            "available_kv_cache_bytes": POOL_BLOCKS * BYTES_PER_BLOCK,
            "model_weights_bytes": 16 * GiB,
            "max_model_len": 32768,
        },
    )
    write_trace(Trace(samples, reqs, events, manifest), out, overwrite=True)
    print(
        f"wrote {out}: {samples.height:,} samples, {reqs.height:,} request events "
        f"({requests:,} requests) in {time.perf_counter() - started:.1f} s"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--hz", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    generate(args.out, requests=args.requests, hours=args.hours, hz=args.hz, seed=args.seed)


if __name__ == "__main__":
    main()
