"""Calibration: replay with the settings the engine actually ran with, compare with what it
reported, and say how far the what-if can be trusted.

Observed KV usage comes from ``kv_blocks_used`` samples (divided by ``num_gpu_blocks``) or
``kv_usage_ratio`` samples; the simulated level is read at the same instants (when the replay's
own settings are the recorded ones, in the replay's own run: see :func:`calibration_probes`).
Observed preemptions come from ``preempted`` request events, else the increase of
``preemptions_total``, else the sum of ``preemptions_in_interval``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import polars as pl

from oomtrace.errors import InputError
from oomtrace.replay import runner
from oomtrace.replay.settings import ReplaySettings
from oomtrace.replay.workload import Workload
from oomtrace.trace import Manifest, Trace

# The sample metrics a replay reads: the pool's size (kv_model), usage and preemptions.
SAMPLE_METRICS: Final = (
    "kv_blocks_total",
    "kv_tokens_total",
    "kv_blocks_used",
    "kv_usage_ratio",
    "preemptions_total",
    "preemptions_in_interval",
)
CLOSE_MAE: Final = 0.05
ROUGH_MAE: Final = 0.15


@dataclass(frozen=True)
class Calibration:
    """The replay under the recorded settings against the observed run."""

    settings: ReplaySettings
    observed_from: str | None
    samples: int
    kv_usage_mae: float | None
    kv_usage_max_error: float | None
    kv_usage_bias: float | None
    preemptions_observed: int | None
    preemptions_observed_from: str | None
    preemptions_simulated: int
    verdict: str
    caveats: tuple[str, ...]
    comparison: pl.DataFrame

    def to_json(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 6)

        return {
            "settings": self.settings.to_json(),
            "observed_from": self.observed_from,
            "samples": self.samples,
            "kv_usage_mae": r(self.kv_usage_mae),
            "kv_usage_max_error": r(self.kv_usage_max_error),
            "kv_usage_bias": r(self.kv_usage_bias),
            "preemptions_observed": self.preemptions_observed,
            "preemptions_observed_from": self.preemptions_observed_from,
            "preemptions_simulated": self.preemptions_simulated,
            "preemptions_difference": None
            if self.preemptions_observed is None
            else self.preemptions_simulated - self.preemptions_observed,
            "verdict": self.verdict,
            "caveats": list(self.caveats),
        }


def recorded_pool(config: dict[str, Any]) -> tuple[int | None, int, str]:
    """The recorded KV pool: (blocks or None, block size, where the block count came from).

    ``num_gpu_blocks`` where the engine stated it; otherwise vLLM's "GPU KV cache size: N tokens"
    (``kv_cache_tokens``) divided by the block size, which is exact for a model with one KV cache
    group (hybrid models print the tokens of one group)."""
    size = config.get("block_size")
    block_size = size if isinstance(size, int) and size > 0 else 16
    blocks = config.get("num_gpu_blocks")
    if isinstance(blocks, int) and blocks > 0:
        return blocks, block_size, "num_gpu_blocks"
    tokens = config.get("kv_cache_tokens")
    if isinstance(tokens, int) and tokens >= block_size:
        return tokens // block_size, block_size, "kv_cache_tokens / block_size"
    return None, block_size, ""


def recorded_settings(
    manifest: Manifest, *, kv_bytes_per_token: int | None = None
) -> ReplaySettings:
    """The settings the engine ran with, from ``manifest.engine_config``."""
    config = manifest.engine_config
    blocks, block_size, _ = recorded_pool(config)
    if blocks is None:
        raise InputError(
            "the trace's manifest states neither num_gpu_blocks nor the KV cache size in tokens, "
            "so the recorded run cannot be replayed for calibration; pass --no-calibrate"
        )
    seqs = config.get("max_num_seqs")
    tokens = config.get("max_num_batched_tokens")
    return ReplaySettings(
        kv_blocks=blocks,
        block_size=block_size,
        policy="on-demand",
        max_num_seqs=seqs if isinstance(seqs, int) and seqs > 0 else None,
        max_num_batched_tokens=tokens if isinstance(tokens, int) and tokens > 0 else None,
        kv_bytes_per_token=kv_bytes_per_token,
    )


def _observed_usage(samples: pl.DataFrame, blocks: int) -> tuple[pl.DataFrame, str | None]:
    used = samples.filter(pl.col("metric") == "kv_blocks_used")
    if used.height:
        frame = used.select("ts", observed=pl.col("value") / blocks)
        return frame, "kv_blocks_used / num_gpu_blocks"
    ratio = samples.filter(pl.col("metric") == "kv_usage_ratio")
    if ratio.height:
        return ratio.select("ts", observed=pl.col("value")), "kv_usage_ratio"
    return pl.DataFrame(schema={"ts": pl.Datetime("ns", "UTC"), "observed": pl.Float64}), None


def _observed_preemptions(
    requests: pl.DataFrame, samples: pl.DataFrame
) -> tuple[int | None, str | None]:
    events = int((requests["event"] == "preempted").sum())
    if events:
        return events, "preempted request events"
    counter = samples.filter(pl.col("metric") == "preemptions_total").sort("ts")
    if counter.height >= 2:
        # a counter that goes down was reset (engine restart): it counts again from zero
        step = pl.col("value").diff()
        rise = counter.select(
            pl.when(step >= 0).then(step).otherwise(pl.col("value")).slice(1).sum()
        ).item()
        return int(rise), "increase of preemptions_total"
    interval = samples.filter(pl.col("metric") == "preemptions_in_interval")["value"]
    if interval.len():
        return int(interval.sum()), "sum of preemptions_in_interval"
    return None, None


def calibration_probes(
    trace: Trace, workload: Workload, settings: ReplaySettings, *, node: str | None = None
) -> tuple[pl.DataFrame, str | None, Any]:
    """The observed KV usage while ``workload`` ran (``ts, observed``), where it came from, and
    its instants as probes of the simulator (ns from ``workload.t0``)."""
    requests, samples = _of_node(trace, node)
    observed, observed_from = _observed_usage(samples, settings.kv_blocks)
    start = workload.t0
    end = requests["ts"].max()
    observed = observed.filter(pl.col("ts").is_between(start, end)).sort("ts")
    probes = (
        observed.select((pl.col("ts") - pl.lit(start)).dt.total_nanoseconds())
        .to_series()
        .to_numpy()
        .astype(np.int64)
    )
    return observed, observed_from, probes


def _of_node(trace: Trace, node: str | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    requests, samples = trace.requests, trace.samples
    if node is not None:
        requests = requests.filter(pl.col("node") == node)
        samples = samples.filter(pl.col("node") == node)
    return requests, samples


def calibrate(
    trace: Trace,
    workload: Workload,
    settings: ReplaySettings,
    *,
    node: str | None = None,
    raw: runner.RawRun | None = None,
) -> Calibration:
    """Replay ``workload`` under ``settings`` (normally :func:`recorded_settings`) and compare.
    ``raw``: that run already made, read at :func:`calibration_probes` (it is not run again)."""
    requests, samples = _of_node(trace, node)
    observed, observed_from, probes = calibration_probes(trace, workload, settings, node=node)
    if raw is None:
        raw = runner.simulate(workload, settings, probes, peaks=False)
    comparison = observed.with_columns(
        simulated=pl.Series(raw.series[:, 0] / settings.kv_blocks, dtype=pl.Float64)
    ).with_columns(error=pl.col("simulated") - pl.col("observed"))
    stats = comparison.select(
        mae=pl.col("error").abs().mean(),
        worst=pl.col("error").abs().max(),
        bias=pl.col("error").mean(),
    ).row(0, named=True)
    seen, seen_from = _observed_preemptions(requests, samples)
    simulated = int(raw.totals[2])
    caveats = _caveats(requests, workload)
    if stats["bias"] is not None and stats["bias"] < -ROUGH_MAE:
        missing = (
            "the engine held far more than the replayed requests explain: requests are missing "
            "from the trace (a log that starts mid-run, or request lines not logged)"
        )
        caveats = (*caveats, missing)
    verdict = _verdict(stats["mae"], stats["worst"], seen, simulated, comparison.height)
    return Calibration(
        settings=settings,
        observed_from=observed_from,
        samples=comparison.height,
        kv_usage_mae=stats["mae"],
        kv_usage_max_error=stats["worst"],
        kv_usage_bias=stats["bias"],
        preemptions_observed=seen,
        preemptions_observed_from=seen_from,
        preemptions_simulated=simulated,
        verdict=verdict,
        caveats=caveats,
        comparison=comparison,
    )


def _verdict(
    mae: float | None, worst: float | None, seen: int | None, simulated: int, samples: int
) -> str:
    if mae is None or worst is None or samples == 0:
        usage = "no KV usage was observed while these requests ran, so the pool level is unchecked"
        grade = "unchecked"
    else:
        usage = (
            f"simulated KV usage is off by {100 * mae:.1f} points on average "
            f"({100 * worst:.1f} at worst) over {samples} sample(s)"
        )
        grade = "close" if mae <= CLOSE_MAE else "rough" if mae <= ROUGH_MAE else "poor"
    if seen is not None:
        usage += f"; preemptions simulated {simulated}, observed {seen}"
        off = abs(simulated - seen) > max(2, 0.2 * seen)
        if off and grade == "close":
            grade = "rough"
    trust = {
        "close": "the what-if can be trusted for overflow, peaks and preemption counts to "
        "within about that error",
        "rough": "the what-if can be trusted for whether the pool runs dry and for trends, not "
        "for exact peaks or preemption counts",
        "poor": "do not rely on the what-if's numbers: the replay does not reproduce this run",
        "unchecked": "treat the what-if as unverified",
    }[grade]
    return f"{grade}: {usage}; {trust}"


def _caveats(requests: pl.DataFrame, workload: Workload) -> tuple[str, ...]:
    """What the replay of ``workload`` leaves out, from the requests of its node."""
    notes = list(workload.notes)
    bounded = workload.requests.filter(pl.col("output_source") == "max_tokens_bound").height
    if bounded:
        notes.append(
            f"{bounded} request(s) have no recorded output length and are replayed at max_tokens "
            "(an upper bound: the replay overstates their blocks)"
        )
    cached = int((requests["cached_tokens"] > 0).sum())
    if cached:
        notes.append(
            f"{cached} request event(s) report prefix-cache hits; the replay does not share "
            "blocks between requests, so it overstates usage where prefixes were shared"
        )
    return tuple(notes)
