"""``oomtrace replay`` on a terminal: the replay, search and calibration results as plain text."""

from __future__ import annotations

from datetime import datetime

from oomtrace.isotime import iso_time
from oomtrace.replay.calibrate import Calibration
from oomtrace.replay.results import ReplayResult, ReplaySummary, TimeModel
from oomtrace.replay.run import ReplayRun
from oomtrace.replay.search import SearchResult
from oomtrace.replay.settings import ReplaySettings
from oomtrace.units import format_bytes


def _ts(value: datetime | None) -> str:
    return "-" if value is None else iso_time(value, 3, sep=" ")


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f} s"


def describe_settings(settings: ReplaySettings) -> str:
    pool = f"{settings.kv_blocks:,} blocks of {settings.block_size} tokens"
    if settings.block_bytes is not None:
        pool += f" ({format_bytes(settings.kv_blocks * settings.block_bytes)})"
    seqs = (
        "no max_num_seqs"
        if settings.max_num_seqs is None
        else f"max_num_seqs {settings.max_num_seqs:,}"
    )
    batched = (
        "no prefill token budget"
        if settings.max_num_batched_tokens is None
        else f"max_num_batched_tokens {settings.max_num_batched_tokens:,}"
    )
    queue = (
        "unbounded queue" if settings.max_waiting is None else f"queue of {settings.max_waiting:,}"
    )
    return f"{settings.policy}, {pool}, {seqs}, {batched}, {queue}"


def describe_outcome(summary: ReplaySummary, settings: ReplaySettings) -> list[str]:
    share = 100 * summary.peak_blocks / settings.kv_blocks
    peak = f"peak: {summary.peak_blocks:,} blocks ({share:.1f} % of the pool)"
    if summary.peak_bytes is not None:
        peak += f" = {format_bytes(summary.peak_bytes)}"
    if summary.overflow:
        dry = (
            f"overflow: the pool ran dry at {_ts(summary.overflow_ts)}; {summary.preemptions:,} "
            f"preemption(s) of {summary.preempted_requests:,} request(s)"
        )
    else:
        dry = "overflow: none, the pool never ran dry; 0 preemptions"
    return [
        dry,
        peak,
        (
            f"rejections: {summary.rejections:,} ({summary.rejected_too_large:,} larger than "
            f"the pool); finished {summary.finished:,} of {summary.requests:,}"
        ),
        (
            f"queueing delay: p50 {_s(summary.queue_delay_p50_s)}, "
            f"p99 {_s(summary.queue_delay_p99_s)}, max {_s(summary.queue_delay_max_s)}; "
            f"at most {summary.max_running:,} running at once"
        ),
    ]


def describe_time_model(model: TimeModel) -> list[str]:
    def counts(sources: dict[str, int]) -> str:
        return ", ".join(f"{n:,} {name.replace('_', ' ')}" for name, n in sources.items())

    lines = [
        f"output lengths: {counts(model.output_sources)}",
        f"prefill times: {counts(model.prefill_sources)}",
        f"decode speeds: {counts(model.decode_sources)}",
    ]
    if model.decode_fallback_tokens_per_s is not None:
        lines.append(
            f"fallbacks: decode {model.decode_fallback_tokens_per_s:,.1f} tokens/s, prefill "
            f"{model.prefill_fallback_tokens_per_s or 0:,.0f} tokens/s; service times do not "
            "change with load"
        )
    return lines


def render_replay(result: ReplayResult) -> str:
    lines = [
        f"oomtrace replay: {result.summary.requests:,} requests",
        f"settings: {describe_settings(result.settings)}",
        *describe_outcome(result.summary, result.settings),
        "time model:",
        *(f"  {line}" for line in describe_time_model(result.time_model)),
    ]
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def render_search(found: SearchResult) -> str:
    tried = ", ".join(
        f"{v:,} {'passes' if s.passes else 'fails'}"
        for v, s in sorted(found.tried, key=lambda x: x[0])
    )
    head = f"search {found.target} ({found.goal} setting with no overflow and no preemption)"
    if found.best is None or found.best_value is None:
        return f"{head}: none in {found.low:,}..{found.high:,} passes\n  tried: {tried}"
    lines = [f"{head}: {found.best_value:,}"]
    if found.unbinding:
        lines.append("  at this value the setting no longer binds: the traffic never needs more")
    lines += [f"  {line}" for line in describe_outcome(found.best.summary, found.best.settings)]
    lines.append(f"  tried: {tried}")
    return "\n".join(lines)


def render_calibration(cal: Calibration) -> str:
    lines = [
        f"calibration (replayed with the recorded settings: {describe_settings(cal.settings)}):",
        f"  {cal.verdict}",
    ]
    if cal.kv_usage_bias is not None:
        lines.append(
            f"  mean error {100 * cal.kv_usage_bias:+.1f} points (positive: the replay holds more "
            f"than was observed), from {cal.observed_from}"
        )
    lines += [f"  caveat: {c}" for c in cal.caveats]
    return "\n".join(lines)


def render_run(run: ReplayRun) -> str:
    """The replay, then the search and the calibration when there are any, a blank line apart."""
    parts = [render_replay(run.result)]
    if run.found is not None:
        parts.append(render_search(run.found))
    if run.calibration is not None:
        parts.append(render_calibration(run.calibration))
    return "\n\n".join(parts)
