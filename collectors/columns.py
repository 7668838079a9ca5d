"""Column-wise containers for what :func:`collectors.segments.read_capture` returns.

Parallel lists, one per column, rather than one object per row: a six-hour capture holds
millions of samples, and the analyzer builds a frame from a dict of lists in one call
(``pl.DataFrame(result.samples.as_dict())``). Column names are the canonical table's
(``oomtrace.schema``), except that time is ``ts_ns``: integer nanoseconds since the Unix epoch,
UTC.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from itertools import pairwise
from typing import Any

EVENT_BYTE_FIELDS = (
    "requested_bytes",
    "total_bytes",
    "free_bytes",
    "allocated_bytes",
    "reserved_unallocated_bytes",
    "process_bytes",
)


def _reorder(container: Any, key: list[int]) -> None:
    """Sort every list column of a dataclass by ``key`` (stable), skipping sorted input."""
    if all(a <= b for a, b in pairwise(key)):
        return
    order = sorted(range(len(key)), key=key.__getitem__)
    for column in fields(container):
        values = getattr(container, column.name)
        setattr(container, column.name, [values[i] for i in order])


@dataclass
class SampleColumns:
    """Canonical ``samples`` rows. ``lower_bound`` marks a peak value that is only a lower bound
    (not a canonical column: see FORMAT.md, PyTorch hook peaks)."""

    ts_ns: list[int] = field(default_factory=list)
    node: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    device: list[int | None] = field(default_factory=list)
    pid: list[int | None] = field(default_factory=list)
    metric: list[str] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    lower_bound: list[bool] = field(default_factory=list)

    def add_group(
        self,
        ts_ns: int,
        node: str,
        source: str,
        device: int | None,
        pid: int | None,
        metrics: Mapping[str, float | int],
        *,
        lower_bound: Collection[str] = (),
    ) -> None:
        for metric, value in metrics.items():
            self.ts_ns.append(int(ts_ns))
            self.node.append(node)
            self.source.append(source)
            self.device.append(device)
            self.pid.append(pid)
            self.metric.append(metric)
            self.value.append(float(value))
            self.lower_bound.append(metric in lower_bound)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def sort(self) -> None:
        _reorder(self, self.ts_ns)

    def as_dict(self) -> dict[str, list[Any]]:
        """The canonical columns (``ts_ns`` for ``ts``), ready for a frame constructor."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lower_bound"}


@dataclass
class EventColumns:
    """Canonical ``events`` rows (OOMs from the PyTorch hook, source gaps)."""

    ts_ns: list[int] = field(default_factory=list)
    node: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    device: list[int | None] = field(default_factory=list)
    pid: list[int | None] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    requested_bytes: list[int | None] = field(default_factory=list)
    total_bytes: list[int | None] = field(default_factory=list)
    free_bytes: list[int | None] = field(default_factory=list)
    allocated_bytes: list[int | None] = field(default_factory=list)
    reserved_unallocated_bytes: list[int | None] = field(default_factory=list)
    process_bytes: list[int | None] = field(default_factory=list)
    detail: list[str | None] = field(default_factory=list)

    def add(self, node: str, record: Mapping[str, Any]) -> None:
        self.ts_ns.append(int(record["ts"]))
        self.node.append(node)
        self.source.append(str(record["src"]))
        self.device.append(record.get("dev"))
        self.pid.append(record.get("pid"))
        self.kind.append(str(record["kind"]))
        for name in EVENT_BYTE_FIELDS:
            getattr(self, name).append(record.get(name))
        self.detail.append(record.get("detail"))

    def __len__(self) -> int:
        return len(self.ts_ns)

    def sort(self) -> None:
        _reorder(self, self.ts_ns)

    def as_dict(self) -> dict[str, list[Any]]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class PromScrapes:
    """Filtered exposition text of one target, with the scrape start time and its duration.
    ``info`` marks a text holding only ``cache_config_info`` (written once and on change)."""

    ts_ns: list[int] = field(default_factory=list)
    duration_ns: list[int] = field(default_factory=list)
    node: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    info: list[bool] = field(default_factory=list)

    def add(
        self, ts_ns: int, duration_ns: int, node: str, source: str, text: str, info: bool
    ) -> None:
        self.ts_ns.append(int(ts_ns))
        self.duration_ns.append(int(duration_ns))
        self.node.append(node)
        self.source.append(source)
        self.text.append(text)
        self.info.append(info)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def sort(self) -> None:
        _reorder(self, self.ts_ns)


@dataclass
class LogLines:
    """Redacted lines of one followed path, each with its arrival time. ``backlog`` marks lines
    that were already in the file when the collector (re)opened it: their ``ts_ns`` is when they
    were read, an upper bound on when they were written. ``device_inode`` and ``generation``
    identify the file the line was read from (a rotation changes them)."""

    ts_ns: list[int] = field(default_factory=list)
    node: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    device_inode: list[tuple[int, int]] = field(default_factory=list)
    generation: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    backlog: list[bool] = field(default_factory=list)

    def add_chunk(self, node: str, record: Mapping[str, Any]) -> None:
        ident = (int(record["dev"]), int(record["ino"]))
        lines = record["lines"]
        if not isinstance(lines, list):
            raise TypeError("'lines' is not a list")
        for line in lines:
            self.ts_ns.append(int(record["ts"]))
            self.node.append(node)
            self.source.append(str(record["src"]))
            self.device_inode.append(ident)
            self.generation.append(int(record.get("gen", 0)))
            self.text.append(str(line))
            self.backlog.append(bool(record.get("bl")))

    def __len__(self) -> int:
        return len(self.ts_ns)

    def sort(self) -> None:
        _reorder(self, self.ts_ns)
