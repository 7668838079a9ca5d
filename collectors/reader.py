"""Read a capture directory back: every intact record, grouped for the analyzer, plus what could
not be read and why (torn tails, damaged lines, files skipped, gaps).

Standard library only, so the reader also runs beside the agent. The analyzer's ingest adapter
turns :attr:`CaptureReadResult.samples` and ``.events`` (already canonical, column-wise) into
frames directly, and hands ``.prometheus`` (exposition text with its scrape time) and ``.logs``
(redacted lines with their arrival time) to its Prometheus and log parsers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from collectors.columns import EventColumns, LogLines, PromScrapes, SampleColumns
from collectors.format import FORMAT_VERSION, SUFFIX, DecodeError, Header, Record, decode
from collectors.vllm_plugin import records as vllm_records
from collectors.vllm_plugin.columns import VllmRecords

DiagnosticKind = Literal[
    "torn_tail",
    "corrupt_record",
    "unknown_record",
    "skipped_file",
    "dropped_records",
    "unresolved_repeat",
    "newer_plugin",
    "long_log_line",
]
HEALTH_METRICS = {
    "up": "collector_up",
    "samples": "collector_samples_total",
    "errors": "collector_errors_total",
    "misses": "collector_deadline_misses_total",
}


@dataclass(frozen=True)
class Diagnostic:
    """Something in the directory that could not be read in full."""

    kind: DiagnosticKind
    file: str
    detail: str
    count: int = 1


@dataclass(frozen=True)
class Gap:
    """A stretch of time for which one source has no data, and why."""

    node: str
    source: str
    target: str
    start_ns: int
    end_ns: int | None
    reason: str
    attempts: int = 0


@dataclass(frozen=True)
class LogRotation:
    ts_ns: int
    node: str
    path: str
    how: str
    detail: str


@dataclass(frozen=True)
class Info:
    """A sticky description (device inventory, hook settings) as its source wrote it."""

    ts_ns: int
    node: str
    source: str
    data: dict[str, Any]


@dataclass(frozen=True)
class SegmentInfo:
    file: str
    header: Header
    records: int
    first_ts_ns: int | None
    last_ts_ns: int | None
    closed_cleanly: bool
    torn_bytes: int


@dataclass(frozen=True)
class CaptureReadResult:
    """Everything read from one capture directory, each group in time order."""

    directory: str
    segments: tuple[SegmentInfo, ...]
    samples: SampleColumns
    events: EventColumns
    prometheus: dict[str, PromScrapes]
    logs: dict[str, LogLines]
    gaps: tuple[Gap, ...]
    rotations: tuple[LogRotation, ...]
    infos: tuple[Info, ...]
    diagnostics: tuple[Diagnostic, ...]
    # what the vLLM plugin recorded inside the engine (empty without it)
    vllm: VllmRecords = field(default_factory=VllmRecords)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({s.header.node for s in self.segments}))


@dataclass
class _Builder:
    samples: SampleColumns = field(default_factory=SampleColumns)
    events: EventColumns = field(default_factory=EventColumns)
    prometheus: dict[str, PromScrapes] = field(default_factory=dict)
    logs: dict[str, LogLines] = field(default_factory=dict)
    gaps: dict[tuple[str, str, str, int], Gap] = field(default_factory=dict)
    rotations: list[LogRotation] = field(default_factory=list)
    infos: dict[tuple[str, str, int, str], Info] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    segments: list[SegmentInfo] = field(default_factory=list)
    seen_info: set[tuple[str, int, str]] = field(default_factory=set)
    vllm: VllmRecords = field(default_factory=VllmRecords)


def read_capture(directory: str | Path) -> CaptureReadResult:
    """Read every segment in ``directory`` (never raises for damaged content: see diagnostics).

    Raises ``FileNotFoundError``/``NotADirectoryError`` only when ``directory`` itself is missing.
    """
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a capture directory")
    builder = _Builder()
    for path in sorted(root.glob(f"*{SUFFIX}")):
        _read_segment(path, builder)
    _agent_down_gaps(builder)
    gaps = sorted(builder.gaps.values(), key=lambda g: (g.start_ns, g.source))
    for gap in gaps:
        builder.events.add(gap.node, gap_event(gap))
    for scrapes in builder.prometheus.values():
        scrapes.sort()
    for lines in builder.logs.values():
        lines.sort()
    builder.samples.sort()
    builder.events.sort()
    return CaptureReadResult(
        directory=str(root),
        segments=tuple(builder.segments),
        samples=builder.samples,
        events=builder.events,
        prometheus=builder.prometheus,
        logs=builder.logs,
        gaps=tuple(gaps),
        rotations=tuple(sorted(builder.rotations, key=lambda r: r.ts_ns)),
        infos=tuple(sorted(builder.infos.values(), key=lambda i: (i.ts_ns, i.source))),
        diagnostics=tuple(builder.diagnostics),
        vllm=builder.vllm,
    )


def gap_event(gap: Gap) -> Record:
    """A gap as a canonical ``source_gap`` event (a record in the ``e`` layout)."""
    if gap.end_ns is None:
        length = "until the end of the capture"
    else:
        length = f"for {(gap.end_ns - gap.start_ns) / 1e9:.3f} s"
    where = f"{gap.source} ({gap.target})" if gap.target else gap.source
    return {
        "ts": gap.start_ns,
        "src": gap.source,
        "kind": "source_gap",
        "detail": f"{where}: no data {length}: {gap.reason}",
    }


def _read_segment(path: Path, out: _Builder) -> None:
    try:
        data = path.read_bytes()
    except OSError as err:
        out.diagnostics.append(Diagnostic("skipped_file", path.name, f"cannot read: {err}"))
        return
    lines = data.split(b"\n")
    tail = lines.pop()  # bytes after the last newline: a torn record, or b""
    header = _header(path, lines[0] if lines else tail, out)
    if header is None:
        return
    state = _SegmentState(path.name, header)
    for number, line in enumerate(lines[1:], start=2):
        try:
            record = decode(line)
        except DecodeError as err:
            state.corrupt += 1
            state.first_corrupt = state.first_corrupt or f"line {number}: {err}"
            continue
        state.add(record, out)
    if state.corrupt:
        out.diagnostics.append(
            Diagnostic("corrupt_record", path.name, state.first_corrupt, state.corrupt)
        )
    if state.refused:
        version, count = state.refused
        out.diagnostics.append(
            Diagnostic(
                "newer_plugin",
                path.name,
                f"vLLM plugin records of version {version}, newer than this reader "
                f"({vllm_records.RECORD_VERSION}): {count} skipped; upgrade oomtrace",
                count,
            )
        )
    for log_path, count in sorted(state.cut_lines.items()):
        out.diagnostics.append(
            Diagnostic(
                "long_log_line",
                path.name,
                f"{count} line(s) of {log_path} longer than the log tail reads at once (8 MiB) "
                "were dropped, never stored",
                count,
            )
        )
    for kind, count in sorted(state.unknown.items()):
        out.diagnostics.append(
            Diagnostic("unknown_record", path.name, f"record kind {kind!r} not understood", count)
        )
    if tail:
        out.diagnostics.append(
            Diagnostic(
                "torn_tail",
                path.name,
                f"last {len(tail)} bytes are an unfinished record (writer stopped mid-write)",
            )
        )
    out.segments.append(
        SegmentInfo(
            path.name, header, state.records, state.first_ts, state.last_ts, state.closed, len(tail)
        )
    )


def _header(path: Path, first: bytes, out: _Builder) -> Header | None:
    try:
        header = Header.from_record(decode(first))
    except DecodeError as err:
        reason = "empty file" if not first else f"no valid header ({err})"
        out.diagnostics.append(Diagnostic("skipped_file", path.name, reason))
        return None
    if header.version > FORMAT_VERSION:
        out.diagnostics.append(
            Diagnostic(
                "skipped_file",
                path.name,
                f"format version {header.version} is newer than this reader "
                f"({FORMAT_VERSION}); upgrade oomtrace",
            )
        )
        return None
    return header


class _SegmentState:
    """Per-file state: counts, and the last Prometheus text per target for ``same`` records."""

    def __init__(self, name: str, header: Header) -> None:
        self.name, self.header = name, header
        self.records = self.corrupt = 0
        self.first_corrupt = ""
        self.unknown: dict[str, int] = {}
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.closed = False
        self.last_text: dict[tuple[str, str], str] = {}
        # (record version, records skipped) when the vLLM plugin wrote a layout we do not know
        self.refused: tuple[int, int] | None = None
        self.cut_lines: dict[str, int] = {}

    def add(self, record: Record, out: _Builder) -> None:
        kind = record["k"]
        handler = _HANDLERS.get(kind)
        if handler is None:
            self.unknown[kind] = self.unknown.get(kind, 0) + 1
            return
        self.records += 1
        ts = record.get("ts")
        if isinstance(ts, int):
            self.first_ts = ts if self.first_ts is None else self.first_ts
            self.last_ts = ts
        self.closed = kind == "close" and record.get("why") != "rotate"
        try:
            handler(self, record, out)
        except (KeyError, TypeError, ValueError) as err:
            self.records -= 1
            self.corrupt += 1
            self.first_corrupt = self.first_corrupt or f"{kind} record lacks a field: {err}"


def _on_sample(state: _SegmentState, rec: Record, out: _Builder) -> None:
    out.samples.add_group(
        rec["ts"],
        state.header.node,
        rec["src"],
        rec.get("dev"),
        rec.get("pid"),
        rec["m"],
        lower_bound=rec.get("lb", ()),
    )


def _on_event(state: _SegmentState, rec: Record, out: _Builder) -> None:
    out.events.add(state.header.node, rec)


def _on_prom(state: _SegmentState, rec: Record, out: _Builder) -> None:
    key = (rec["src"], rec["url"])
    if rec.get("same"):
        text = state.last_text.get(key)
        if text is None:
            out.diagnostics.append(
                Diagnostic("unresolved_repeat", state.name, "'same' scrape without a predecessor")
            )
            return
    else:
        text = str(rec["text"])
        if rec.get("info"):
            # Sticky: the same record starts every segment; keep it once.
            if (rec["url"], rec["ts"], text) in out.seen_info:
                return
            out.seen_info.add((rec["url"], rec["ts"], text))
        else:
            state.last_text[key] = text
    scrapes = out.prometheus.setdefault(rec["url"], PromScrapes())
    scrapes.add(
        rec["ts"], rec.get("dur", 0), state.header.node, rec["src"], text, bool(rec.get("info"))
    )


def _on_log(state: _SegmentState, rec: Record, out: _Builder) -> None:
    lines = out.logs.setdefault(rec["path"], LogLines())
    lines.add_chunk(state.header.node, rec)
    if rec.get("cut"):
        state.cut_lines[rec["path"]] = state.cut_lines.get(rec["path"], 0) + int(rec["cut"])


def _on_rotation(state: _SegmentState, rec: Record, out: _Builder) -> None:
    out.rotations.append(
        LogRotation(rec["ts"], state.header.node, rec["path"], rec["how"], rec.get("detail", ""))
    )


def _on_gap(state: _SegmentState, rec: Record, out: _Builder) -> None:
    key = (state.header.node, rec["src"], rec.get("target", ""), rec["ts"])
    previous = out.gaps.get(key)
    if previous is not None and previous.end_ns is not None and rec.get("end") is None:
        return
    out.gaps[key] = Gap(
        key[0], key[1], key[2], rec["ts"], rec.get("end"), rec["reason"], rec.get("attempts", 0)
    )


def _on_health(state: _SegmentState, rec: Record, out: _Builder) -> None:
    values = {metric: rec[field_] for field_, metric in HEALTH_METRICS.items() if field_ in rec}
    out.samples.add_group(rec["ts"], state.header.node, rec["src"], None, None, values)


def _on_info(state: _SegmentState, rec: Record, out: _Builder) -> None:
    data = rec["data"]
    key = (state.header.node, rec["src"], rec["ts"], repr(sorted(data.items())))
    out.infos[key] = Info(rec["ts"], state.header.node, rec["src"], data)
    if data.get("plugin") == vllm_records.PLUGIN_NAME:
        version = int(data.get("record_version", 1))
        if version > vllm_records.RECORD_VERSION:
            state.refused = (version, 0)
        elif rec["src"] == vllm_records.ENGINE_SOURCE:
            out.vllm.engines[state.header.stream] = dict(data)


def _on_drop(state: _SegmentState, rec: Record, out: _Builder) -> None:
    why = rec.get("why") or "the writer dropped records (disk too slow or full)"
    out.diagnostics.append(Diagnostic("dropped_records", state.name, str(why), int(rec["n"])))


def _on_vllm(state: _SegmentState, rec: Record, out: _Builder) -> None:
    if state.refused is not None:
        state.refused = (state.refused[0], state.refused[1] + 1)
        return
    out.vllm.add(state.header.node, state.header.stream, rec)


def _on_nothing(state: _SegmentState, rec: Record, out: _Builder) -> None:
    """``close`` records only mark a clean end (counted by the caller)."""


_HANDLERS = {
    "s": _on_sample,
    "e": _on_event,
    "prom": _on_prom,
    "log": _on_log,
    "rot": _on_rotation,
    "gap": _on_gap,
    "health": _on_health,
    "info": _on_info,
    "drop": _on_drop,
    "close": _on_nothing,
    **dict.fromkeys(vllm_records.KINDS, _on_vllm),
}


def _agent_down_gaps(out: _Builder) -> None:
    """Between two agent processes of a node nothing was sampled: say so, and whether the
    earlier one stopped cleanly or was killed."""
    runs: dict[tuple[str, str], list[tuple[int, int, int, bool]]] = {}
    for seg in out.segments:
        if seg.header.writer == "agent" and seg.first_ts_ns and seg.last_ts_ns:
            span = (seg.header.seq, seg.first_ts_ns, seg.last_ts_ns, seg.closed_cleanly)
            runs.setdefault((seg.header.node, seg.header.stream), []).append(span)
    by_node: dict[str, list[tuple[int, int, bool]]] = {}
    for (node, _), spans in runs.items():
        spans.sort()
        by_node.setdefault(node, []).append((spans[0][1], spans[-1][2], spans[-1][3]))
    for node, runs_of_node in by_node.items():
        runs_of_node.sort()
        for (_, end, clean), (start, _, _) in pairwise(runs_of_node):
            if start > end:
                how = "stopped" if clean else "ended without closing (killed or crashed)"
                out.gaps[(node, "collector", "", end)] = Gap(
                    node, "collector", "", end, start, f"collector not running: previous run {how}"
                )
