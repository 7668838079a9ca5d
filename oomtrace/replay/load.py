"""What ``oomtrace replay`` reads: of a trace directory, only the request columns and the sample
series a replay uses; raw files are ingested (``oomtrace.ingest.load_any``).

A day of traffic holds millions of lifecycle rows: reading all their columns (the sampling
parameters, ``kv_blocks``, ...) costs about three times reading the ones a replay uses.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import polars as pl

from oomtrace.errors import UsageError
from oomtrace.replay import compiled
from oomtrace.replay.calibrate import SAMPLE_METRICS
from oomtrace.trace import Trace, is_trace_dir, read_trace

if TYPE_CHECKING:
    from oomtrace.ingest import IngestOptions

log = logging.getLogger(__name__)

# The request columns a replay reads besides the required ones: the workload
# (oomtrace.replay.workload) and calibration's prefix-cache caveat.
REQUEST_COLUMNS: Final = ("prompt_tokens", "max_tokens", "output_tokens", "cached_tokens")


def _warm_kernel(requests: Path) -> threading.Thread | None:
    """Where the requests table is large enough to replay compiled, a thread that imports numba
    and loads the compiled kernel (:func:`oomtrace.replay.compiled.warm_up`) while Polars reads
    the trace: the import holds Python's lock, the reading mostly does not, so on a day the two
    overlap (wall time; the CPU time is the same). None where the table replays as Python."""
    try:
        rows = pl.scan_parquet(requests).select(pl.len()).collect().item()  # the footer only
        if not compiled.runs_compiled(rows // compiled.ROWS_PER_REQUEST):
            return None
    except (OSError, pl.exceptions.PolarsError, UsageError):
        return None  # reading the trace, or the replay, says what is wrong
    thread = threading.Thread(target=_warm_up, name="oomtrace-kernel", daemon=True)
    thread.start()
    return thread


def _warm_up() -> None:
    try:
        compiled.warm_up()
    except Exception:  # the replay loads the kernel again and reports its errors
        log.debug("loading the compiled kernel ahead failed", exc_info=True)


def load_replay_input(paths: Sequence[Path], options: IngestOptions | None = None) -> Trace:
    """A trace directory read for a replay (see the module), or the trace ingested from raw
    files and folders (with ``load_any``'s errors)."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1 and is_trace_dir(paths[0]):
        warming = _warm_kernel(paths[0] / "requests.parquet")
        trace = read_trace(paths[0], sample_metrics=SAMPLE_METRICS, request_columns=REQUEST_COLUMNS)
        if warming is not None:
            warming.join()
        return trace
    from oomtrace.ingest import load_any  # noqa: PLC0415 - every parser: only for raw files

    return load_any(paths, options, sample_metrics=SAMPLE_METRICS)
