"""The segment file format (version 1): one record per line, each line checksummed.

A line is ``<crc32 of the JSON bytes, 8 lower-case hex digits> <JSON object>\\n``. JSON escapes
every control character, so a raw newline only ever ends a record: a reader can resynchronise
after a damaged line, and a write cut short by a kill leaves a last line without its newline
(a *torn tail*) that is detected and skipped. The first line of every file is the header record.
``collectors/FORMAT.md`` describes every record kind.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

FORMAT_NAME: Final = "oomtrace-segment"
FORMAT_VERSION: Final = 1
SUFFIX: Final = ".oseg"
KEEP_PREFIX: Final = "keep-"

Record = dict[str, Any]

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_CRC_WIDTH: Final = 8


class DecodeError(ValueError):
    """A line that is not a well-formed, checksummed record."""


def encode(record: Mapping[str, Any]) -> bytes:
    """One record as a complete line, newline included."""
    payload = _ENCODER.encode(record).encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def decode(line: bytes) -> Record:
    """Parse one line (without its newline). Raises :class:`DecodeError` when the checksum, the
    framing or the JSON is wrong."""
    if len(line) < _CRC_WIDTH + 3 or line[_CRC_WIDTH : _CRC_WIDTH + 1] != b" ":
        raise DecodeError("line is not '<crc32> <json>'")
    payload = line[_CRC_WIDTH + 1 :]
    try:
        expected = int(line[:_CRC_WIDTH], 16)
    except ValueError as err:
        raise DecodeError("checksum field is not hexadecimal") from err
    if zlib.crc32(payload) != expected:
        raise DecodeError("checksum mismatch")
    try:
        record = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DecodeError(f"JSON does not parse: {err}") from err
    if not isinstance(record, dict) or not isinstance(record.get("k"), str):
        raise DecodeError("record is not an object with a 'k' kind")
    return record


@dataclass(frozen=True)
class Header:
    """What the first line of a segment says about the process that wrote it."""

    version: int
    node: str
    stream: str
    writer: str
    pid: int
    created_ns: int
    seq: int

    def to_record(self) -> Record:
        return {
            "k": "header",
            "format": FORMAT_NAME,
            "version": self.version,
            "node": self.node,
            "stream": self.stream,
            "writer": self.writer,
            "pid": self.pid,
            "created_ns": self.created_ns,
            "seq": self.seq,
        }

    @classmethod
    def from_record(cls, record: Record) -> Header:
        """Raises :class:`DecodeError` for a record that is not a segment header."""
        if record.get("k") != "header" or record.get("format") != FORMAT_NAME:
            raise DecodeError("first record is not an oomtrace segment header")
        try:
            return cls(
                version=int(record["version"]),
                node=str(record["node"]),
                stream=str(record["stream"]),
                writer=str(record["writer"]),
                pid=int(record["pid"]),
                created_ns=int(record["created_ns"]),
                seq=int(record["seq"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise DecodeError(f"segment header lacks a field: {err}") from err


def segment_name(created_ns: int, stream: str, seq: int) -> str:
    """File name that sorts by creation time: ``seg-20250314T090000.000123Z-agent-4242-000001``."""
    stamp = datetime.fromtimestamp(created_ns / 1e9, tz=UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"seg-{stamp}-{stream}-{seq:06d}{SUFFIX}"
