"""Crash-safe capture segments: the public face of the format, the writer and the reader.

``read_capture(directory)`` is what the analyzer's ingest adapter calls; ``SegmentWriter`` is
what the agent and the PyTorch hook append to. The format itself is described in
``collectors/FORMAT.md`` and implemented in :mod:`collectors.format`.
"""

from __future__ import annotations

from collectors.columns import EventColumns, LogLines, PromScrapes, SampleColumns
from collectors.format import FORMAT_VERSION, DecodeError, Header, decode, encode
from collectors.reader import (
    CaptureReadResult,
    Diagnostic,
    Gap,
    Info,
    LogRotation,
    SegmentInfo,
    read_capture,
)
from collectors.retention import KeepMarker, RetentionPolicy
from collectors.writer import SegmentWriter, WriterSettings

__all__ = [
    "FORMAT_VERSION",
    "CaptureReadResult",
    "DecodeError",
    "Diagnostic",
    "EventColumns",
    "Gap",
    "Header",
    "Info",
    "KeepMarker",
    "LogLines",
    "LogRotation",
    "PromScrapes",
    "RetentionPolicy",
    "SampleColumns",
    "SegmentInfo",
    "SegmentWriter",
    "WriterSettings",
    "decode",
    "encode",
    "read_capture",
]
