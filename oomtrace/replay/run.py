"""One call from a trace and typed options to a replay: what ``oomtrace replay`` runs, usable from
code too.

    run = run_replay(trace, ReplayOptions(max_num_seqs=32, search="kv-blocks"))
    run.result.summary.overflow, run.to_json(), run.write_tables(Path("out"))

Whatever the options leave open comes from what the trace recorded (``manifest.engine_config``):
the pool (``num_gpu_blocks``, else the KV cache tokens over the block size), the block size, and
the ``max_num_seqs`` / ``max_num_batched_tokens`` limits. KV bytes per token come from the
options, else the model's architecture (``config``, read as ``oomtrace analyze`` reads it), else
the trace's model spec, else the engine's start-up statements. Calibration runs when asked, or,
when not said, when the trace holds observed KV usage and its recorded pool.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomtrace.analysis.kvmodel import architecture_spec, kv_model
from oomtrace.errors import UsageError
from oomtrace.replay.calibrate import (
    Calibration,
    calibrate,
    calibration_probes,
    recorded_pool,
    recorded_settings,
)
from oomtrace.replay.results import ReplayResult
from oomtrace.replay.runner import SERIES_POINTS, empty_series, replay, result_from_raw, simulate
from oomtrace.replay.search import SearchResult, SearchTarget, search
from oomtrace.replay.settings import Policy, ReplaySettings, blocks_from_budget
from oomtrace.replay.workload import TimeOptions, build_workload
from oomtrace.trace import Trace

__all__ = ["ReplayOptions", "ReplayRun", "run_replay"]

# The block size vLLM uses when the trace does not state one.
DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True)
class ReplayOptions:
    """What a replay may be told; None means "what the trace recorded" (see the module).

    The pool is ``kv_blocks``, or ``device_bytes`` minus ``weights_bytes`` and ``reserve_bytes``
    at ``kv_bytes_per_token``, or the recorded one. A limit of 0 (``max_num_seqs``,
    ``max_num_batched_tokens``) means none; ``max_waiting`` None means an unbounded queue.
    ``config`` (a config.json or model directory) with ``kv_cache_dtype`` and
    ``tensor_parallel`` gives the KV bytes per token; ``search`` also looks for the best value of
    one setting; ``calibrate`` None calibrates when the trace allows it. ``series`` reads the
    pool over time (:meth:`ReplayRun.write_tables`); without it, a replay under the recorded
    settings is one run of the simulator, shared with the calibration.
    """

    policy: Policy = "on-demand"
    kv_blocks: int | None = None
    device_bytes: int | None = None
    weights_bytes: int | None = None
    reserve_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    config: Path | None = None
    kv_cache_dtype: str = "auto"
    tensor_parallel: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_waiting: int | None = None
    decode_tokens_per_s: float | None = None
    prefill_tokens_per_s: float = 10_000.0
    search: SearchTarget | None = None
    calibrate: bool | None = None
    node: str | None = None
    series: bool = True


@dataclass(frozen=True)
class ReplayRun:
    """A replay, the search when one was asked for, and the calibration when one ran."""

    result: ReplayResult
    found: SearchResult | None = None
    calibration: Calibration | None = None

    @property
    def written(self) -> ReplayResult:
        """The replay whose tables are written: the search's best when it found one."""
        if self.found is not None and self.found.best is not None:
            return self.found.best
        return self.result

    def to_json(self) -> dict[str, Any]:
        """The document behind ``oomtrace replay --json``."""
        document = self.result.to_json()
        if self.found is not None:
            searched = self.found.to_json()
            document["best"] = searched.pop("best")
            document["search"] = searched
        document["calibration"] = None if self.calibration is None else self.calibration.to_json()
        return document

    def write_tables(self, out: Path) -> None:
        """``outcomes.parquet`` (per request) and ``series.parquet`` (the pool over time) of
        :attr:`written`, in the directory ``out`` (made if missing)."""
        out.mkdir(parents=True, exist_ok=True)
        self.written.outcomes.write_parquet(out / "outcomes.parquet")
        self.written.series.write_parquet(out / "series.parquet")


def run_replay(trace: Trace, options: ReplayOptions) -> ReplayRun:
    """Replay ``trace``'s traffic (on ``options.node``) under ``options``; raises
    :class:`~oomtrace.errors.UsageError` for options that cannot size a pool."""
    trace = trace.in_time()  # rows on one clock only: inputs set apart are not replayed
    config = trace.manifest.engine_config
    bytes_per_token, note = _bytes_per_token(options, trace)
    block_size = options.block_size or _positive(config.get("block_size")) or DEFAULT_BLOCK_SIZE
    settings = ReplaySettings(
        kv_blocks=_pool(options, config, block_size, bytes_per_token),
        block_size=block_size,
        policy=options.policy,
        max_num_seqs=_limit(options.max_num_seqs, config.get("max_num_seqs")),
        max_num_batched_tokens=_limit(
            options.max_num_batched_tokens, config.get("max_num_batched_tokens")
        ),
        max_waiting=options.max_waiting,
        kv_bytes_per_token=bytes_per_token,
    )
    times = TimeOptions(options.decode_tokens_per_s, options.prefill_tokens_per_s)
    workload = build_workload(trace, options=times, node=options.node)
    recorded = None
    if _calibrates(options.calibrate, trace, config):
        recorded = recorded_settings(trace.manifest, kv_bytes_per_token=bytes_per_token)
    calibration = None
    points = SERIES_POINTS if options.series else 0
    if recorded == settings and not options.series:
        # the replay is the recorded run: one simulation, read at the observed instants
        probes = calibration_probes(trace, workload, settings, node=options.node)[2]
        raw = simulate(workload, settings, probes, peaks=False)
        result = result_from_raw(workload, settings, raw, empty_series())
        calibration = calibrate(trace, workload, settings, node=options.node, raw=raw)
    else:
        result = replay(workload, settings, series_points=points)
    if note:
        result = dataclasses.replace(result, notes=(*result.notes, note))
    found = None
    if options.search:
        found = search(workload, settings, options.search, series_points=points)
    if recorded is not None and calibration is None:
        calibration = calibrate(trace, workload, recorded, node=options.node)
    return ReplayRun(result, found, calibration)


def _calibrates(wanted: bool | None, trace: Trace, config: dict[str, Any]) -> bool:
    """As asked; when not said, when the trace holds observed KV usage and its recorded pool."""
    if wanted is not None:
        return wanted
    observed = trace.samples.filter(
        trace.samples["metric"].is_in(["kv_usage_ratio", "kv_blocks_used"])
    ).height
    return bool(observed) and recorded_pool(config)[0] is not None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _pool(
    options: ReplayOptions, config: dict[str, Any], block_size: int, bytes_per_token: int | None
) -> int:
    """KV blocks from ``kv_blocks``, or device memory with the budget inputs, or the manifest."""
    if options.kv_blocks is not None and options.device_bytes is not None:
        raise UsageError("give --kv-blocks or --device-memory, not both")
    if options.kv_blocks is not None:
        return options.kv_blocks
    if options.device_bytes is not None:
        if bytes_per_token is None or options.weights_bytes is None:
            raise UsageError(
                "--device-memory needs --weights and --kv-bytes-per-token (and --reserve for the "
                "runtime's own memory) to size the KV pool"
            )
        return blocks_from_budget(
            device_bytes=options.device_bytes,
            weights_bytes=options.weights_bytes,
            reserve_bytes=options.reserve_bytes or 0,
            kv_bytes_per_token=bytes_per_token,
            block_size=block_size,
        )
    recorded, recorded_block, _ = recorded_pool(config)
    if recorded is None:
        raise UsageError(
            "the trace's manifest states neither num_gpu_blocks nor the KV cache size; pass "
            "--kv-blocks N, or --device-memory with --weights, --reserve and --kv-bytes-per-token"
        )
    # the recorded pool holds a number of tokens; another block size cuts it differently
    return max(1, recorded * recorded_block // block_size)


def _limit(value: int | None, recorded: object) -> int | None:
    """An explicit value wins (0 means no limit); otherwise the recorded one, if any."""
    if value is not None:
        return value or None
    return _positive(recorded)


def _bytes_per_token(options: ReplayOptions, trace: Trace) -> tuple[int | None, str]:
    """KV bytes per stored token, with a note on what it covers (see the module)."""
    if options.kv_bytes_per_token is not None:
        return options.kv_bytes_per_token, ""
    if options.config is not None:
        # as analyze reads it: the tensor-parallel size defaults to the one the trace states
        spec, _ = architecture_spec(
            options.config,
            trace.manifest,
            kv_cache_dtype=options.kv_cache_dtype,
            tensor_parallel=options.tensor_parallel,
        )
        note = ""
        if spec.unbounded_kv_bytes_per_token != spec.kv_bytes_per_token or spec.state_groups:
            note = (
                "the model has windowed or recurrent layers: bytes count every layer per stored "
                "token (an upper bound for long sequences; constant per-sequence state is left out)"
            )
        return spec.kv_bytes_per_token, note
    stated = _positive(trace.manifest.model.get("kv_bytes_per_token"))
    if stated is not None:
        return stated, ""
    engine = kv_model(trace.manifest, trace.samples)
    if engine.bytes_per_token is None:
        return None, ""
    return round(engine.bytes_per_token), f"KV bytes per token from the {engine.statement}"
