"""The NVIDIA driver's Xid reports in the kernel's log (``dmesg``, ``journalctl -k``, a syslog),
read beside a failure: a GPU fault that kills or hangs the engine is not a lack of memory, and
the report must not take one for the other.

The kernel module (``NVRM``) prints each error as ``NVRM: Xid (PCI:0000:0a:00): 31, pid=13332,
name=python, Ch 00000010, intr 00000000. MMU Fault: ...``: the GPU's PCI address (domain, bus,
device; the function is 0), the Xid number, and where the driver knows it the process that ran
on the faulting channel (``pid='<unknown>'`` where it does not; NVIDIA's Xid catalogue names
each number: 13 and 31 an application's fault, 43 a stopped channel, 45 a channel torn down
after another error, 48 and 63/64/94/95 memory ECC, 79 the GPU fallen off the bus, 119/120 the
GSP firmware). A GPU that falls off the bus is also printed without an Xid: ``NVRM: GPU at
0000:01:00.0 has fallen off the bus.`` (older drivers) or, from the 570 drivers, over three lines,
``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this system
has`` / ``NVRM: fallen off the bus and is not responding to commands.``: read as Xid 79
(https://github.com/NVIDIA/NVSentinel/issues/155). A fall that a log prints twice is one event.

Each becomes an ``xid`` event (``oomtrace/schema.py``) with the process's pid where the driver
names one and, in its detail, ``Xid N`` (the form DCGM's gauge gives, read by the Prometheus
parser), the GPU's address and the driver's words. The GPU is named by its PCI address
(``device_ref``): an input of the incident that ties addresses to indexes (nvidia-smi, DCGM)
places it.
"""

from __future__ import annotations

from typing import Final

import polars as pl

_BUS: Final = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?"
XID: Final = (
    r"NVRM: Xid \((?:PCI:)?(?P<bus>" + _BUS + r")\): (?P<xid>\d+),"
    r"(?: pid=(?P<pid>'?[^,]*?'?), name=(?P<name>[^,]*),)?\s*(?P<words>.*)"
)
# The GPU a fall-off-the-bus report names: on its own line (570 and later) or on the fall's.
_NAMED: Final = r"NVRM: (?:The NVIDIA GPU|GPU at) (?:PCI:)?(" + _BUS + r")"
_FELL: Final = r"fallen off the bus"
FALLEN_OFF: Final = 79
# What the pytorch-log parser keeps and sniffs for.
LINE: Final = r"NVRM: Xid \(|NVRM: (?:The NVIDIA GPU|GPU at) |NVRM: fallen off the bus"
_WORDS_MAX: Final = 160
# A kernel line's start where no time precedes it (``kernel: NVRM: ...``, ``NVRM: ...``).
RECORD_START: Final = r"^(?:kernel: )?NVRM: "


def events(lines: pl.DataFrame) -> pl.DataFrame:
    """The Xid reports among ``lines`` (``ts``, ``text``, in the log's order) as ``xid``
    events with ``device_ref`` (the GPU's PCI address)."""
    relevant = lines.filter(pl.col("text").str.contains(LINE))
    if relevant.height == 0:
        return pl.DataFrame()
    found = [f for f in (_numbered(relevant), _fallen(relevant)) if f.height]
    return pl.concat(found, how="vertical_relaxed") if found else pl.DataFrame()


def _address(bus: pl.Expr) -> pl.Expr:
    """The kernel's ``0000:0a:00`` as the bus id nvidia-smi prints, ``00000000:0A:00.0``."""
    upper = bus.str.to_uppercase()
    full = pl.when(upper.str.contains(r"\.[0-9A-F]$")).then(upper).otherwise(upper + ".0")
    return pl.when(full.str.contains(r"^[0-9A-F]{4}:")).then(pl.lit("0000") + full).otherwise(full)


def _numbered(lines: pl.DataFrame) -> pl.DataFrame:
    found = (
        lines.with_columns(f=pl.col("text").str.extract_groups(XID))
        .unnest("f")
        .filter(pl.col("xid").is_not_null())
    )
    if found.height == 0:
        return pl.DataFrame()
    pid = pl.col("pid").str.strip_chars("'").cast(pl.Int64, strict=False)
    name = pl.col("name").str.strip_chars()
    process = (
        pl.when(pid.is_not_null())
        .then(pl.format(", process {} ({})", pid, name))
        .otherwise(pl.lit(""))
    )
    words = pl.col("words").str.strip_chars().str.slice(0, _WORDS_MAX)
    return found.select(
        "ts",
        pid=pid,
        device_ref=_address(pl.col("bus")),
        kind=pl.lit("xid"),
        detail=pl.format("Xid {} on the GPU at {}{}: ", "xid", "bus", process) + words,
    )


def _fallen(lines: pl.DataFrame) -> pl.DataFrame:
    """A GPU fallen off the bus with no Xid line: once per GPU."""
    named = lines.with_columns(
        bus=pl.col("text").str.extract(_NAMED, 1).forward_fill(limit=3)
    ).filter(
        pl.col("text").str.contains(_FELL)
        & ~pl.col("text").str.contains(r"NVRM: Xid \(")
        & pl.col("bus").is_not_null()
    )
    if named.height == 0:
        return pl.DataFrame()
    return named.unique("bus", keep="first", maintain_order=True).select(
        "ts",
        pid=pl.lit(None, pl.Int64),
        device_ref=_address(pl.col("bus")),
        kind=pl.lit("xid"),
        detail=pl.format(
            "Xid {} on the GPU at {}: the GPU has fallen off the bus and answers no commands "
            "(a hardware, power or PCIe fault, not a lack of memory)",
            pl.lit(FALLEN_OFF),
            "bus",
        ),
    )
