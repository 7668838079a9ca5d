"""Ingest: what a server left behind, turned into one canonical trace.

The front door. Commands and other packages import from here:

* :func:`ingest_paths`, :func:`load_any`, :func:`inspect_path` and :class:`IngestOptions`
  (:mod:`.orchestrator`, with :mod:`.sniffing` choosing each input's parser and
  :mod:`.trace_merge` merging the results);
* the format registry, :func:`registry` (:mod:`.registry`), and the parser plug point,
  :class:`Parser` and what it is given and returns (:mod:`.parser_api`).

One subpackage per source family reads its formats: ``vllm``, ``sglang``, ``prometheus``,
``torch`` (PyTorch OOM text, logs and memory snapshots), ``nvidia_smi`` and ``capture``
(collector capture directories); ``text`` holds what the text formats share (reading lines,
outer prefixes, timestamps, placing year-less times). What each format holds, with its upstream
sources, is written up in ``docs/formats/``.
"""

from __future__ import annotations

from oomtrace.ingest.orchestrator import IngestOptions, ingest_paths, inspect_path, load_any
from oomtrace.ingest.parser_api import (
    ClockOptions,
    LineParser,
    ParseContext,
    Parser,
    ParseResult,
)
from oomtrace.ingest.registry import BUILTIN_PARSERS, ENTRY_POINT_GROUP, registry
from oomtrace.ingest.sniffing import Sniffed, expand_inputs, sniff
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.ingest.trace_merge import device_ref_key, source_clock

__all__ = [
    "BUILTIN_PARSERS",
    "ENTRY_POINT_GROUP",
    "ClockOptions",
    "IngestOptions",
    "InputFile",
    "LineParser",
    "ParseContext",
    "ParseResult",
    "Parser",
    "Sniffed",
    "device_ref_key",
    "expand_inputs",
    "ingest_paths",
    "inspect_path",
    "load_any",
    "registry",
    "sniff",
    "source_clock",
]
