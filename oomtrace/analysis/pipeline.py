"""``analyze``: from a canonical trace to findings (the library behind ``oomtrace analyze``;
import it from :mod:`oomtrace.analysis`).

``analyze`` takes a :class:`~oomtrace.trace.Trace` in memory, or a trace directory opened with
:func:`open_trace`, which reads only what the analysis needs (see
:mod:`oomtrace.analysis.trace_scan`): a day of 100 Hz samples is not held in memory whole.

Everything is computed from the canonical tables; see :mod:`oomtrace.analysis` for the stages.

**Attribution coverage** (of each incident): ``explained / max(observed, explained)``, where
``observed`` is the figure the incident is about at its peak (``coverage_basis``: the observed KV
in use for a KV exhaustion, device memory in use at an OOM, the spiking series' value at a spike)
and ``explained`` is the sum of the modelled KV bytes of every request resident at the peak. The
remainder, ``unexplained_bytes``, is what named requests do not account for; at an OOM the
incident's ``breakdown`` splits it into measured parts (rest of the KV pool, weights, allocator
slack, other processes, memory outside PyTorch) and a residual.
"""

from __future__ import annotations

from oomtrace.analysis.conclude import findings_of
from oomtrace.analysis.findings import Findings
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.prepare import prepare, row_counts, tables_on_node
from oomtrace.analysis.trace_scan import ReadStrictly, TraceScan
from oomtrace.analysis.untimed import analyze_untimed, only_untimed
from oomtrace.analysis.windowed import analyze_windowed
from oomtrace.trace import Trace, read_trace

__all__ = ["analyze"]


def analyze(trace: Trace | TraceScan, options: AnalyzeOptions | None = None) -> Findings:
    """Analyse a canonical trace. Raises :class:`InputError` only when nothing can be analysed
    (no rows at all, or none on the requested node); partial traces give findings with gaps."""
    options = options or AnalyzeOptions()
    if only_untimed(trace):
        # No input prints a time: nothing to align or misjoin; read the rows in their order.
        return analyze_untimed(trace, options)
    if not isinstance(trace, TraceScan):
        return _analyze(trace, options)
    try:
        return _analyze(trace, options)
    except ReadStrictly:
        # The scanned directory holds something the strict reader rejects: read_trace raises it.
        return _analyze(read_trace(trace.path), options)


def _analyze(source: Trace | TraceScan, options: AnalyzeOptions) -> Findings:
    tables = tables_on_node(source, options.node)
    if sum(row_counts(tables)[:2]) > options.windowed_above_rows and (
        found := analyze_windowed(tables, options)
    ):
        return found
    return findings_of(tables, *prepare(tables, options), options)
