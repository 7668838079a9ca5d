"""The analysis behind ``oomtrace analyze``: from canonical tables to findings.

Layers, each reading only what the previous one produced:

* :mod:`oomtrace.analysis.source` — the tables of a trace in memory or of a directory scanned
  lazily; :mod:`oomtrace.analysis.samples` reads the samples in one streaming pass (memory series
  one frame each) and :mod:`oomtrace.analysis.prepare` computes everything read once;
* :mod:`oomtrace.analysis.kvmodel` — bytes per stored token and per block, with their provenance;
* :mod:`oomtrace.timeline` — per-request residency and stored tokens (exact, modelled, bounded),
  from the lifecycle put in request order once (:mod:`oomtrace.analysis.lifecycle`);
* :mod:`oomtrace.analysis.pool` — pool-level series by a sweep over lifecycle knots;
* :mod:`oomtrace.analysis.series`, :mod:`oomtrace.analysis.spikes` — memory series and spikes;
* :mod:`oomtrace.analysis.reconcile`, :mod:`oomtrace.analysis.culprits`,
  :mod:`oomtrace.analysis.classify`, :mod:`oomtrace.analysis.gaps` — what an incident is made of;
* :mod:`oomtrace.analysis.findings` — the frozen result and its versioned JSON;
* :mod:`oomtrace.attribution` — :func:`~oomtrace.attribution.analyze`, the entry point.
"""
