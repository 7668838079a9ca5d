"""Engine deaths no incident explains: a dead engine is never "no incident".

An ``engine_dead`` event (vLLM's ``EngineDeadError``, SGLang's "Received sigquit from a child
process" or "Scheduler hit an exception", TGI's "Webserver Crashed") is explained when an OOM or
a start-up refusal on its node came within a window of it (the failure that killed it; a restart
loop fails and dies at every attempt), or an incident peaked within a window of it. Otherwise the
findings say that the engine died, when (or where in the log's order, for a log without times)
and why where the driver's Xid report of a GPU fault came within the window (the kernel log read
beside the engine's), else that the log does not say why, with the device memory in use and the
KV cache's fill the inputs last saw within a window before it (what can be said: an engine that
died beside a full device reads otherwise than one that died at a third of its cache); the
statements of one death (several ranks, the API server and the engine core) within a window of
each other are one death.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import polars as pl

from oomtrace.analysis.findings import Incident
from oomtrace.analysis.index import SeriesIndex
from oomtrace.ingest.torch.host_kill import SHELL_KILL, host_killed
from oomtrace.isotime import iso_time
from oomtrace.units import format_bytes

FAILURES: Final = (
    "oom",
    "startup_kv_insufficient",
    "startup_no_kv_memory",
    "startup_memory_insufficient",
)
NOT_SAID: Final = "the log does not say why (the lines before the death are not in the trace)"
# A process the shell reports "Killed" (SIGKILL) with no OOM of the device before it: the host's
# memory, not the GPU's, is what a reader checks first.
HOST_KILLED: Final = (
    "SIGKILL (the shell printed 'Killed'), most often the kernel's OOM killer for want of host "
    "memory (RAM), not device memory; `dmesg` or `journalctl -k` says whether it was ('Out of "
    "memory: Killed process N'), and vLLM's CPU swap space (--swap-space, pinned host memory per "
    "GPU) and weights staged in RAM are what it holds there"
)


@dataclass(frozen=True)
class MemorySeen:
    """What the inputs observed of memory: the device series, the KV pool's, and each device's
    capacity (``(node, device)``; ``analysis.prepare``'s capacities)."""

    memory: SeriesIndex
    kv: SeriesIndex
    capacities: dict[tuple[str, int | None], int]


def unexplained_deaths(
    events: pl.DataFrame,
    incidents: list[Incident] | tuple[Incident, ...],
    window_s: float,
    seen: MemorySeen | None = None,
) -> tuple[str, ...]:
    """One line per death no incident explains, in time (else log) order, with the memory the
    inputs last saw before it (``seen``) where they saw any within a window."""
    window = timedelta(seconds=window_s)
    dead = events.with_row_index("order").filter(pl.col("kind") == "engine_dead")
    xid_rows = events.filter((pl.col("kind") == "xid") & pl.col("ts").is_not_null())
    xids = [(t, str(d)) for t, d in xid_rows.select("ts", "detail").rows()]
    failures = events.filter(pl.col("kind").is_in(FAILURES) & pl.col("ts").is_not_null())
    stated = [(str(n), t) for n, t in failures.select("node", "ts").rows()]
    out: list[str] = []
    reported: dict[str, datetime | None] = {}  # each node's last death reported
    for row in dead.iter_rows(named=True):  # deaths are a handful: one per restart
        node, ts = str(row["node"]), row["ts"]
        if _explained(node, ts, incidents, window) or any(
            n == node and ts is not None and abs(t - ts) <= window for n, t in stated
        ):
            continue
        if node in reported:
            previous = reported[node]
            # without times the statements cannot be told apart: one death
            if ts is None or previous is None or ts - previous <= window:
                continue
        reported[node] = ts
        when = (
            f"at {iso_time(ts, 3, sep=' ', zone=' UTC')}"
            if ts is not None
            else "(no time: the input prints none; its death is row "
            f"{int(row['order']) + 1} of {events.height} in the log's order)"
        )
        if host_killed(row.get("detail")):
            # the kernel's own line says what it killed; the shell's "Killed" only that it was
            why = HOST_KILLED if row.get("detail") == SHELL_KILL else str(row["detail"])
            out.append(f"the engine on {node} was killed {when}: {why}")
            continue
        what = f" ({row['detail']})" if row.get("detail") else ""
        fault = _gpu_fault(ts, xids, window)
        figures = _last_figures(seen, node, row.get("device"), ts, window) if seen else None
        said = fault or NOT_SAID
        if figures:
            said += f"; {figures}"
        out.append(f"the engine on {node} died {when}{what}; {said}")
    return tuple(out)


def _gpu_fault(
    ts: datetime | None, xids: list[tuple[datetime, str]], window: timedelta
) -> str | None:
    """The driver's Xid report nearest a death within ``window`` (the kernel log's account of a
    GPU fault: an illegal memory access, a GPU fallen off the bus), in words."""
    if ts is None:
        return None
    near = [(abs(t - ts), t, d) for t, d in xids if abs(t - ts) <= window]
    if not near:
        return None
    _, t, detail = min(near)
    gap = (ts - t).total_seconds()
    side = f"{gap:.0f} s before it" if gap >= 0 else f"{-gap:.0f} s after it"
    return (
        f"the driver reported a GPU fault {side}: {detail} (a fault of the GPU, its driver or a "
        "kernel's memory access, not a lack of memory: the Xid's number says which)"
    )


def _last_figures(
    seen: MemorySeen, node: str, device: int | None, ts: datetime | None, window: timedelta
) -> str | None:
    """The device memory in use and the KV pool's fill the inputs last saw within a window
    before the death, in words (what can be said where no line says why it died)."""
    if ts is None:
        return None
    parts: list[str] = []
    used = seen.memory.at(seen.memory.find("device_used_bytes", node, device), ts, window)
    if used is not None:
        capacity = seen.capacities.get((node, used.get("device")))
        of = f" of {format_bytes(capacity)}" if capacity else ""
        parts.append(
            f"device memory in use was {format_bytes(round(float(used['value'])))}{of} at "
            f"{used['ts']:%H:%M:%S}"
        )
    kv = seen.kv.at(seen.kv.find("kv_used", node), ts, window)
    if kv is not None and kv.get("ratio") is not None:
        parts.append(f"the KV cache was {float(kv['ratio']):.1%} full at {kv['ts']:%H:%M:%S}")
    if not parts:
        return None
    return "before it " + " and ".join(parts) + " (the last figures the inputs hold)"


def _explained(
    node: str,
    ts: datetime | None,
    incidents: list[Incident] | tuple[Incident, ...],
    window: timedelta,
) -> bool:
    for incident in incidents:
        if incident.node != node:
            continue
        if incident.peak_ts is None or ts is None:
            return True
        if incident.peak_ts - window <= ts <= incident.peak_ts + window:
            return True
    return False
