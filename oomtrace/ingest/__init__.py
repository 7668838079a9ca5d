"""Ingest: what a server left behind, turned into one canonical trace.

The front door. Commands and other packages import from here:

* :func:`ingest_paths`, :func:`load_any` and :func:`inspect_path` (:mod:`.orchestrator`, with
  :mod:`.sniffing` choosing each input's parser and :mod:`.trace_merge` merging the results),
  and :class:`IngestOptions` (:mod:`.options`);
* the format registry, :func:`registry` (:mod:`.parser_registry`), and the parser plug point,
  :class:`Parser` and what it is given and returns (:mod:`.parser_api`).

One subpackage per source family reads its formats: ``vllm``, ``sglang``, ``prometheus``,
``torch`` (PyTorch OOM text, logs and memory snapshots), ``nvidia_smi`` and ``capture``
(collector capture directories); ``text`` holds what the text formats share (reading lines,
outer prefixes, timestamps, placing year-less times). What each format holds, with its upstream
sources, is written up in ``docs/formats/``.

The names load on first use (:mod:`oomtrace.lazy`): a command that takes the options, or reads a
trace directory, does not import every parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomtrace import lazy

if TYPE_CHECKING:
    from oomtrace.ingest.options import IngestOptions
    from oomtrace.ingest.orchestrator import ingest_paths, inspect_path, load_any
    from oomtrace.ingest.parser_api import (
        ClockOptions,
        LineParser,
        ParseContext,
        Parser,
        ParseResult,
    )
    from oomtrace.ingest.parser_registry import BUILTIN_PARSERS, ENTRY_POINT_GROUP, registry
    from oomtrace.ingest.sniffing import Sniffed, expand_inputs, sniff
    from oomtrace.ingest.text.input_file import InputFile
    from oomtrace.ingest.trace_merge import device_ref_key, source_clock

_EXPORTS = {
    "BUILTIN_PARSERS": "oomtrace.ingest.parser_registry",
    "ClockOptions": "oomtrace.ingest.parser_api",
    "device_ref_key": "oomtrace.ingest.trace_merge",
    "ENTRY_POINT_GROUP": "oomtrace.ingest.parser_registry",
    "expand_inputs": "oomtrace.ingest.sniffing",
    "ingest_paths": "oomtrace.ingest.orchestrator",
    "IngestOptions": "oomtrace.ingest.options",
    "InputFile": "oomtrace.ingest.text.input_file",
    "inspect_path": "oomtrace.ingest.orchestrator",
    "LineParser": "oomtrace.ingest.parser_api",
    "load_any": "oomtrace.ingest.orchestrator",
    "ParseContext": "oomtrace.ingest.parser_api",
    "Parser": "oomtrace.ingest.parser_api",
    "ParseResult": "oomtrace.ingest.parser_api",
    "registry": "oomtrace.ingest.parser_registry",
    "sniff": "oomtrace.ingest.sniffing",
    "Sniffed": "oomtrace.ingest.sniffing",
    "source_clock": "oomtrace.ingest.trace_merge",
}
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


__getattr__ = lazy.exports("oomtrace.ingest", _EXPORTS)
