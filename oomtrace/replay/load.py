"""What ``oomtrace replay`` reads: of a trace directory, only the request columns and the sample
series a replay uses; raw files are ingested (``oomtrace.ingest.load_any``).

A day of traffic holds millions of lifecycle rows: reading all their columns (the sampling
parameters, ``kv_blocks``, ...) costs about three times reading the ones a replay uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from oomtrace.replay.calibrate import SAMPLE_METRICS
from oomtrace.trace import Trace, is_trace_dir, read_trace

if TYPE_CHECKING:
    from oomtrace.ingest import IngestOptions

# The request columns a replay reads besides the required ones: the workload
# (oomtrace.replay.workload) and calibration's prefix-cache caveat.
REQUEST_COLUMNS: Final = ("prompt_tokens", "max_tokens", "output_tokens", "cached_tokens")


def load_replay_input(paths: Sequence[Path], options: IngestOptions | None = None) -> Trace:
    """A trace directory read for a replay (see the module), or the trace ingested from raw
    files and folders (with ``load_any``'s errors)."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1 and is_trace_dir(paths[0]):
        return read_trace(paths[0], sample_metrics=SAMPLE_METRICS, request_columns=REQUEST_COLUMNS)
    from oomtrace.ingest import load_any  # noqa: PLC0415 - every parser: only for raw files

    return load_any(paths, options, sample_metrics=SAMPLE_METRICS)
