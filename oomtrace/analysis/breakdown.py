"""What the observed peak was made of: the engine's processes, other processes, and the parts.

The breakdown splits device memory in use at the peak into parts measured independently, each
with its basis; what no part accounts for is left as ``unexplained`` (activations, workspaces and
anything else not observed). Parts never overlap: the KV pool is split into what named requests
held and the rest (reserved, not occupied); allocator slack is reserved but not allocated.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis.findings import Component, ProcessUse
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.samples import SampleView
from oomtrace.schema import TS
from oomtrace.trace import Manifest

# The start-up refusal for lack of free memory (vLLM's "Free memory on device (X/Y GiB) on startup
# is less than desired GPU memory utilization"): the rest of the device is held by others.
REFUSED_FREE = "startup_memory_insufficient"


def engine_pids(samples: SampleView, events: pl.DataFrame, manifest: Manifest) -> frozenset[int]:
    """Processes that are the engine: those with allocator statistics, those named in engine
    events or in the manifest; failing all, the process holding the most memory when first seen
    (an inference server preallocates most of the device at startup)."""
    pids: set[int] = set()
    torch = pl.col("metric").str.starts_with("torch_") & pl.col("pid").is_not_null()
    pids |= set(samples.memory.catalog.filter(torch)["pid"].unique().to_list())
    pids |= set(samples.other.filter(torch)["pid"].unique().to_list())
    own = events.filter(
        pl.col("kind").is_in(["engine_start", "engine_dead"]) & pl.col("pid").is_not_null()
    )
    pids |= set(own["pid"].unique().to_list())
    stated = manifest.engine.get("pids") or manifest.engine.get("pid")
    if isinstance(stated, int):
        pids.add(stated)
    elif isinstance(stated, list):
        pids |= {int(p) for p in stated if isinstance(p, int)}
    failing, listed = _oom_clauses(samples.memory, events)
    pids |= failing
    if pids:
        return frozenset(pids | _namespace_twins(samples.memory, pids))
    # a process seen before a refusal for lack of free memory held it while the engine held
    # nothing yet: it is one of the others
    refused = events.filter(pl.col("kind") == REFUSED_FREE)["ts"].max()
    first = _first_process_samples(samples.memory)
    if refused is not None:
        first = first.filter(pl.col("ts") > refused)
    first = (
        first.filter(~pl.col("pid").is_in(list(listed)))
        .sort("ts", maintain_order=True)
        .group_by("node", "device", "pid", maintain_order=True)
        .agg(pl.col("value").first())
        .sort("value", descending=True)
        .group_by("node", "device", maintain_order=True)
        .first()
    )
    return frozenset(first["pid"].to_list())


# PyTorch prints sizes to two decimals of their unit ("33.83 GiB"): a clause and "this process
# has" about the same process agree within half a unit of the last digit.
_CLAUSE_MATCH = 0.005


def _oom_clauses(memory: SeriesIndex, events: pl.DataFrame) -> tuple[set[int], set[int]]:
    """The pids an OOM message lists ("Process N has X memory in use", per-process samples at
    the OOM's instant), split into the failing process itself and the others.

    The failing process is the OOM event's ``pid`` where stated, and the clause whose size is
    the message's "this process has X" (``process_bytes``): in a container the event names the
    container's pid and the clause the host's, for one process. Where the message states "this
    process has X" and no clause has that size, the engine is not listed (its pid hidden) and
    every listed process is another one. Where it states neither, nothing is concluded here
    (the engine is then the process holding the most, see :func:`engine_pids`)."""
    ooms = events.filter((pl.col("kind") == "oom") & pl.col("ts").is_not_null())
    catalog = memory.catalog.filter(
        (pl.col("metric") == "process_used_bytes") & pl.col("pid").is_not_null()
    )
    if ooms.is_empty() or catalog.is_empty():
        return set(), set()
    own: set[int] = {int(p) for p in ooms["pid"].drop_nulls().to_list()}
    others: set[int] = set()
    for oom in ooms.filter(pl.col("process_bytes").is_not_null()).iter_rows(named=True):
        mine = oom["process_bytes"]
        for name, pid in catalog.select("series", "pid").rows():
            rows = memory.between(name, oom["ts"], oom["ts"])
            if rows.is_empty() or pid in own:
                continue
            if abs(float(rows["value"][0]) - mine) <= _CLAUSE_MATCH * mine:
                own.add(int(pid))
            else:
                others.add(int(pid))
    return own, others - own


def _first_process_samples(memory: SeriesIndex) -> pl.DataFrame:
    """The first sample of every per-process series (``node, device, pid, ts, value``)."""
    catalog = memory.catalog.filter(
        (pl.col("metric") == "process_used_bytes") & pl.col("pid").is_not_null()
    )
    frames = [
        memory.rows(name)
        .head(1)
        .select(
            pl.lit(node, pl.String).alias("node"),
            pl.lit(device, pl.Int32).alias("device"),
            pl.lit(pid, pl.Int64).alias("pid"),
            "ts",
            "value",
        )
        for name, node, device, pid in catalog.select("series", "node", "device", "pid").rows()
    ]
    if not frames:
        schema = {"node": pl.String, "device": pl.Int32, "pid": pl.Int64, "value": pl.Float64}
        return pl.DataFrame(schema={**schema, "ts": TS})
    return pl.concat(frames)


# How far above the allocator's reserved bytes the engine's own process may sit (CUDA context,
# cuBLAS and NCCL workspaces, CUDA graphs outside the cache): a larger gap is another process.
_TWIN_MAX_GAP = 8 << 30


def _namespace_twins(memory: SeriesIndex, pids: set[int]) -> set[int]:
    """The device-side pid of an engine whose allocator samples name it by another pid.

    In a container the PyTorch hook sees its own pid namespace and NVML the host's, so the same
    process is ``391`` in ``torch_*`` samples and ``2914467`` in ``process_used_bytes``. When no
    per-process series carries an engine pid, the process on that device whose memory stays at
    or above the allocator's reserved bytes, and closest to them, is the engine's twin. Only the
    per-process and the engine's reserved series are read, and only when the catalog shows no
    per-process series of an engine pid."""
    engine = pl.col("pid").is_in(list(pids))
    per_process = memory.catalog.filter(
        (pl.col("metric") == "process_used_bytes") & pl.col("pid").is_not_null()
    )
    hooks = memory.catalog.filter((pl.col("metric") == "torch_reserved_bytes") & engine)
    if per_process.is_empty() or per_process.select(engine.any()).item() or hooks.is_empty():
        return set()
    procs = memory.long(per_process["series"].to_list()).select(
        "node", "device", "pid", "ts", used="value"
    )
    reserved = (
        memory.long(hooks["series"].to_list())
        .select("node", "device", "ts", reserved="value")
        .sort("ts")
    )
    gaps = (
        procs.sort("ts")
        .join_asof(
            reserved, on="ts", by=["node", "device"], strategy="backward", check_sortedness=False
        )
        .drop_nulls("reserved")
        .filter(pl.col("used") > 0)
        .group_by("node", "device", "pid")
        .agg(
            below=(pl.col("used") < pl.col("reserved")).mean(),
            gap=(pl.col("used") - pl.col("reserved")).median(),
        )
        .filter((pl.col("below") <= 0.05) & (pl.col("gap") <= _TWIN_MAX_GAP))
        .sort("gap", "pid")
        .group_by("node", "device", maintain_order=True)
        .first()
    )
    return set(gaps["pid"].to_list())


def foreign_processes(
    memory: SeriesIndex,
    *,
    node: str,
    device: int | None,
    peak_ts: datetime,
    window_start: datetime,
    window: timedelta,
    engine: frozenset[int],
    oom: dict[str, Any] | None,
    observed: int | None,
    names: dict[int, str] | None = None,
) -> list[ProcessUse]:
    """Memory other processes held at the peak, from per-process samples or, failing those, from
    the OOM's own accounting (in use minus the engine's process); ``names`` are the names the
    sources printed for the node's pids (:func:`process_names`)."""
    out: list[ProcessUse] = []
    on_node = memory.catalog.filter(
        (pl.col("metric") == "process_used_bytes") & (pl.col("node") == node)
    )
    known = set(on_node["device"].drop_nulls().to_list()) | (
        {device} if device is not None else set()
    )
    # A process listed without a device (nvidia-smi naming the GPU by its UUID alone) can only
    # be on the node's one GPU when it has one.
    same = pl.col("device").eq_missing(device) | (pl.col("device").is_null() & (len(known) <= 1))
    catalog = on_node.filter(
        pl.col("pid").is_not_null()
        & ~pl.col("pid").is_in(list(engine))
        & (same if device is not None else pl.lit(value=True))
    )
    for pid in sorted(set(catalog["pid"].to_list())):
        series = memory.find("process_used_bytes", node, device, pid=pid)
        if series is None:
            series = memory.find("process_used_bytes", node, None, pid=pid)
        now = memory.value_at(series, peak_ts, window)
        if now is None:
            continue
        before = memory.value_at(series, window_start, window)
        # a process first seen inside the window (the OOM message's clause is its only sample)
        # did not grow by what it holds: its growth is not known
        growth = round(now - before) if before is not None else None
        share = now / observed if observed else 0.0
        name = (names or {}).get(pid)
        out.append(ProcessUse(pid, round(now), growth, share, "samples", name))
    if out or oom is None:
        return sorted(out, key=lambda p: (-p.bytes, p.pid or 0))
    total, free, own = oom.get("total_bytes"), oom.get("free_bytes"), oom.get("process_bytes")
    if oom.get("kind") == REFUSED_FREE:
        # vLLM compares free memory with its share right after creating its CUDA context, before
        # it loads anything: what is in use then is others' (its own context, a few hundred MiB,
        # is counted with them)
        own = 0
    if total is not None and free is not None and own is not None and total - free - own > 0:
        other = total - free - own
        out.append(ProcessUse(None, other, None, other / (total - free), "oom_event"))
    return out


def process_names(events: pl.DataFrame, node: str) -> dict[int, str]:
    """The name a source printed for each pid of ``node`` (nvidia-smi's process events: the
    ``detail`` of kind ``process``), the first where a pid was printed under several."""
    named = events.filter(
        (pl.col("kind") == "process")
        & (pl.col("node") == node)
        & pl.col("pid").is_not_null()
        & pl.col("detail").is_not_null()
    )
    out: dict[int, str] = {}
    for pid, name in named.sort("ts").select("pid", "detail").rows():
        out.setdefault(int(pid), str(name))
    return out


def breakdown(
    memory: SeriesIndex,
    *,
    node: str,
    device: int | None,
    peak_ts: datetime,
    window: timedelta,
    observed: int | None,
    explained: int | None,
    pool_bytes: int | None,
    weights: int | None,
    foreign: int,
) -> tuple[Component, ...]:
    """Parts of the device memory in use at the peak (see the module docstring)."""
    if observed is None:
        return ()

    def at(metric: str) -> float | None:
        return memory.value_at(memory.find(metric, node, device), peak_ts, window)

    reserved, allocated, device_used = (
        at("torch_reserved_bytes"),
        at("torch_allocated_bytes"),
        at("device_used_bytes"),
    )
    parts: list[Component] = []
    if explained:
        parts.append(Component("KV held by named requests", explained, "modelled"))
    if pool_bytes:
        rest = max(pool_bytes - (explained or 0), 0)
        parts.append(
            Component("rest of the KV pool (reserved, not occupied)", rest, "engine statement")
        )
    if weights:
        parts.append(Component("model weights", weights, "engine statement"))
    if reserved is not None and allocated is not None:
        parts.append(
            Component(
                "allocator slack (reserved, not allocated)",
                round(max(reserved - allocated, 0.0)),
                "samples",
            )
        )
    if foreign:
        parts.append(Component("other processes", foreign, "samples or OOM accounting"))
    if device_used is not None and reserved is not None:
        outside = max(device_used - reserved - foreign, 0.0)
        parts.append(
            Component(
                "outside PyTorch's cache (CUDA context, NCCL, graphs)", round(outside), "samples"
            )
        )
    residual = observed - sum(p.bytes for p in parts)
    parts.append(
        Component(
            "unexplained (activations, workspaces, anything not observed)",
            max(residual, 0),
            "residual",
        )
    )
    return tuple(parts)
