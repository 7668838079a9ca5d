"""A collector capture directory (``oomtrace collect --out DIR``) as one ingest input
(``docs/formats/capture.md``; the segment format is ``collectors/FORMAT.md``).

The segments are read by :func:`collectors.segments.read_capture` (standard library, the same reader
the agent ships). Its canonical samples and events (NVML, the PyTorch hook, gaps) become frames
directly; its Prometheus scrapes go through the same reader as a scrape file
(:func:`oomtrace.ingest.prometheus.text_parser.parse_scrapes`); its log lines go to whichever log
parser recognises them, through :meth:`LineParser.parse_lines`, with each line's arrival time, which
fixes the year-less, second-resolution times engines print. Lines already in a file when the
collector opened it (backlog) carry no arrival time: only an upper bound is known, so the parser
uses the printed time for them.

So a trace captured live and one rebuilt from old files go through the same parsers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest.parser_api import LineParser, ParseContext, ParseResult
from oomtrace.ingest.parser_registry import registry
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.schema import TS

if TYPE_CHECKING:
    from collectors.columns import LogLines
    from collectors.reader import Info

SEGMENT_GLOB: Final = "seg-*.oseg"
_SNIFF_LINES: Final = 400
_SNIFF_THRESHOLD: Final = 0.5


def is_capture_dir(path: Path) -> bool:
    """A directory holding collector segments."""
    return path.is_dir() and any(path.glob(SEGMENT_GLOB))


class CaptureParser:
    """The ``collector-capture`` input: a directory of segments. Never chosen by sniffing file
    text (a capture is a directory, recognised by :func:`is_capture_dir`)."""

    name = "collector-capture"
    description = "oomtrace collect capture directory (crash-safe segments)"

    def sniff(self, head: str, name: str) -> float:
        return 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        # Imported here: the registry lists this parser for every command (ingest of a log
        # file, too), and the segment reader, the plugin's records and the /metrics parser
        # cost about 40 ms of CPU to load.
        from collectors.segments import read_capture  # noqa: PLC0415
        from oomtrace.ingest.capture.vllm_plugin import plugin_result, prefer_plugin  # noqa: PLC0415
        from oomtrace.ingest.prometheus.text_parser import parse_scrapes  # noqa: PLC0415

        try:
            capture = read_capture(source.path)
        except (FileNotFoundError, NotADirectoryError) as err:
            raise InputError(f"{source.name}: not a capture directory ({err})") from err
        if not capture.segments:
            raise InputError(
                f"{source.name}: no readable segment; check that it is the --out directory "
                "of `oomtrace collect`"
            )
        for item in capture.diagnostics:
            diag.skip(item.kind.replace("_", " "), item.count, f"{item.file}: {item.detail}")
        plugin = plugin_result(capture.vllm) if capture.vllm else None
        parts = [_canonical(capture.samples.as_dict(), capture.events.as_dict())]
        for scrapes in capture.prometheus.values():
            parts.append(parse_scrapes(zip(scrapes.ts_ns, scrapes.text, strict=True), diag))
            parts[-1] = _tag(parts[-1], scrapes.source[0] if scrapes.source else None)
        for path, lines in capture.logs.items():
            parsed = _parse_log(path, lines, ctx, diag)
            if parsed is not None:
                parts.append(_tag(parsed, lines.source[0] if lines.source else None))
        lower_bounds = sum(capture.samples.lower_bound)
        if lower_bounds:
            diag.note(
                f"{lower_bounds:,} PyTorch peak value(s) are lower bounds (the hook never resets "
                "the engine's peak statistics; see collectors/FORMAT.md)"
            )
        diag.lines_recognised += len(capture.samples) + len(capture.events)
        diag.lines_recognised += len(capture.vllm.steps) + len(capture.vllm.admitted)
        if plugin is not None:
            # the engine's own account first: it wins where it speaks (prefer_plugin)
            parts = prefer_plugin(parts, plugin, diag)
        merged = _combine(parts)
        names = _gpu_names(capture.infos)
        if names:
            merged.engine_config["gpu_names"] = names
        merged.host = capture.nodes[0] if capture.nodes else None
        if len(capture.nodes) > 1:
            diag.note(f"segments of several nodes ({', '.join(capture.nodes)}); labelled as one")
        return merged


PARSER: Final = CaptureParser()


def _gpu_names(infos: Sequence[Info]) -> list[str]:
    """The GPUs NVML named in the capture's device inventory, by index (``NVIDIA L40S``): the
    report's header says which device ran out."""
    named = {
        int(d["index"]): str(d["name"])
        for info in infos
        for d in info.data.get("devices") or []
        if isinstance(d, dict) and isinstance(d.get("index"), int) and d.get("name")
    }
    return [named[i] for i in sorted(named)]


def _canonical(samples: dict[str, list[object]], events: dict[str, list[object]]) -> ParseResult:
    def frame(columns: dict[str, list[object]], overrides: dict[str, pl.DataType]) -> pl.DataFrame:
        out = pl.DataFrame(columns, schema_overrides=overrides, strict=False)
        return out.with_columns(ts=pl.from_epoch("ts_ns", time_unit="ns").cast(TS)).drop(
            "ts_ns", "node"
        )

    ids = {"device": pl.Int32(), "pid": pl.Int64()}
    byte_columns = {c: pl.Int64() for c in events if c.endswith("_bytes")}
    return ParseResult(
        samples=frame(samples, {**ids, "value": pl.Float64()}) if samples["ts_ns"] else None,
        events=frame(events, {**ids, **byte_columns}) if events["ts_ns"] else None,
    )


def _parse_log(
    path: str, lines: LogLines, ctx: ParseContext, diag: SourceDiagnostics
) -> ParseResult | None:
    """Lines of one followed file, through the log parser that recognises them."""
    head = "\n".join(lines.text[:_SNIFF_LINES])
    best: LineParser | None = None
    best_score = _SNIFF_THRESHOLD
    for parser in registry().values():
        if isinstance(parser, LineParser):
            score = parser.sniff(head, Path(path).name)
            if score >= best_score:
                best, best_score = parser, score
    if best is None:
        diag.skip("log lines no parser recognised", len(lines), f"{path}: {lines.text[0]}")
        return None
    arrival = pl.Series("arrival_ts", lines.ts_ns, dtype=pl.Int64)
    frame = pl.DataFrame(
        {"line": pl.Series("line", lines.text, dtype=pl.String), "arrival_ts": arrival}
    ).with_columns(
        arrival_ts=pl.when(pl.Series(lines.backlog, dtype=pl.Boolean))
        .then(None)
        .otherwise(pl.from_epoch("arrival_ts", time_unit="ns"))
        .cast(TS)
    )
    diag.note(f"log lines of {Path(path).name}: read with {best.name}")
    return best.parse_lines(frame, ctx, diag)


def _tag(result: ParseResult, source: str | None) -> ParseResult:
    """Qualify rows with the collector source (``collector.log``...) so series stay apart."""
    if source is None:
        return result
    for table in ("samples", "requests", "events"):
        frame = getattr(result, table)
        if frame is not None and frame.height and "source" not in frame.columns:
            setattr(result, table, frame.with_columns(source=pl.lit(source)))
    return result


def _combine(parts: list[ParseResult]) -> ParseResult:
    out = ParseResult()
    for table in ("samples", "requests", "events"):
        frames = [f for p in parts if (f := getattr(p, table)) is not None and f.height]
        if frames:
            setattr(out, table, pl.concat(frames, how="diagonal_relaxed"))
    for part in parts:
        for key in ("engine", "model", "engine_config", "clock"):
            target = getattr(out, key)
            for name, value in getattr(part, key).items():
                target.setdefault(name, value)
    return out
