"""What-if replay of recorded traffic on a paged KV pool under other admission settings.

From a trace and the command's options in one call (what ``oomtrace replay`` runs)::

    run = run_replay(read_trace(path), ReplayOptions(max_num_seqs=32, search="kv-blocks"))

Step by step::

    workload = build_workload(read_trace(path))
    result = replay(workload, ReplaySettings(kv_blocks=8000, max_num_seqs=128))
    found = search(workload, settings, "max-num-seqs")
    cal = calibrate(trace, workload, recorded_settings(trace.manifest))

The simulated engine is described in :mod:`oomtrace.replay.settings`.
"""

from oomtrace.replay.calibrate import Calibration, calibrate, recorded_settings
from oomtrace.replay.events import replayed_requests
from oomtrace.replay.results import ReplayResult, ReplaySummary
from oomtrace.replay.run import ReplayOptions, ReplayRun, run_replay
from oomtrace.replay.runner import replay
from oomtrace.replay.search import SEARCH_TARGETS, SearchResult, SearchTarget, search
from oomtrace.replay.settings import POLICIES, Policy, ReplaySettings, blocks_from_budget
from oomtrace.replay.workload import (
    TimeOptions,
    Workload,
    build_workload,
    workload_from_arrays,
    workload_from_frame,
)

__all__ = [
    "POLICIES",
    "SEARCH_TARGETS",
    "Calibration",
    "Policy",
    "ReplayOptions",
    "ReplayResult",
    "ReplayRun",
    "ReplaySettings",
    "ReplaySummary",
    "SearchResult",
    "SearchTarget",
    "TimeOptions",
    "Workload",
    "blocks_from_budget",
    "build_workload",
    "calibrate",
    "recorded_settings",
    "replay",
    "replayed_requests",
    "run_replay",
    "search",
    "workload_from_arrays",
    "workload_from_frame",
]
