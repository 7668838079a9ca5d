"""Data gaps: what the analysis could not see, so a reader knows what its findings rest on.

From the manifest (each source's skipped lines and notes, clock assumptions), from the tables
(a table or a kind of series that is absent, a single source), from the series (holes), and from
the request lifecycle (starts, ends or lengths that were not stated).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Final

import polars as pl

from oomtrace.analysis.findings import Gap
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.observed_series import KV_METRICS
from oomtrace.analysis.timeline import Timeline
from oomtrace.analysis.trace_scan import TableFacts
from oomtrace.diagnostics import clock_warning, source_clock_sentence
from oomtrace.schema import ROW_NAMES
from oomtrace.trace import Manifest, trace_clock_sentence

MAX_HOLES: Final = 20

# A parser's note as an analysis gap: data it left out, or how it read the source.
_NOTE_KIND: Final = {"gap": "left_out", "assumption": "note"}


def _name(source: str) -> str:
    """A source's file name only: findings never carry paths."""
    return PurePath(source.replace("\\", "/")).name or source


def manifest_gaps(manifest: Manifest) -> list[Gap]:
    out: list[Gap] = []
    for source in manifest.sources:
        name = _name(source.name)
        for reason, skip in sorted(source.skipped.items()):
            out.append(
                Gap("skipped_lines", name, f"{skip.count:,} line(s) skipped: {reason}", skip.count)
            )
        out += [Gap(_NOTE_KIND[source.category(n)], name, n) for n in source.notes]
        if source.lines_read and not source.lines_recognised:
            out.append(Gap("unrecognised_source", name, "no line of this source was recognised"))
        if warning := clock_warning(source):
            # Set apart from the timeline: a gap, first in the summary (it replaces the clock
            # sentence, which would say the same).
            out.append(Gap(str(source.clock["status"]), name, warning))
        elif sentence := source_clock_sentence(source):
            out.append(Gap("clock", name, sentence))
    for table in manifest.missing_tables:
        out.append(
            Gap(
                "missing_table",
                None,
                f"{table}.parquet is missing from the trace directory: no "
                f"{ROW_NAMES.get(table, table)} were read (re-run `oomtrace ingest`)",
            )
        )
    if sentence := trace_clock_sentence(manifest):
        nodes = ", ".join(sorted(manifest.nodes)) or None
        out.append(Gap("clock", nodes, sentence))
    return out


def table_gaps(facts: TableFacts, kv: KVModel) -> list[Gap]:
    out: list[Gap] = []
    if facts.samples == 0:
        out.append(
            Gap(
                "no_samples",
                None,
                "no memory or engine samples: spikes come from events and the request model only",
            )
        )
    else:
        metrics = facts.metrics
        if not metrics & {"device_used_bytes", "device_used_peak_bytes"}:
            out.append(Gap("no_device_memory", None, "no device memory series (NVML, nvidia-smi)"))
        if not any(m.startswith("torch_") for m in metrics):
            out.append(
                Gap("no_allocator", None, "no PyTorch allocator series (reserved, allocated)")
            )
        if not metrics & set(KV_METRICS):
            out.append(
                Gap("no_kv_observation", None, "no observed KV usage (engine metrics or log)")
            )
    if facts.request_events == 0:
        out.append(Gap("no_requests", None, "no request lifecycle: culprits cannot be named"))
    if kv.basis == "none":
        out.append(Gap("no_kv_bytes_model", None, kv.notes[-1] if kv.notes else kv.statement))
    if len(facts.sources) == 1:
        only = next(iter(facts.sources))
        out.append(Gap("single_source", only, f"only one source ({only}): nothing to cross-check"))
    return out


def hole_gaps(holes: pl.DataFrame) -> list[Gap]:
    if holes.is_empty():
        return []
    named = holes.sort("seconds", "start", "series", descending=[True, False, False])
    out = [
        Gap(
            "hole",
            row["source"],
            f"{row['series']} silent for {row['seconds']:.1f} s (usually every "
            f"{row['usual_s']:.3g} s)",
            None,
            row["start"],
            row["end"],
        )
        for row in named.head(MAX_HOLES).iter_rows(named=True)
    ]
    if named.height > MAX_HOLES:
        out.append(
            Gap("hole", None, f"{named.height - MAX_HOLES} more holes not listed", named.height)
        )
    return out


def request_gaps(timeline: Timeline) -> list[Gap]:
    segments, summary, rate = timeline.segments, timeline.requests, timeline.rate
    if summary.is_empty():
        return []
    out: list[Gap] = []
    inferred = segments.filter(~pl.col("start_basis").is_in(["admitted", "resumed"]))
    counts = inferred.group_by("start_basis").len().sort("start_basis")
    for basis, n in counts.iter_rows():
        how = {
            "first_token": "they count as resident from their first token (a lower bound)",
            "arrived": "they count as resident from their arrival (an upper bound)",
            "running_count": "admitted when the engine's running count reached them, first come "
            "first served (within one stats interval; counted from its start, an upper bound)",
            "rate": "their start is modelled from their length and the decode rate",
        }.get(basis, basis)
        out.append(
            Gap("no_admission", None, f"{n:,} residencies without a stated admission: {how}", n)
        )
    open_ = segments.filter(pl.col("end_basis").is_in(["trace_end", "contract", "reset"]))
    for basis, n in open_.group_by("end_basis").len().sort("end_basis").iter_rows():
        how = {
            "trace_end": "they count as resident until the trace ends (running, preempted or "
            "waiting: not finished)",
            "contract": "they end when their max_tokens would be spent at the decode rate",
            "reset": "they end at the next engine restart or death",
        }[basis]
        out.append(Gap("no_end", None, f"{n:,} residencies without a stated end: {how}", n))
    for column, meaning in (
        ("prompt_tokens", "their stored tokens start from zero"),
        ("max_tokens", "their upper bound is unknown"),
    ):
        n = summary[column].null_count()
        if n:
            out.append(Gap(f"no_{column}", None, f"{n:,} requests without {column}: {meaning}", n))
    if rate.tokens_per_s is None and open_.height:
        out.append(Gap("no_decode_rate", None, rate.statement))
    return out
