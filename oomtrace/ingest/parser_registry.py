"""The format registry: built-in and third-party parsers alike, by name.

Built-ins are listed in :data:`BUILTIN_PARSERS` as ``module:attribute`` strings and loaded on
first use, exactly like extensions, which register through the ``oomtrace.parsers`` entry-point
group. A parser is any object that satisfies :class:`~oomtrace.ingest.parser_api.Parser`.
"""

from __future__ import annotations

import importlib
import logging
from functools import cache
from importlib.metadata import entry_points

from oomtrace.ingest.parser_api import Parser

log = logging.getLogger(__name__)

# module:attribute of every built-in parser, in sniffing tie-break order.
BUILTIN_PARSERS: tuple[str, ...] = (
    "oomtrace.ingest.capture.dir_parser:PARSER",
    "oomtrace.ingest.vllm.log_parser:PARSER",
    "oomtrace.ingest.sglang.log_parser:PARSER",
    "oomtrace.ingest.torch.snapshot_parser:PARSER",
    "oomtrace.ingest.torch.log_parser:PARSER",
    "oomtrace.ingest.nvidia_smi.csv_parser:PARSER",
    "oomtrace.ingest.nvidia_smi.table_parser:PARSER",
    "oomtrace.ingest.nvidia_smi.query_parser:PARSER",
    "oomtrace.ingest.nvidia_smi.monitor_parser:PARSER",
    "oomtrace.ingest.nvidia_smi.gpustat_parser:PARSER",
    "oomtrace.ingest.prometheus.text_parser:PARSER",
    "oomtrace.ingest.prometheus.query_parser:PARSER",
)

ENTRY_POINT_GROUP = "oomtrace.parsers"


@cache
def registry() -> dict[str, Parser]:
    """All parsers by name: built-ins first, then entry points (which may not shadow one)."""
    found: dict[str, Parser] = {}
    for spec in BUILTIN_PARSERS:
        _add(found, _load(spec), spec)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            _add(found, ep.load(), ep.value)
        except Exception as err:  # noqa: BLE001 - a broken extension must not break ingest
            log.warning("parser extension %s could not be loaded: %s", ep.value, err)
    return found


def _load(spec: str) -> object:
    module, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _add(found: dict[str, Parser], parser: object, spec: str) -> None:
    if not isinstance(parser, Parser):
        log.warning("%s is not a parser (needs name, description, sniff, parse)", spec)
        return
    if parser.name in found:
        log.warning("parser name %s from %s is already taken; ignored", parser.name, spec)
        return
    found[parser.name] = parser
