"""Turn what a server left behind into one canonical trace.

``ingest_paths`` sniffs each input's format (or takes ``--format``), runs its parser, and merges
everything of one incident into one :class:`~oomtrace.trace.Trace`. ``load_any`` is what the
analysis commands call: a trace directory is read as it is, anything else is ingested on the fly.

Directories are expanded (sorted, hidden files and documentation skipped). A file named on the
command line that no parser recognises is an error; one found inside a directory is recorded as
a gap and skipped, so that a folder of mixed files still gives a trace.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError, UsageError
from oomtrace.ingest.base import ClockOptions, ParseContext, Parser, ParseResult, registry
from oomtrace.ingest.capture import PARSER as _CAPTURE
from oomtrace.ingest.capture import is_capture_dir
from oomtrace.ingest.textio import InputFile
from oomtrace.schema import TABLES, TableName, conform
from oomtrace.trace import Manifest, Trace, is_trace_dir, read_trace

log = logging.getLogger(__name__)

SNIFF_THRESHOLD = 0.5
CAPTURE_PARSER = _CAPTURE.name
# Files in an incident folder that are documentation or model files, not telemetry.
_NOT_TELEMETRY = (
    "readme*",
    "*.md",
    "*.toml",
    "*.png",
    "*.svg",
    "*.html",
    "*.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer*",
)


@dataclass(frozen=True)
class IngestOptions:
    """``--format``, ``--node``, ``--year``, ``--tz``: the same for ingest, analyze, report."""

    format: str | None = None
    node: str | None = None
    year: int | None = None
    tz: str | None = None

    def __post_init__(self) -> None:
        if self.tz is not None:
            try:
                ZoneInfo(self.tz)
            except (ZoneInfoNotFoundError, ValueError) as err:
                raise UsageError(
                    f"--tz {self.tz!r}: unknown time zone; use an IANA name such as "
                    "'Europe/Berlin', 'America/New_York' or 'UTC'"
                ) from err
        if self.year is not None and not 1970 <= self.year <= 2200:
            raise UsageError(f"--year {self.year}: out of range; give the four-digit year")

    @property
    def clock(self) -> ClockOptions:
        """What parsers are told about placing year-less or zone-less times."""
        return ClockOptions(year=self.year, tz=self.tz)


@dataclass
class Sniffed:
    """An input and the parser chosen for it (None: nothing recognised it)."""

    source: InputFile
    parser: Parser | None
    confidence: float
    explicit: bool
    tried: list[str] = field(default_factory=list)


def load_any(
    paths: Sequence[Path],
    options: IngestOptions | None = None,
    parsers: Mapping[str, Parser] | None = None,
) -> Trace:
    """A trace directory as it is, or the trace ingested from raw files and folders."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise UsageError("no input given; pass a trace directory or the files of the incident")
    traces = [p for p in paths if is_trace_dir(p)]
    if traces and len(paths) > 1:
        raise UsageError(
            f"{traces[0]} is a trace directory; analyse it alone, or pass only raw files"
        )
    if traces:
        return read_trace(traces[0])
    return ingest_paths(paths, options or IngestOptions(), parsers)


def ingest_paths(
    paths: Sequence[Path], options: IngestOptions, parsers: Mapping[str, Parser] | None = None
) -> Trace:
    """Parse every input and merge them into one trace. ``parsers`` defaults to the registry."""
    sniffed = [sniff(s, explicit, options.format, parsers) for s, explicit in expand_inputs(paths)]
    for item in sniffed:
        if item.parser is None and item.explicit:
            raise InputError(_unrecognised(item))
    results: list[tuple[Sniffed, ParseResult, SourceDiagnostics]] = []
    skipped: list[SourceDiagnostics] = []
    for item in sniffed:
        if item.parser is None:
            diag = SourceDiagnostics(item.source.name, "unrecognised", options.node or "")
            diag.note(
                f"no parser recognised this file (tried: {', '.join(item.tried)}); skipped",
                lost=True,
            )
            skipped.append(diag)
            continue
        diag = SourceDiagnostics(item.source.name, item.parser.name, options.node or "")
        ctx = ParseContext(clock=options.clock, mtime=item.source.mtime)
        results.append((item, item.parser.parse(item.source, ctx, diag), diag))
    if not results:
        raise InputError(
            f"{', '.join(str(p) for p in paths)}: no file that oomtrace can read; "
            "pass the engine log, nvidia-smi CSV or metrics export, or --format"
        )
    return _merge(results, skipped, options)


def inspect_path(
    path: Path, options: IngestOptions, parsers: Mapping[str, Parser] | None = None
) -> tuple[Sniffed, Trace]:
    """Which parser recognises ``path`` and what it extracts (for ``oomtrace inspect``)."""
    inputs = expand_inputs([path])
    if len(inputs) != 1 or not inputs[0][1]:
        raise UsageError(f"{path}: inspect takes one file; for a folder use `oomtrace ingest`")
    item = sniff(inputs[0][0], True, options.format, parsers)
    if item.parser is None:
        raise InputError(_unrecognised(item))
    return item, ingest_paths([path], options, parsers)


def expand_inputs(paths: Sequence[Path]) -> list[tuple[InputFile, bool]]:
    """Files to read, with whether the user named each one explicitly."""
    out: list[tuple[InputFile, bool]] = []
    for path in paths:
        if is_capture_dir(path):
            out.append((InputFile(path, path.name), True))
        elif path.is_dir():
            captures = sorted(d for d in path.rglob("*") if is_capture_dir(d))
            out.extend(
                (InputFile(d, f"{path.name}/{d.relative_to(path).as_posix()}"), False)
                for d in captures
            )
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                rel = file.relative_to(path)
                if (
                    any(part.startswith(".") for part in rel.parts)
                    or _not_telemetry(file)
                    or any(file.is_relative_to(d) for d in captures)
                ):
                    continue
                out.append((InputFile(file, f"{path.name}/{rel.as_posix()}"), False))
        elif path.is_file():
            out.append((InputFile(path, path.name), True))
        else:
            raise InputError(f"{path}: no such file or directory; check the path")
    return out


def _not_telemetry(file: Path) -> bool:
    name = file.name.lower().removesuffix(".gz")
    return any(Path(name).match(pattern) for pattern in _NOT_TELEMETRY)


def sniff(
    source: InputFile,
    explicit: bool,
    forced: str | None = None,
    parsers: Mapping[str, Parser] | None = None,
) -> Sniffed:
    """Choose the parser for ``source``: ``forced`` if given, else the most confident."""
    parsers = registry() if parsers is None else parsers
    if forced is not None:
        if forced not in parsers:
            raise UsageError(
                f"--format {forced!r}: no such parser; choose one of {', '.join(sorted(parsers))}"
            )
        return Sniffed(source, parsers[forced], 1.0, explicit)
    if source.path.is_dir():
        capture = parsers.get(CAPTURE_PARSER)
        return Sniffed(source, capture, 1.0 if capture else 0.0, explicit, [CAPTURE_PARSER])
    try:
        size = source.path.stat().st_size
    except OSError as err:
        raise InputError(
            f"{source.name}: cannot be read ({err.strerror}); check permissions"
        ) from err
    if size == 0:
        if explicit:
            raise InputError(f"{source.name}: the file is empty; pass the file that has the data")
        return Sniffed(source, None, 0.0, explicit, ["(empty file)"])
    head = source.head()
    best: Parser | None = None
    best_score = 0.0
    for parser in parsers.values():
        score = parser.sniff(head, source.name)
        if score > best_score:
            best, best_score = parser, score
    if best_score < SNIFF_THRESHOLD:
        best = None
    return Sniffed(source, best, best_score, explicit, sorted(parsers))


def _unrecognised(item: Sniffed) -> str:
    tried = ", ".join(item.tried) if item.tried else "none registered"
    head = item.source.head(4096)
    if not head and item.source.compressed:
        return (
            f"{item.source.name}: the gzip stream holds no readable data (truncated or damaged "
            "before its first block); pass the whole file"
        )
    binary = "\x00" in head
    what = "binary data" if binary else "no known format"
    return f"{item.source.name}: {what}; no parser recognised it (tried: {tried}); pass --format"


def _merge(
    results: list[tuple[Sniffed, ParseResult, SourceDiagnostics]],
    skipped: list[SourceDiagnostics],
    options: IngestOptions,
) -> Trace:
    node = options.node or _default_node([(i.source, r) for i, r, _ in results])
    manifest = Manifest(nodes=[node])
    frames: dict[TableName, list[pl.DataFrame]] = {t: [] for t in TABLES}
    devices = _device_index(results)
    for item, result, diag in results:
        diag.node = node
        source = f"{diag.parser}:{item.source.name}"
        conformed: list[pl.DataFrame] = []
        for table in TABLES:
            frame = getattr(result, table)
            if frame is None or frame.height == 0:
                diag.rows[table] = 0
                continue
            frame = _place_devices(frame, devices, diag)
            frame = frame.with_columns(node=pl.lit(node), source=_source(frame, source))
            frame = conform(table, frame, what=item.source.name)
            diag.rows[table] = frame.height
            frames[table].append(frame)
            conformed.append(frame)
        _time_range(diag, conformed)
        _merge_dict(manifest.engine, result.engine, "engine", diag)
        _merge_dict(manifest.model, result.model, "model", diag)
        _merge_dict(manifest.engine_config, result.engine_config, "engine_config", diag)
        diag.clock = source_clock(result.clock, options.clock)
        # Sources may each place time their own way: the per-source record says how; the
        # trace-level one keeps the first statement of each key without calling that a conflict.
        for key, value in result.clock.items():
            if value is not None:
                manifest.clock.setdefault(key, value)
        manifest.sources.append(diag)
    for diag in skipped:
        diag.node = node
        manifest.sources.append(diag)
    tables = {t: _in_time_order(pl.concat(frames[t])) if frames[t] else None for t in TABLES}
    trace = Trace(manifest=manifest)
    for table, frame in tables.items():
        if frame is not None:
            setattr(trace, table, frame)
    return trace


def _in_time_order(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` sorted by ``ts``, ties in their order (one log's rows mostly come sorted: the
    check costs a fraction of the sort)."""
    if frame.get_column("ts").is_sorted():
        return frame
    return frame.sort("ts", maintain_order=True)


def device_ref_key(ref: str) -> str:
    """The form GPU identifiers are compared in: upper case, PCI domains widened to the 8 digits
    nvidia-smi, NVML and DCGM print (sysfs and lspci print 4)."""
    key = ref.strip().upper()
    return "0000" + key if _SHORT_PCI.match(key) else key


_SHORT_PCI = re.compile(r"^[0-9A-F]{4}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]$")


def _device_index(results: list[tuple[Sniffed, ParseResult, SourceDiagnostics]]) -> dict[str, int]:
    found: dict[str, int] = {}
    for _, result, diag in results:
        for ref, index in result.device_index.items():
            key = device_ref_key(ref)
            if found.get(key, index) != index:
                diag.note(f"GPU {ref} is device {index} here but {found[key]} elsewhere; kept it")
                continue
            found[key] = index
    return found


def _place_devices(
    frame: pl.DataFrame, devices: dict[str, int], diag: SourceDiagnostics
) -> pl.DataFrame:
    """Resolve a ``device_ref`` column (GPU UUID or bus id) to the device index another input
    of the incident states; rows no input places keep a null device, with a note."""
    if "device_ref" not in frame.columns:
        return frame
    key = pl.col("device_ref").str.strip_chars().str.to_uppercase()
    key = pl.when(key.str.contains(_SHORT_PCI.pattern)).then(pl.lit("0000") + key).otherwise(key)
    placed = key.replace_strict(devices, default=None, return_dtype=pl.Int32)
    if "device" in frame.columns:
        placed = pl.coalesce(pl.col("device").cast(pl.Int32), placed)
    frame = frame.with_columns(device=placed)
    lost = frame.filter(pl.col("device").is_null() & pl.col("device_ref").is_not_null())
    if lost.height:
        refs = lost["device_ref"].unique().sort()
        diag.note(
            f"{lost.height:,} row(s) name their GPU only as {', '.join(refs.head(3))}"
            f"{' ...' if refs.len() > 3 else ''}, which no input of this incident ties to a device "
            "index; their device is unknown (add an `nvidia-smi --query-gpu=index,uuid,pci.bus_id "
            "--format=csv` capture)",
            lost=True,
        )
    return frame.drop("device_ref")


def _source(frame: pl.DataFrame, base: str) -> pl.Expr:
    if "source" not in frame.columns:
        return pl.lit(base)
    qualified = pl.concat_str(pl.lit(base + "#"), pl.col("source"))
    return pl.when(pl.col("source").is_null()).then(pl.lit(base)).otherwise(qualified)


def _default_node(items: list[tuple[InputFile, ParseResult]]) -> str:
    for _, result in items:
        if result.host:
            return result.host
    parents = {s.path.resolve().parent.name for s, _ in items}
    if len(items) > 1 and len(parents) == 1 and next(iter(parents)):
        return next(iter(parents))
    return Path(items[0][0].name.removesuffix(".gz")).stem or "node"


def source_clock(clock: Mapping[str, Any], options: ClockOptions) -> dict[str, Any]:
    """One source's clock record in one vocabulary, whichever form its parser stated it in:
    ``tz_source`` is ``option`` (``--tz``), ``default`` (no zone anywhere: read as UTC) or what
    stated the times (``kubectl/docker timestamps``, ...); ``tz_assumed`` is true only for
    ``default``. ``year_source`` likewise, where the year had to be chosen."""
    out = {k: v for k, v in clock.items() if v is not None}
    if not out:
        return out
    if "tz_source" not in out and "tz_assumed" in out:
        if out["tz_assumed"]:
            out["tz_source"] = "default"
        elif options.tz is not None and out.get("tz") == options.tz:
            out["tz_source"] = "option"
        else:
            out["tz_source"] = "the log"
    if "tz_source" in out:
        out["tz_assumed"] = out["tz_source"] == "default"
    if "year_assumed" in out and "year_source" not in out:
        out["year_source"] = "mtime" if out["year_assumed"] else "option"
    return out


def _merge_dict(
    into: dict[str, Any], new: dict[str, Any], what: str, diag: SourceDiagnostics
) -> None:
    for key, value in new.items():
        if value is None:
            continue
        if key in into and into[key] != value:
            diag.note(f"{what}.{key} = {value!r} here disagrees with {into[key]!r}; kept the first")
            continue
        into[key] = value


def _time_range(diag: SourceDiagnostics, frames: list[pl.DataFrame]) -> None:
    stamps = [f["ts"] for f in frames if f.height]
    if not stamps:
        return
    merged = pl.concat(stamps)
    low, high = merged.min(), merged.max()
    diag.first_ts = None if low is None else _iso(low)
    diag.last_ts = None if high is None else _iso(high)


def _iso(value: object) -> str:
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return text.replace("+00:00", "Z")
