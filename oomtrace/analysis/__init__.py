"""The analysis behind ``oomtrace analyze``: from canonical tables to findings.

This package is the front door::

    from oomtrace.analysis import AnalyzeOptions, analyze, open_trace
    findings = analyze(open_trace(path), AnalyzeOptions(window_s=60))
    findings.primary.culprits[0].request_id

Stages, each reading only what the previous one produced (``docs/ARCHITECTURE.md`` draws them):

* :mod:`oomtrace.analysis.trace_scan` — the tables of a trace in memory or of a directory scanned
  lazily; :mod:`oomtrace.analysis.samples` reads the samples in one streaming pass (memory series
  one frame each) and :mod:`oomtrace.analysis.prepare` computes everything read once;
* :mod:`oomtrace.analysis.kvmodel` — bytes per stored token and per block, with their provenance;
* :mod:`oomtrace.analysis.timeline` — per-request residency and stored tokens (exact, modelled,
  bounded), from the lifecycle put in request order once (:mod:`oomtrace.analysis.lifecycle`);
* :mod:`oomtrace.analysis.pool` — pool-level series by a sweep over lifecycle knots;
* :mod:`oomtrace.analysis.observed_series`, :mod:`oomtrace.analysis.spikes` — memory series and
  spikes;
* :mod:`oomtrace.analysis.reconcile`, :mod:`oomtrace.analysis.culprits`,
  :mod:`oomtrace.analysis.classify`, :mod:`oomtrace.analysis.gaps` — what an incident is made of;
* :mod:`oomtrace.analysis.findings` — the frozen result and its versioned JSON;
* :mod:`oomtrace.analysis.conclude` — from what was prepared to the incidents and the findings;
* :mod:`oomtrace.analysis.pipeline` — :func:`analyze`, the stages run in order;
* :mod:`oomtrace.analysis.windowed` — a long trace in two passes, its memory bounded by the
  incident windows: a streaming scan (:mod:`oomtrace.analysis.sample_buckets`,
  :mod:`oomtrace.analysis.request_scan`) finds them, the stages above run on their rows.

Nothing below this package imports it (``tests/unit/test_layers.py`` checks the layering); the
terminal summary of the findings is :mod:`oomtrace.terminal.findings_text`.
"""

from typing import TYPE_CHECKING

from oomtrace import lazy

if TYPE_CHECKING:
    from oomtrace.analysis.findings import Findings
    from oomtrace.analysis.options import AnalyzeOptions
    from oomtrace.analysis.pipeline import analyze
    from oomtrace.analysis.trace_scan import open_trace

# Loaded on first use (oomtrace.lazy): a replay reads the KV model and the grouping helpers
# without importing every stage of the analysis.
_EXPORTS = {
    "AnalyzeOptions": "oomtrace.analysis.options",
    "Findings": "oomtrace.analysis.findings",
    "analyze": "oomtrace.analysis.pipeline",
    "open_trace": "oomtrace.analysis.trace_scan",
}

__all__ = ["AnalyzeOptions", "Findings", "analyze", "open_trace"]


__getattr__ = lazy.exports("oomtrace.analysis", _EXPORTS)
