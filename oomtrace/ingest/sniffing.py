"""Which files to read and which parser reads each: folders expanded, formats sniffed.

Directories are expanded (sorted, hidden files and documentation skipped); collector capture
directories are read as one input each. A file's format is the most confident parser's, from
the decompressed head of the file, or the one ``--format`` names.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from oomtrace.errors import InputError, UsageError, special_file_error
from oomtrace.ingest.capture.dir_parser import PARSER as _CAPTURE
from oomtrace.ingest.capture.dir_parser import is_capture_dir
from oomtrace.ingest.parser_api import Parser
from oomtrace.ingest.parser_registry import registry
from oomtrace.ingest.text.input_file import InputFile

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


@dataclass
class Sniffed:
    """An input and the parser chosen for it (None: nothing recognised it)."""

    source: InputFile
    parser: Parser | None
    confidence: float
    explicit: bool
    tried: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Hint:
    """What an unrecognised file looks like (``pattern`` found in its head), and the remedy."""

    pattern: re.Pattern[str]
    looks: str
    remedy: str


# For the refusal of a file no parser recognised; the first hint whose pattern matches is given.
_HINTS: tuple[_Hint, ...] = (
    _Hint(
        re.compile(
            r"GPU KV cache size: |Maximum concurrency for |# GPU blocks: |KV cache is needed"
            r"|stored in KV cache \(|Free memory on device|PreemptionMode\.|Available KV cache "
            r"memory: |Loading model weights took|SchedulerStats\(|Avg prompt throughput: "
        ),
        looks="it quotes vLLM's messages without the `INFO MM-DD HH:MM:SS [file.py:N]` head "
        "that starts each vLLM record",
        remedy="pass the server's log as it was written (the file, `docker logs` or "
        "`journalctl`), not messages copied out of it",
    ),
    _Hint(
        re.compile(r"Traceback \(most recent call last\)"),
        looks="it is a Python traceback with no out-of-memory message or engine line in it",
        remedy="pass the log around it (the engine's log from start-up to the failure) or the "
        "nvidia-smi or /metrics captures of that time",
    ),
    _Hint(
        re.compile(r"(?i)<!doctype html|<html[\s>]"),
        looks="it is an HTML page",
        remedy="save the raw log or /metrics text rather than the page that shows it",
    ),
)


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
            raise special_file_error(path) or InputError(
                f"{path}: no such file or directory; check the path"
            )
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


def unrecognised(item: Sniffed) -> str:
    """The one-line error for an input no parser recognised, naming what it looked like."""
    tried = ", ".join(item.tried) if item.tried else "none registered"
    head = item.source.head(4096)
    if not head and item.source.compressed:
        return (
            f"{item.source.name}: the gzip stream holds no readable data (truncated or damaged "
            "before its first block); pass the whole file"
        )
    binary = "\x00" in head
    what = "binary data" if binary else "no known format"
    hint = None if binary else next((h for h in _HINTS if h.pattern.search(head)), None)
    if hint is not None:
        return (
            f"{item.source.name}: {what}: {hint.looks}; no parser recognised it (tried: {tried}); "
            f"{hint.remedy}"
        )
    return f"{item.source.name}: {what}; no parser recognised it (tried: {tried}); pass --format"


def series_name(names: list[str]) -> str:
    """One name for the files of a series: what their names share, ``*`` where they differ
    (``metrics/scrape-*.txt``); digits next to the difference belong to it."""
    prefix = _shared_start(names)
    suffix = _shared_start([name[len(prefix) :][::-1] for name in names])[::-1]
    return f"{prefix.rstrip(string.digits)}*{suffix.lstrip(string.digits)}"


def _shared_start(texts: list[str]) -> str:
    shared = 0
    for chars in zip(*texts, strict=False):
        if len(set(chars)) > 1:
            break
        shared += 1
    return texts[0][:shared] if texts else ""
