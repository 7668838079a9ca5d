"""Which simulator runs: the kernel in C (:mod:`oomtrace.replay._kernel`, built with the package),
or its plain Python/NumPy functions (:mod:`oomtrace.replay.kernel`) where the extension was not
built.

The C kernel loads in about a millisecond and nothing is compiled at run time, so it runs at
every size from :data:`CROSSOVER_REQUESTS` (measured by ``benchmarks/replay_bench.py
--crossover-only``); a day of traffic (two million requests) replays in about a second where
plain Python would take minutes. Where the extension is missing (a build without a C compiler)
the Python functions run, with a one-line warning for workloads of :data:`SLOW_REQUESTS` or more.

``OOMTRACE_REPLAY_ENGINE=python`` (or ``compiled``) overrides the choice: the benchmark and the
tests cross-check the two on whole commands; ``compiled`` where the extension is missing is a
usage error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final, Literal

import numpy as np

from oomtrace.errors import UsageError
from oomtrace.replay import kernel
from oomtrace.replay.kernel import grouping

log = logging.getLogger(__name__)


def _load() -> ModuleType | None:
    try:
        from oomtrace.replay import _kernel  # noqa: PLC0415 - may be missing
    except ImportError:  # built without a C compiler: the Python functions run
        return None
    return _kernel


_ckernel = _load()

Engine = Literal["auto", "python", "compiled"]
ENGINES: Final = ("auto", "python", "compiled")
# Workloads of fewer requests run as plain Python. `benchmarks/replay_bench.py --crossover-only`
# (2026-12-03, shared 2-core machine, load 7.5): loading the C kernel costs a fresh process
# 0.04 CPU ms; best CPU of 5, Python against C: 1 request 0.068 against 0.014 ms, 100 requests
# 3.6 against 0.03 ms, 100,000 requests 4.1 s against 13 ms. C is cheaper at every size.
CROSSOVER_REQUESTS: Final = 0
# Where the C kernel is missing, workloads this large warn that the Python kernel is slow
# (about 40 µs a request: 100,000 requests take seconds).
SLOW_REQUESTS: Final = 100_000
# Lifecycle rows of a request (arrived, admitted, first token, finished): how the grouping of a
# requests table guesses the size of its workload before grouping it.
ROWS_PER_REQUEST: Final = 4
_warned: list[bool] = []  # the slow path's warning is given once a process


def available() -> bool:
    """Whether the C kernel was built."""
    return _ckernel is not None


def runs_compiled(requests: int, engine: Engine = "auto") -> bool:
    """Whether a workload of ``requests`` runs in C."""
    if engine == "auto":
        engine = _engine_from_environment()
    if engine == "python":
        return False
    if _ckernel is None:
        if engine == "compiled":
            raise UsageError(
                "OOMTRACE_REPLAY_ENGINE=compiled: the C replay kernel was not built; reinstall "
                "oomtrace where a C compiler is available, or unset the variable"
            )
        if requests >= SLOW_REQUESTS and not _warned:
            _warned.append(True)
            log.warning(
                "replaying %d requests with the Python kernel (the C kernel was not built): "
                "this takes minutes; reinstall oomtrace with a C compiler to make it seconds",
                requests,
            )
        return False
    return engine == "compiled" or requests >= CROSSOVER_REQUESTS


def simulator(requests: int, engine: Engine = "auto") -> Callable[..., Any]:
    """The ``simulate`` function to run for a workload of ``requests``: C or plain Python."""
    return c_simulate if runs_compiled(requests, engine) else kernel.simulate


def _engine_from_environment() -> Engine:
    value = os.environ.get("OOMTRACE_REPLAY_ENGINE", "auto").strip().lower() or "auto"
    if value not in ENGINES:
        raise UsageError(
            f"OOMTRACE_REPLAY_ENGINE={value!r}: use one of {', '.join(ENGINES)}, or leave it unset"
        )
    engine: Engine = value  # type: ignore[assignment]  # checked against ENGINES just above
    return engine


def grouper(
    rows: int, engine: Engine = "auto"
) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The C :mod:`~oomtrace.replay.kernel.grouping` functions (``group_ids``, ``group_rows``)
    where a requests table of ``rows`` rows will replay in C (the choice of :func:`simulator`,
    at :data:`ROWS_PER_REQUEST` rows a request); else None: Polars groups."""
    if not runs_compiled(rows // ROWS_PER_REQUEST, engine):
        return None
    return c_group_ids, c_group_rows


def _c() -> ModuleType:
    if _ckernel is None:
        raise UsageError("the C replay kernel was not built: reinstall oomtrace with a C compiler")
    return _ckernel


def _int64(array: Any) -> Any:
    return np.ascontiguousarray(array, dtype=np.int64)


def c_simulate(  # noqa: PLR0917 - kernel.simulate's signature
    arr: Any, p: Any, o: Any, pre: Any, dl: Any, res: Any, pool: int, limits: Any, probes: Any,
    st: Any,
) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """:func:`oomtrace.replay.kernel.simulate` in C: the same arguments, the same results
    (``st`` is written in place, so it must be a C-contiguous int64 matrix)."""
    limits = _int64(limits)
    probes = _int64(probes)
    series = np.zeros((probes.shape[0], 4), dtype=np.int64)
    totals = np.zeros(5, dtype=np.int64)
    width = int(limits[5]) if limits.shape[0] > 5 else 1  # a short limits: the C code says so
    events = np.empty((4, max(width, 1)), dtype=np.int64)
    rows = _c().simulate(
        _int64(arr), _int64(p), _int64(o), _int64(pre), _int64(dl), _int64(res), int(pool),
        limits, probes, st, series, totals, events,
    )  # fmt: skip
    return st, series, totals, events[:, : min(rows, events.shape[1])]


def c_group_ids(key: Any, check: Any, table: Any) -> tuple[Any, int]:
    """:func:`oomtrace.replay.kernel.grouping.group_ids` in C (``table`` is filled, or replaced
    by a larger one inside the C code where it fills up)."""
    key = np.ascontiguousarray(key, dtype=np.uint64)
    out = np.empty(key.shape[0], dtype=np.int32)
    groups = _c().group_ids(key, np.ascontiguousarray(check, dtype=np.uint64), table, out)
    return out, groups


def c_group_rows(ids: Any, groups: int, code: Any) -> Any:
    """:func:`oomtrace.replay.kernel.grouping.group_rows` in C."""
    out = np.empty((groups, grouping.G_NCOL), dtype=np.int32)
    _c().group_rows(
        np.ascontiguousarray(ids, dtype=np.int32), np.ascontiguousarray(code, dtype=np.int8), out
    )
    return out
