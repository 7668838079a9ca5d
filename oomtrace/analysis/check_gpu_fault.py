"""A GPU fault: the NVIDIA driver's Xid report (the kernel log read beside the engine's, or
DCGM's Xid gauge) is an incident of its own, whether or not the engine's log says it died.

An Xid is the driver saying the GPU, its memory, its link or a kernel running on it failed; it is
never a lack of memory, and the remedy is not a memory setting. What each number means and what
to do about it follows NVIDIA's Xid catalogue ("Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, and its resolution
buckets: restart the application, reset the GPU, drain the node and have it serviced), and
NVIDIA's dynamic page retirement notes for the ECC numbers
(https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html):

* 13, 31, 43, 45: a fault of the work running on the GPU (an illegal address, an MMU fault, a
  channel stopped or torn down after one): most often a kernel's bug or a bad input, restart
  the application; the same fault again on the same GPU with another workload points at the
  GPU or the driver;
* 48, 63, 64, 92, 94, 95: the GPU's memory (a double-bit ECC error, a row or page to remap or
  retire): reset the GPU, read its retired pages and remapped rows (``nvidia-smi -q -d
  PAGE_RETIREMENT,ROW_REMAPPER``), drain it when they keep coming;
* 79: the GPU fell off the bus (PCIe): drain the node, reset or reboot, check its power,
  cooling and PCIe seating, and the driver's version;
* 119, 120: the GSP firmware stopped answering: reset the GPU, update the driver;
* 74: NVLink: reset the GPU, check its links (``nvidia-smi nvlink -s``).

Any other number is told as an Xid with the catalogue to read. The figures (``xid``, ``pci_bus``)
are what the remedy reads.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final

import polars as pl

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.check_context import Context
from oomtrace.analysis.evidence import Evidence
from oomtrace.analysis.findings import ClassCheck
from oomtrace.analysis.timeline import lit_ts
from oomtrace.units import format_bytes

CATALOGUE: Final = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
_NUMBER: Final = re.compile(
    r"\bXid (\d+)(?: on the GPU at ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?))?"
)

# Xid number -> (what failed, in words; what a person does about it)
_APPLICATION = (
    "a fault of the work running on the GPU (an illegal memory access or a kernel's error)",
    (
        "restart the engine; if the same Xid comes back on this GPU with other work, drain it "
        "and check the driver and the GPU"
    ),
)
_MEMORY = (
    "an error in the GPU's own memory (ECC)",
    (
        "reset the GPU (or reboot the node) before serving on it again; read its retired pages "
        "and remapped rows (nvidia-smi -q -d PAGE_RETIREMENT,ROW_REMAPPER) and drain it for "
        "service if they keep coming"
    ),
)
_GSP = (
    "the GPU's firmware (GSP) stopped answering",
    "reset the GPU (or reboot the node); update the driver if it recurs",
)
FAULTS: Final[dict[int, tuple[str, str]]] = {
    13: _APPLICATION,
    31: (
        "a GPU memory page fault (MMU fault): a kernel touched an address it does not own",
        _APPLICATION[1],
    ),
    43: ("the GPU stopped a channel after a fault of the work on it", _APPLICATION[1]),
    45: ("the driver tore the work's channels down after another error", _APPLICATION[1]),
    48: ("an uncorrectable double-bit ECC error in the GPU's memory", _MEMORY[1]),
    63: ("a memory row or page marked for remapping or retirement (ECC)", _MEMORY[1]),
    64: ("a memory row or page that could not be remapped or retired (ECC)", _MEMORY[1]),
    92: ("a high rate of corrected ECC errors in the GPU's memory", _MEMORY[1]),
    94: ("a contained uncorrectable ECC error in the GPU's memory", _MEMORY[1]),
    95: ("an uncontained uncorrectable ECC error in the GPU's memory", _MEMORY[1]),
    74: (
        "an NVLink error",
        (
            "reset the GPU (or reboot the node) and check its links (nvidia-smi nvlink -s); "
            "drain it for service if the errors keep coming"
        ),
    ),
    79: (
        "the GPU fell off the bus (PCIe) and answers no commands",
        (
            "drain the node and reset the GPU or reboot; check its power supply, cooling and "
            "PCIe seating, and the driver's version, before serving on it again"
        ),
    ),
    119: _GSP,
    120: _GSP,
}

# The numbers by how grave a fault they tell, least grave first (:func:`severity`): the work's
# faults, links and firmware, memory, the bus.
GRAVEST_LAST: Final[tuple[frozenset[int], ...]] = (
    frozenset({13, 31, 43, 45}),
    frozenset({74, 119, 120}),
    frozenset({48, 63, 64, 92, 94, 95}),
    frozenset({79}),
)


def xid_number(detail: object) -> tuple[int | None, str | None]:
    """The Xid's number and the GPU's PCI address in an ``xid`` event's detail (``Xid 79 on the
    GPU at 0000:3b:00: ...``; DCGM's gauge gives ``Xid 79`` alone)."""
    found = _NUMBER.search(str(detail or ""))
    return (int(found.group(1)), found.group(2)) if found else (None, None)


def what_failed(number: int | None) -> tuple[str, str]:
    """What the Xid says failed and what to do, from the catalogue (see the module docstring)."""
    if number is not None and number in FAULTS:
        return FAULTS[number]
    return (
        "a GPU fault the driver reported",
        (
            f"look the Xid up in NVIDIA's Xid catalogue ({CATALOGUE}) for its action; reset the "
            "GPU before serving on it again if it stopped the engine"
        ),
    )


def severity(event: dict[str, Any] | None) -> int:
    """How grave an Xid report is, for choosing the one that tells a chain's fault: the GPU lost
    from the bus, then its memory's errors, its firmware and links, then the work's faults, then
    any other number (:data:`GRAVEST_LAST`)."""
    number, _ = xid_number((event or {}).get("detail"))
    for grade, numbers in enumerate(GRAVEST_LAST):
        if number in numbers:
            return grade + 1
    return 0


def fault_check(
    event: dict[str, Any], more: tuple[str, ...] = (), rows: tuple[Evidence, ...] = ()
) -> ClassCheck:
    """The ``gpu_fault`` an Xid report tells by itself (its number, its GPU, what failed), with
    ``more`` said and ``rows`` cited beside it (a death, the memory in use)."""
    number, bus = xid_number(event.get("detail"))
    what, _ = what_failed(number)
    label = f"Xid {number}" if number is not None else "an Xid"
    where = f" on the GPU at {bus}" if bus else ""
    return ClassCheck(
        "gpu_fault",
        True,
        "; ".join((f"the driver reported {label}{where}: {what}, not a lack of memory", *more)),
        (ev.event(event), *rows),
        (("xid", number), ("pci_bus", bus)),
    )


def gpu_fault(ctx: Context) -> ClassCheck:
    """The incident is the driver's Xid report it is anchored on (``ctx.anchor == "xid"``)."""
    event = ctx.event
    if ctx.anchor != "xid" or event is None:
        return ClassCheck("gpu_fault", False, "no Xid report of the driver anchors the incident")
    parts: list[str] = []
    rows: list[Evidence] = []
    died = _death_after(ctx, event["ts"])
    if died is not None:
        gap = (died["ts"] - event["ts"]).total_seconds()
        parts.append(
            f"the engine died {gap:.0f} s after it"
            if gap >= 0
            else f"the engine died {-gap:.0f} s before it (the driver's report came late)"
        )
        rows.append(ev.event(died))
    used = _memory_at(ctx, event["ts"])
    if used is not None:
        value, row = used
        of = f" of {format_bytes(ctx.capacity)}" if ctx.capacity else ""
        parts.append(f"device memory in use was {format_bytes(value)}{of} just before it")
        rows.append(ev.sample(row))
    return fault_check(event, tuple(parts), tuple(rows))


def _death_after(ctx: Context, ts: datetime) -> dict[str, Any] | None:
    """The engine's death nearest the fault within the window."""
    near = ctx.events.filter(
        (pl.col("kind") == "engine_dead")
        & pl.col("ts").is_between(lit_ts(ts - ctx.window), lit_ts(ts + ctx.window))
    )
    if near.is_empty():
        return None
    nearest = near.with_columns(_gap=(pl.col("ts") - lit_ts(ts)).abs()).sort("_gap").drop("_gap")
    return nearest.row(0, named=True)


def _memory_at(ctx: Context, ts: datetime) -> tuple[int, dict[str, object]] | None:
    """Device memory in use at the fault (the last sample before it, within the window)."""
    series = ctx.memory.find("device_used_bytes", ctx.node, ctx.device)
    row = ctx.memory.at(series, ts, ctx.window)
    if row is None:
        return None
    return round(float(row["value"])), row
