"""Analysis of a trace in which no input prints a time: an OOM message pasted from an issue
thread, a launcher's last line, a traceback without its logger prefix.

With no clock anywhere there is nothing to align and nothing to misjoin, so the rows are read on
their own, in the order the log printed them, and no time is made up (a log without times is
placed only when another input anchors it: ``docs/formats/log-prefixes-and-times.md``). What
needs no timeline still comes out, from the failure's own figures:

* ``startup_misfit`` — the engine refused to start (vLLM's KV-insufficient ``ValueError``, TGI's
  warm-up "Not enough memory to handle N prefill tokens"), or the lines around its OOM place it in
  the start-up (the event's ``phase``: loading the weights, the profiling run, the graph capture);
* ``foreign_memory`` — other processes held memory the failed allocation lacked: PyTorch's
  "Process N has X memory in use" clauses, or the OOM's own accounting (in use less the failing
  process); or, where the message names no process, far more held outside the failing
  process's PyTorch allocator than its own context takes;
* ``fragmentation`` — PyTorch held, reserved but unallocated, at least the allocation that failed;
* ``kv_exhaustion`` — the KV pool ran out: SGLang's "Decode out of memory" (unless the pool, by
  its own count, had the tokens asked), retractions;
* ``transient_peak`` — one allocation asked for more than was free (an activation, a logits
  buffer): the figures say by how much;
* ``unknown`` — the failure states no size, with each check's reason;
* ``gpu_fault`` — no failure of the engine, but the driver's Xid report of a GPU fault (a kernel
  log pasted without times): told by its gravest report.

The checks themselves are :mod:`oomtrace.analysis.untimed_checks`.

Where inputs with times and inputs without are mixed, none of this applies: the rows without a
time stay set aside unless anchored (:func:`oomtrace.trace.set_aside`). Each incident's times are
None and its ``time_note`` says why and where it stands in the log's order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import polars as pl

from oomtrace.analysis.breakdown import REFUSED_FREE
from oomtrace.analysis.check_allocation import not_short
from oomtrace.analysis.check_gpu_fault import fault_check, severity
from oomtrace.analysis.check_startup import MISFIT_KINDS
from oomtrace.analysis.deaths import unexplained_deaths
from oomtrace.analysis.findings import (
    Anchor,
    ClassCheck,
    Component,
    Findings,
    Gap,
    Incident,
    IncidentClass,
    Ledger,
    ProcessUse,
    TraceSummary,
)
from oomtrace.analysis.gaps import manifest_gaps
from oomtrace.analysis.kvmodel import kv_model
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.prepare import serving_samples
from oomtrace.analysis.remedies import RemedyFacts, remedies_for
from oomtrace.analysis.trace_scan import TraceScan
from oomtrace.analysis.untimed_checks import untimed_checks, verdict
from oomtrace.errors import InputError
from oomtrace.schema import TableName
from oomtrace.trace import Trace

NO_TIME: Final = "no time (the input prints none)"
FAILURES: Final = ("oom", *MISFIT_KINDS, "startup_memory_insufficient")
# FlashInfer's fixed workspace overflowing fails a step as an OOM does (its own class)
WORKSPACE: Final = "workspace_overflow"
# PyTorch prints sizes to two decimals of their unit: a "Process N has X" clause and "this
# process has X" about one process agree within half a unit of the last digit.
_SAME_PROCESS: Final = 0.005
_EMPTY_WINDOW: Final = pl.DataFrame(schema={"request_id": pl.String})


def only_untimed(source: Trace | TraceScan) -> bool:
    """Whether every row of the trace is without a time (and there is at least one): then no
    input carries a clock and :func:`analyze_untimed` reads them in their order."""
    statuses = {s.clock.get("status") for s in source.manifest.sources if s.clock}
    if "untimed" not in statuses or "unaligned" in statuses:
        return False
    frames = [_table(source, "samples"), _table(source, "requests"), source.events.lazy()]
    counts = pl.concat(
        [f.select(timed=pl.col("ts").is_not_null().sum(), rows=pl.len()) for f in frames]
    ).collect()
    return int(counts["timed"].sum()) == 0 and int(counts["rows"].sum()) > 0


def _table(source: Trace | TraceScan, name: TableName) -> pl.LazyFrame:
    if isinstance(source, Trace):
        return source.table(name).lazy()
    return source.scan(name)


def analyze_untimed(source: Trace | TraceScan, options: AnalyzeOptions) -> Findings:
    """Findings from rows without times, one incident per node with a failure (see the module
    docstring). Raises :class:`InputError` for a ``--node`` the trace does not hold."""
    events = source.events
    samples = _table(source, "samples").collect()
    requested = _table(source, "requests").select("node").collect()["node"]
    requests = requested.len()
    nodes = sorted(set(events["node"].to_list()) | set(samples["node"].to_list()), key=str)
    if options.node is not None:
        if options.node not in nodes:
            raise InputError(
                f"--node {options.node!r}: no rows on that node; the trace has {', '.join(nodes)}"
            )
        nodes = [options.node]
        events = events.filter(pl.col("node") == options.node)
        samples = samples.filter(pl.col("node") == options.node)
    kv = kv_model(source.manifest, samples.clear())
    config = source.manifest.engine_config
    engine = source.manifest.engine.get("name")
    incidents: list[Incident] = []
    for node in nodes:
        on_node = events.with_row_index("order").filter(pl.col("node") == node)
        mine = samples.filter(pl.col("node") == node)
        # a request or a sample of a running one: the engine was serving, not starting
        served = bool((requested == node).any()) or not serving_samples(mine).is_empty()
        incident = _incident(node, on_node, mine, options, config, served=served)
        if incident is not None:
            incidents.append(incident)
    incidents = [_renamed(i, n) for n, i in enumerate(sorted(incidents, key=_weight), start=1)]
    remedies = tuple(
        r
        for i in incidents
        for r in remedies_for(i, RemedyFacts(config, kv, None, str(engine) if engine else None))
    )
    summary = TraceSummary(
        nodes=tuple(nodes),
        start=None,
        end=None,
        engine=str(engine) if engine else None,
        samples=samples.height,
        request_events=int(requests),
        requests=0,
        events=events.height,
        time_note=f"{NO_TIME}: no input of the trace prints a time; rows are read in log order",
        deaths=unexplained_deaths(events, incidents, options.window_s),
    )
    return Findings(
        trace=summary,
        kv_model=kv.to_json(),
        decode_rate={"statement": None},
        incidents=tuple(incidents),
        spikes=(),
        reconciliation=(),
        gaps=tuple(_gaps(source)),
        options=options.to_json(),
        series=pl.DataFrame(),
        remedies=remedies,
    )


def _gaps(source: Trace | TraceScan) -> list[Gap]:
    """The manifest's gaps, the set-apart warning reworded: nothing was left out, since no input
    had a time to join the rows to."""
    out = []
    for found in manifest_gaps(source.manifest):
        gap = found
        if found.kind == "untimed":
            gap = Gap(
                "untimed",
                found.source,
                f"{found.source}: prints no time, and no other input of the incident does: its "
                "rows are analysed on their own, in the log's order, without a timeline (add "
                "the incident's nvidia-smi or NVML samples, or a log with times, to place them)",
            )
        out.append(gap)
    return out


def _weight(incident: Incident) -> tuple[int, str]:
    """Primary first: a classified failure before an unknown one, then by node."""
    return (incident.cls == "unknown", incident.node)


def _renamed(incident: Incident, number: int) -> Incident:
    return replace(incident, id=f"I{number}", primary=number == 1)


def _incident(
    node: str,
    events: pl.DataFrame,
    samples: pl.DataFrame,
    options: AnalyzeOptions,
    config: dict[str, Any],
    *,
    served: bool,
) -> Incident | None:
    """The node's failure: a start-up refusal where the log states one, else its most
    informative OOM; failing both, its retractions (the KV pool ran out)."""
    failures = events.filter(pl.col("kind").is_in([*FAILURES, WORKSPACE]))
    retractions = events.filter(pl.col("kind") == "preemption")
    if failures.is_empty() and retractions.is_empty():
        return _fault(node, events)
    if failures.is_empty():
        anchor = retractions.row(0, named=True)
    else:
        refused = failures.filter(~pl.col("kind").is_in(["oom", WORKSPACE]))
        pool = refused if refused.height else failures
        stated = pool.with_columns(
            stated=pl.sum_horizontal(
                pl.col(c).is_not_null()
                for c in ("requested_bytes", "total_bytes", "free_bytes", "allocated_bytes")
            )
        )
        anchor = stated.sort("stated", descending=True, maintain_order=True).row(0, named=True)
    processes = _processes(anchor, samples)
    checks = untimed_checks(anchor, processes, retractions, options, config, served=served)
    cls, reason = verdict(checks, anchor)
    # SGLang's page size (its server_args' page_size) reads a KV-pool OOM's token counts
    page_size = config.get("block_size")
    if enough := not_short(anchor, page_size if isinstance(page_size, int) else None):
        cls, reason = "unknown", enough
    total, free = anchor.get("total_bytes"), anchor.get("free_bytes")
    in_use = total - free if total is not None and free is not None else None
    rows = events["order"].to_list()
    place = rows.index(anchor["order"]) + 1
    note = f"{NO_TIME}; its row is {place} of {len(rows)} in the log's order"
    return _untimed_incident(
        node,
        anchor,
        cls=cls,
        reason=reason,
        kind=_anchor_kind(anchor["kind"]),
        checks=checks,
        time_note=note,
        coverage_basis="the input prints no time, so no request is placed at the failure",
        peak_bytes=in_use,
        capacity_bytes=total,
        observed_bytes=in_use,
        breakdown=_breakdown(anchor, processes),
        processes=tuple(processes),
    )


def _fault(node: str, events: pl.DataFrame) -> Incident | None:
    """The driver's Xid reports where the node shows no failure of the engine: a GPU fault, told
    by its gravest report (:mod:`oomtrace.analysis.check_gpu_fault`)."""
    xids = events.filter(pl.col("kind") == "xid")
    if xids.is_empty():
        return None
    anchor = max(xids.iter_rows(named=True), key=severity)  # Xid reports are few
    check = fault_check(anchor)
    place = events["order"].to_list().index(anchor["order"]) + 1
    return _untimed_incident(
        node,
        anchor,
        cls="gpu_fault",
        reason=check.reason,
        kind="xid",
        checks=(check,),
        time_note=f"{NO_TIME}; its row is {place} of {events.height} in the log's order",
        coverage_basis="the input prints no time, so no request is placed at the fault",
    )


def _untimed_incident(
    node: str,
    anchor: dict[str, Any],
    *,
    cls: IncidentClass,
    reason: str,
    kind: Anchor,
    checks: tuple[ClassCheck, ...],
    time_note: str,
    coverage_basis: str,
    peak_bytes: int | None = None,
    capacity_bytes: int | None = None,
    observed_bytes: int | None = None,
    breakdown: tuple[Component, ...] = (),
    processes: tuple[ProcessUse, ...] = (),
) -> Incident:
    """An incident of an input without times: no window, timeline, spikes, culprits or ledger,
    only what its anchor row and the rows in its order state."""
    return Incident(
        id="I0",
        primary=False,
        cls=cls,
        reason=reason,
        anchor=kind,
        anchor_series=None,
        node=node,
        device=anchor.get("device"),
        start=None,
        peak_ts=None,
        window_start=None,
        peak_bytes=peak_bytes,
        capacity_bytes=capacity_bytes,
        coverage=None,
        coverage_basis=coverage_basis,
        observed_bytes=observed_bytes,
        explained_bytes=None,
        unexplained_bytes=None,
        modelled_bytes=None,
        model_note=None,
        breakdown=breakdown,
        culprits=(),
        processes=processes,
        checks=checks,
        ledger=Ledger(None, (), 0, 0, None, None, None, 0, None, None, None, None, None, None),
        spikes=(),
        window_segments=_EMPTY_WINDOW,
        time_note=time_note,
    )


def _anchor_kind(kind: str) -> Anchor:
    if kind == "preemption":
        return "preemption"
    return "startup" if kind in FAILURES[1:] else "oom"


def _processes(oom: dict[str, Any], samples: pl.DataFrame) -> list[ProcessUse]:
    """Other processes on the failing device: the message's "Process N has X" clauses that are
    not the failing process, else the OOM's accounting (in use less the failing process)."""
    own_pid, own = oom.get("pid"), oom.get("process_bytes")
    if oom["kind"] == REFUSED_FREE:
        # vLLM compares free memory with its share before it loads anything: what is in use
        # then is others' (as oomtrace.analysis.breakdown reads the same refusal)
        own = 0
    total, free = oom.get("total_bytes"), oom.get("free_bytes")
    in_use = total - free if total is not None and free is not None else None
    clauses = samples.filter(
        (pl.col("metric") == "process_used_bytes")
        & pl.col("pid").is_not_null()
        & pl.col("device").eq_missing(oom.get("device"))
    )
    out: list[ProcessUse] = []
    for row in clauses.unique("pid", keep="first", maintain_order=True).iter_rows(named=True):
        value = round(row["value"])
        mine = own is not None and abs(value - own) <= _SAME_PROCESS * own
        if row["pid"] == own_pid or (own_pid is None and mine):
            continue
        out.append(
            ProcessUse(row["pid"], value, None, value / in_use if in_use else 0.0, "oom_clause")
        )
    if out or own is None or in_use is None or in_use - own <= 0:
        return sorted(out, key=lambda p: -p.bytes)
    return [ProcessUse(None, in_use - own, None, (in_use - own) / in_use, "oom_event")]


def _breakdown(event: dict[str, Any], processes: list[ProcessUse]) -> tuple[Component, ...]:
    """What the OOM message states of the memory in use: PyTorch's allocations, its cache held
    unallocated, and other processes."""
    parts = [
        ("allocated by PyTorch", event.get("allocated_bytes")),
        ("reserved but unallocated", event.get("reserved_unallocated_bytes")),
        ("other processes", sum(p.bytes for p in processes) if processes else None),
    ]
    return tuple(Component(name, int(b), "oom_event") for name, b in parts if b is not None)


__all__ = ["NO_TIME", "analyze_untimed", "only_untimed"]
