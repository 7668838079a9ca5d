"""``nvidia-smi -q -x``: the same report as ``-q``, in XML (``docs/formats/nvidia-smi.md``).

A report is one ``<nvidia_smi_log>`` document (``<!DOCTYPE nvidia_smi_log SYSTEM
"nvsmi_device_vN.dtd">``, N from 6 in 2014 to 13 in 2025) with its ``<timestamp>`` (the C locale's
``date`` form, local time, as in ``-q``), then one ``<gpu id="BUS">`` per GPU in nvidia-smi's
index order. Read from each GPU: ``<fb_memory_usage>`` (``total``, ``reserved``, ``used``,
``free``, each ``N MiB``) and every ``<processes><process_info>`` (``pid``, ``process_name``,
``used_memory``). ``-l N`` prints one document after another: each is a snapshot at its time.
A paste cut short keeps what came before the cut (the GPUs closed by then), with a note. In MIG
mode each ``<mig_device>`` holds its GPU instance's own ``fb_memory_usage``: set aside, counted
(the GPU's own figures are read).

The XML is read with the standard library's ``xml.etree`` (expat): it never fetches the DTD or
any external entity, and expat refuses entity expansion attacks, so a pasted report is safe to
read. The elements become the same rows as the text report's lines
(:func:`oomtrace.ingest.nvidia_smi.query_parser._structure`), so both are read by one reader.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, Final, cast

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics

ROOT: Final = "nvidia_smi_log"
SNIFF: Final = re.compile(r"<nvidia_smi_log>|<!DOCTYPE nvidia_smi_log")
_STARTS: Final = tuple(
    re.compile(p) for p in (r"<\?xml\b", r"<!DOCTYPE nvidia_smi_log\b", r"<nvidia_smi_log>")
)
_MEMORY: Final = {"total": "Total", "reserved": "Reserved", "used": "Used", "free": "Free"}
_SCHEMA: Final = {
    "n": pl.Int64,
    "marker": pl.Boolean,
    "stamp": pl.String,
    "bus": pl.String,
    "key": pl.String,
    "value": pl.String,
    "heading": pl.String,
    "snapshot": pl.Int64,
    "device": pl.Int64,
    "memory": pl.Boolean,
    "processes": pl.Boolean,
    "pid": pl.Int64,
    "name": pl.String,
}


def xml_rows(text: str, diag: SourceDiagnostics) -> pl.DataFrame:
    """The reports in ``text`` as the rows the ``-q`` reader takes: one per figure, GPU and
    timestamp, in document order (``n`` numbers them)."""
    rows: list[dict[str, Any]] = []
    for snapshot, document in enumerate(_documents(text), start=1):
        _read_report(document, snapshot, rows, diag)
    return pl.DataFrame(rows, schema=_SCHEMA)


def _documents(text: str) -> list[str]:
    """Each ``<nvidia_smi_log>`` report of a file that holds one or many (``-l``), from its
    XML declaration (or, in a paste that lost it, its DOCTYPE or root tag); what comes before
    the first (a shell prompt, a Markdown fence) is not XML."""
    for start in _STARTS:
        found = [m.start() for m in start.finditer(text)]
        if found:
            return [text[a:b] for a, b in zip(found, [*found[1:], len(text)], strict=True)]
    return []


def _read_report(
    document: str, snapshot: int, rows: list[dict[str, Any]], diag: SourceDiagnostics
) -> None:
    """One report's elements as they close, so that a paste cut short keeps every figure and
    process closed before the cut."""
    device, in_mig = -1, 0
    for item in _closed_events(document, snapshot, diag):
        event, element = cast("tuple[str, ET.Element]", item)
        tag = element.tag
        if tag == "mig_device":
            in_mig += 1 if event == "start" else -1
            if event == "end":
                diag.skip("MIG instance's own memory (the GPU's is read)", 1, None)
        elif event == "start" and tag == "gpu":
            device += 1
            rows.append(_row(rows, snapshot, bus=element.get("id"), device=device))
        elif event != "end" or in_mig:
            continue
        elif tag == "timestamp" and element.text:
            rows.append(_row(rows, snapshot, stamp=element.text.strip()))
        elif tag == "fb_memory_usage" and device >= 0:
            _read_memory(element, snapshot, device, rows)
        elif tag == "process_info" and device >= 0:
            _read_process(element, snapshot, device, rows)


def _closed_events(document: str, snapshot: int, diag: SourceDiagnostics) -> list[object]:
    """The parser's events up to the first point the document stops being XML: a cut (raised
    where the parser is closed) or a damaged byte (queued among the events by the pull parser
    and raised where they are read)."""
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
    events: list[object] = []
    errors: list[ET.ParseError] = []
    try:
        parser.feed(document)
        parser.close()
    except ET.ParseError as err:
        errors.append(err)
    try:
        events.extend(parser.read_events())
    except ET.ParseError as err:
        errors.append(err)
    if errors:
        diag.note(
            f"nvidia-smi XML report {snapshot} is cut short or damaged ({errors[0]}): what came "
            "before that point was read",
            lost=True,
        )
    return events


def _read_memory(
    memory: ET.Element, snapshot: int, device: int, rows: list[dict[str, Any]]
) -> None:
    for tag, key in _MEMORY.items():
        figure = memory.findtext(tag)
        if figure is not None:
            rows.append(
                _row(rows, snapshot, device=device, key=key, value=figure.strip(), memory=True)
            )


def _read_process(
    process: ET.Element, snapshot: int, device: int, rows: list[dict[str, Any]]
) -> None:
    pid = _integer(process.findtext("pid"))
    name = (process.findtext("process_name") or "").strip()
    common = {"device": device, "processes": True, "pid": pid, "name": name}
    rows.append(_row(rows, snapshot, key="Process ID", value=str(pid), **common))
    rows.append(_row(rows, snapshot, key="Name", value=name, **common))
    used = (process.findtext("used_memory") or "").strip()
    rows.append(_row(rows, snapshot, key="Used GPU Memory", value=used, **common))


def _row(rows: list[dict[str, Any]], snapshot: int, **values: Any) -> dict[str, Any]:
    row = dict.fromkeys(_SCHEMA)
    row.update(n=len(rows) + 1, marker=False, memory=False, processes=False, snapshot=snapshot)
    row.update(values)
    return row


def _integer(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None
