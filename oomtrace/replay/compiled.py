"""Which simulator runs: the kernel as plain Python for small workloads, compiled with numba above
a measured size, compiled once per machine and cached in the user's cache directory.

numba earns its place on large workloads: a day of traffic (two million requests) replays in
about a second compiled, and would take minutes as Python. But compiling costs about ten
CPU seconds the first time (loading the cache afterwards: about two thirds of a second, mostly
importing numba), while the sample incidents (hundreds of requests) replay as plain Python in a
few hundredths of a second. So the plain functions of :mod:`oomtrace.replay.kernel` run as they are
below :data:`CROSSOVER_REQUESTS` (and below :data:`COLD_CROSSOVER_REQUESTS` while nothing is
compiled yet), and compiled above; ``benchmarks/replay_bench.py`` measures both crossovers.

The compiled code is cached in :func:`oomtrace.user_cache.numba_dir` (``numba`` in
``$OOMTRACE_CACHE_DIR``, else in the platform's user cache folder for oomtrace), never beside the
installed package (which is often read-only). ``NUMBA_CACHE_DIR``, when set, wins, as numba
documents. Either way it sits in a folder named by a digest of the kernel's sources (numba checks
only each function's own file, and the kernel inlines functions from several), with a copy of
those sources that the compiled functions name as their file: numba files its cache by the path
of a function's file, and by this one, named by content, two checkouts of the same sources share
one compiled kernel. Where no cache directory can be written, numba compiles without caching.

``OOMTRACE_REPLAY_ENGINE=python`` (or ``compiled``) overrides the choice by size: the benchmark
cross-checks the two on whole commands, and a machine where numba misbehaves can do without it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import logging
import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from oomtrace import user_cache
from oomtrace.errors import UsageError
from oomtrace.replay import kernel

log = logging.getLogger(__name__)

Engine = Literal["auto", "python", "compiled"]
ENGINES: Final = ("auto", "python", "compiled")
# Workloads of fewer requests run as plain Python: below it Python beats loading the compiled
# kernel from the cache. Measured by `benchmarks/replay_bench.py --crossover-only` (shared 2-core
# machine, load 7-11): Python 37-48 µs a request, compiled 0.5 µs, loading 0.66 CPU s (numba's
# import included): compiled pays from 13,700-17,800 requests.
CROSSOVER_REQUESTS: Final = 15_000
# While the kernel has not been compiled on this machine: compiling costs 19 CPU s in the same
# run (about 10 on a quiet machine), which Python's time exceeds from about 410,000 requests;
# smaller workloads do not pay it, this size and larger compile.
COLD_CROSSOVER_REQUESTS: Final = 400_000
# Lifecycle rows of a request (arrived, admitted, first token, finished): how the grouping of a
# requests table guesses the size of its workload before grouping it.
ROWS_PER_REQUEST: Final = 4

# How every kernel function compiles. "numpy" error model: a division by zero gives 0 or inf
# instead of raising (the kernel's divisors are at least 1 by its input contract); without the
# paths that raise, numba's pruning removes the reference counting around its arrays (see
# oomtrace.replay.kernel), which made the kernel about 15 % faster on a day.
NJIT_OPTIONS: Final[dict[str, Any]] = {"cache": True, "nogil": True, "error_model": "numpy"}

_compiled: dict[str, Callable[..., Any]] = {}
# numba's dispatchers of the kernel's functions, by name, once compiled (tests read their code)
dispatchers: dict[str, Any] = {}


def cache_dir() -> Path:
    """Where the compiled kernel is kept (see the module docstring)."""
    return user_cache.numba_dir()


def runs_compiled(requests: int, engine: Engine = "auto") -> bool:
    """Whether a workload of ``requests`` runs compiled (nothing is loaded to say so)."""
    if engine == "auto":
        engine = _engine_from_environment()
    if engine == "python":
        return False
    if engine == "compiled" or requests >= COLD_CROSSOVER_REQUESTS:
        return True
    return requests >= CROSSOVER_REQUESTS and bool(_compiled or _cached())


def simulator(requests: int, engine: Engine = "auto") -> Callable[..., Any]:
    """The ``simulate`` function to run for a workload of ``requests``: plain or compiled."""
    return compiled_simulate() if runs_compiled(requests, engine) else kernel.simulate


def _engine_from_environment() -> Engine:
    value = os.environ.get("OOMTRACE_REPLAY_ENGINE", "auto").strip().lower() or "auto"
    if value not in ENGINES:
        raise UsageError(
            f"OOMTRACE_REPLAY_ENGINE={value!r}: use one of {', '.join(ENGINES)}, or leave it unset"
        )
    engine: Engine = value  # type: ignore[assignment]  # checked against ENGINES just above
    return engine


def compiled_simulate() -> Callable[..., Any]:
    """:func:`oomtrace.replay.kernel.simulate` compiled (numba imported on the first call)."""
    if not _compiled:
        with _collector_paused():
            _compiled.update(_compile())
    return _compiled["simulate"]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused, and what was made meanwhile frozen out of its
    later passes. Importing numba and loading the kernel make about a hundred thousand objects
    that live as long as the process: without the pause, the collector's full passes over them
    (and over Polars' and NumPy's modules) cost a replay of a day about 0.2 CPU s and find
    nothing (``gc.callbacks``, 2026-12)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if paused:
            gc.enable()


def grouper(
    rows: int, engine: Engine = "auto"
) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """The compiled :mod:`~oomtrace.replay.kernel.grouping` functions (``group_ids``,
    ``group_rows``) where a requests table of ``rows`` rows will replay compiled (the choice of
    :func:`simulator`, at :data:`ROWS_PER_REQUEST` rows a request); else None: Polars groups."""
    if not runs_compiled(rows // ROWS_PER_REQUEST, engine):
        return None
    compiled_simulate()
    return _compiled["group_ids"], _compiled["group_rows"]


def warm_up() -> None:
    """Load the compiled functions (compile them into an empty cache) by running each once on a
    tiny input of the types a replay gives them: numba loads a function's code at its first
    call. A replay of a large trace does this in a thread while Polars reads the trace."""
    with _collector_paused():
        simulate = compiled_simulate()
        one = np.ones(1, dtype=np.int64)
        limits = np.array([16, 0, 0, 0, -1, 0, 1], dtype=np.int64)  # see runner.limits_array
        state = np.zeros((1, kernel.layout.NCOL), dtype=np.int64)
        simulate(one - 1, one, one, one, one, one, 10, limits, one, state)
        key = np.zeros(1, dtype=np.uint64)
        ids, groups = _compiled["group_ids"](key, key, kernel.grouping.new_table(1))
        _compiled["group_rows"](ids, groups, np.zeros(1, dtype=np.int8))


@functools.cache
def _sources() -> dict[str, bytes]:
    """The kernel's modules' sources, by module name."""
    return {m.__name__: Path(m.__file__ or "").read_bytes() for m in kernel.MODULES}


def source_digest(sources: dict[str, bytes]) -> str:
    """A digest of kernel ``sources`` (module name to source), how they compile, Python's and
    numba's versions: the compiled code's name. numba's own cache index checks only the source
    file of each function it caches, not of the functions inlined into it, and the kernel spans
    several modules. Where the sources live plays no part."""
    try:
        from importlib.metadata import version  # noqa: PLC0415 - only here

        numba_version = version("numba")
    except Exception:  # noqa: BLE001 - any failure: a name of its own
        numba_version = "unknown"
    digest = hashlib.sha256(f"py{sys.version_info[:2]}-numba{numba_version}".encode())
    digest.update(repr(sorted(NJIT_OPTIONS.items())).encode())
    for name, text in sources.items():
        digest.update(f"\x00{name}\x00{len(text)}\x00".encode())
        digest.update(text)
    return digest.hexdigest()[:16]


@functools.cache
def _source_digest() -> str:
    return source_digest(_sources())


def _compiled_dir() -> Path:
    """Where this kernel's compiled code is kept: its own folder (named by
    :func:`_source_digest`) in ``NUMBA_CACHE_DIR`` when set (numba documents that it wins), else
    in :func:`cache_dir`."""
    base = os.environ.get("NUMBA_CACHE_DIR") or str(cache_dir())
    return Path(base) / f"replay-kernel-{_source_digest()}"


def _source_copies() -> dict[str, str]:
    """Per kernel module, a copy of its source in the compiled code's own folder, named as the
    compiled functions' file. numba files a function's cache under a folder named by the path of
    its source's folder, so compiled from the checkout's own files two checkouts of the same
    sources would each compile (about ten CPU seconds) while the marker of :func:`_cached`, named
    by content, told both that the kernel was compiled; named by content, they share one compiled
    kernel, and different sources never meet. Empty where the folder cannot be written (numba
    then files the cache by the checkout's files)."""
    folder = _compiled_dir() / "sources"
    copies: dict[str, str] = {}
    try:
        for name, text in _sources().items():
            path = folder / f"{name}.py"
            if not path.is_file() or path.read_bytes() != text:
                folder.mkdir(parents=True, exist_ok=True)
                partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                partial.write_bytes(text)
                partial.replace(path)  # a reader never sees half a file
            copies[name] = str(path)
    except OSError as err:
        log.debug(
            "kernel sources not copied to %s (%s): cached by the checkout's path", folder, err
        )
        return {}
    return copies


def _marker() -> Path:
    """A file written once the kernel has compiled here ("ro": the version compiled for
    read-only inputs, see :func:`_read_only_inputs`)."""
    return cache_dir() / f"replay-kernel-{_source_digest()}-ro.ok"


def _cached() -> bool:
    try:
        return _marker().is_file()
    except OSError:
        return False


def _compile() -> dict[str, Callable[..., Any]]:
    """numba versions of the marked functions of :mod:`oomtrace.replay.kernel`'s modules, in a
    namespace of their own whose globals are the compiled functions (so that they call one
    another compiled), cached in :func:`_compiled_dir`."""
    import numba  # noqa: PLC0415 - only when a large workload needs it
    from numba.core import config  # noqa: PLC0415

    directory = str(_compiled_dir())
    copies = _source_copies()
    namespace: dict[str, Any] = {}
    compiled_names: list[str] = []
    for module in kernel.MODULES:
        namespace.update(vars(module))
    settings: Any = config  # numba's configuration module (untyped)
    previous = settings.CACHE_DIR
    settings.CACHE_DIR = directory  # read once per function, when its cache is set up below
    try:
        for module in kernel.MODULES:
            for name, func in vars(module).items():
                how = getattr(func, kernel.COMPILE_AS, None)
                if how is None or not isinstance(func, types.FunctionType):
                    continue
                if func.__module__ != module.__name__:
                    continue  # imported from another of the modules: compiled there
                code = func.__code__
                if module.__name__ in copies:
                    code = code.replace(co_filename=copies[module.__name__])
                clone = types.FunctionType(
                    code, namespace, name, func.__defaults__, func.__closure__
                )
                clone.__qualname__, clone.__module__ = func.__qualname__, func.__module__
                inline: Literal["always", "never"] = "always" if how == "inline" else "never"
                namespace[name] = numba.njit(clone, inline=inline, **NJIT_OPTIONS)
                compiled_names.append(name)
    finally:
        settings.CACHE_DIR = previous
    dispatchers.update((name, namespace[name]) for name in compiled_names)
    log.debug("replay kernel compiled with numba, cached in %s", directory)
    return {
        "simulate": _marking(_read_only_inputs(namespace["simulate"], writes_last=True)),
        "group_ids": _read_only_inputs(namespace["group_ids"], writes_last=True),
        "group_rows": _read_only_inputs(namespace["group_rows"]),
    }


def _read_only_inputs(
    simulate: Callable[..., Any], *, writes_last: bool = False
) -> Callable[..., Any]:
    """``simulate`` given its arrays as read-only views. numba compiles one version per array
    type, and whether an array is writable is part of its type: a column Polars hands over
    without a copy is read-only, one it had to copy is not; so every array goes in read-only and
    one compiled version serves them all (the kernel writes only to arrays it made itself, or,
    ``writes_last``, to its last argument, which the caller made writable for it)."""

    def run(*args: Any) -> Any:
        given = args[:-1] if writes_last else args
        views = (_read_only(a) if isinstance(a, np.ndarray) else a for a in given)
        return simulate(*views, *args[len(given) :])

    return run


def _read_only(array: Any) -> Any:
    view = np.ascontiguousarray(array).view()
    view.flags.writeable = False
    return view


def _marking(simulate: Callable[..., Any]) -> Callable[..., Any]:
    """``simulate``, writing the marker of :func:`_cached` after its first call compiled it."""

    def run(*args: Any) -> Any:
        out = simulate(*args)
        if _compiled.get("simulate") is run:
            _compiled["simulate"] = simulate
            try:
                _marker().parent.mkdir(parents=True, exist_ok=True)
                _marker().touch()
            except OSError:
                log.debug("cannot write %s: the next run may use the Python kernel", _marker())
        return out

    return run
