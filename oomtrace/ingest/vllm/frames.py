"""The frames the modules of the vLLM parser hand each other, declared once.

A chunk of lines becomes :data:`RECORDS` (and :data:`UNPARSED_LINES`, kept only to be counted)
in :mod:`.line_records`; :mod:`.extract` turns records into partial tables, each row still on the
printed clock (:data:`RECORD_TIME`): :data:`STATS_ROWS`, :data:`CONFIG_ROWS`, :data:`EVENT_ROWS`,
:data:`OOM_ROWS` and, from :mod:`.request_lines`, :data:`REQUEST_ROWS` (or
:data:`SETTLED_REQUEST_ROWS` when every row of the chunk carries a full time). Once the whole file
is read, :mod:`.log_parser` places every row in time (``ts``) with :data:`CHUNK_CARRY`, and
:mod:`.file_tables` and :mod:`.request_table` make canonical rows of them.

Column meanings:

* ``record_seq``: the record's place in the file, ``line number * 256 + piece`` (a line that
  held several glued records gives several pieces); the key every table and skip count uses;
* ``chunk``: which chunk of the file the record was read in;
* ``printed_month_day`` (``month * 100 + day``) and ``printed_second_of_day``: the time vLLM
  printed, with no year and no zone; ``year_offset``: years since the first printed time of the
  chunk (New Year crossings), made file-wide by adding the chunk's ``year_offset_base``;
* ``outer_ts`` / ``arrival_ts``: a full time from an outer prefix (kubectl, docker, journald)
  or from the collector that read the line as it was written;
* ``has_header``: the line has vLLM's own header (level, date, time, file:line);
* ``proc``: the process key the prefixes name (the same record from two processes at the same
  second is printed by two ranks); ``repeat``: lines this one stands for (Ray's de-duplication);
* ``has_literal`` / ``may_be_oom``: the cheap literal scans that make a line a candidate
  (``is_candidate``) for parsing; ``prefix_chars`` and ``body_start``: where the outer prefix
  and the header end (characters); ``body``: the text after the header.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.schema import TS

_INT32: Final = pl.Int32()
_STRING: Final = pl.String()
_BOOL: Final = pl.Boolean()

# Where and when a record was printed: carried by every partial table until the file is read.
RECORD_TIME: Final = pl.Schema(
    {
        "record_seq": pl.Int64(),
        "chunk": _INT32,
        "printed_month_day": _INT32,
        "printed_second_of_day": _INT32,
        "year_offset": _INT32,
        "has_header": _BOOL,
        "outer_ts": TS,
        "arrival_ts": TS,
        "proc": _STRING,
        "repeat": _INT32,
    }
)

# The lines of a chunk that were parsed (line_records.build_records).
RECORDS: Final = pl.Schema(
    {
        "line": _STRING,
        "arrival_ts": TS,
        "record_seq": pl.Int64(),
        "has_literal": _BOOL,
        "may_be_oom": _BOOL,
        "is_candidate": _BOOL,
        "has_header": _BOOL,
        "prefix_chars": pl.UInt32(),
        "outer_ts": TS,
        "host": _STRING,
        "proc": _STRING,
        "body_start": pl.UInt32(),
        "level": _STRING,
        "bracketed": _BOOL,
        "printed_month_day": _INT32,
        "printed_second_of_day": _INT32,
        "body": _STRING,
        "repeat": _INT32,
        "chunk": _INT32,
        "year_offset": _INT32,
    }
)

# The records the scanner read (_line_scan.c), a row per run of them (the same printed second
# and full second, no other record between), placed with the records': the run's last record
# and how many records it holds.
SCANNED_RUNS: Final = pl.Schema(
    {
        "record_seq": pl.Int64(),
        "printed_month_day": _INT32,
        "printed_second_of_day": _INT32,
        "outer_ts": TS,
        "weight": pl.UInt32(),
    }
)

# The lines nothing needed parsed: counted as skipped, by reason.
UNPARSED_LINES: Final = pl.Schema({"record_seq": pl.Int64(), "line": _STRING, "has_header": _BOOL})

# vLLM's engine header as log_header.read_header adds it.
HEADER_COLUMNS: Final = pl.Schema(
    {
        "header_chars": pl.UInt32(),
        "header_level": _STRING,
        "header_bracketed": _BOOL,
        "header_month_day": _INT32,
        "header_second_of_day": _INT32,
    }
)

# The periodic stats line's fields as printed (the named groups of line_patterns.STATS).
STATS_FIELDS: Final = (
    "engine", "engines", "prompt_tps", "gen_tps", "running", "swapped", "pending", "waiting",
    "deferred", "preemptions", "device", "kv_pct", "prefix_pct",
)  # fmt: skip
STATS_ROWS: Final = pl.Schema(
    {**RECORD_TIME, "level": _STRING, **dict.fromkeys(STATS_FIELDS, _STRING)}
)
# A start-up statement: engine_config key, value as printed, conversion, and the line it is from.
CONFIG_ROWS: Final = pl.Schema(
    {**RECORD_TIME, "key": _STRING, "value": _STRING, "conv": _STRING, "line_name": _STRING}
)
# An event line: its kind, the line it is from, and the pattern's named groups as JSON.
EVENT_ROWS: Final = pl.Schema(
    {**RECORD_TIME, "kind": _STRING, "line_name": _STRING, "captures_json": _STRING}
)
# A record that may hold PyTorch OOM text.
OOM_ROWS: Final = pl.Schema({**RECORD_TIME, "body": _STRING})

# Requests are never de-duplicated across ranks (one API server prints them): their rows keep
# the printed time but neither the process key nor the repeat count.
REQUEST_TIME: Final = pl.Schema(
    {
        name: RECORD_TIME[name]
        for name in RECORD_TIME
        if name not in ("has_header", "proc", "repeat")
    }
)
REQUEST_FIELDS: Final = pl.Schema(
    {
        "request_id": _STRING,
        "event": _STRING,
        "prompt_tokens": pl.Int64(),
        "max_tokens": pl.Int64(),
        "output_tokens": pl.Int64(),
        # the SamplingParams that size a request's step (request_lines.PARAMS)
        "n": pl.Int64(),
        "best_of": pl.Int64(),
        "logprobs": pl.Int64(),
        "prompt_logprobs": pl.Int64(),
        # what the line told: arrived, details, response, delta, complete, ... (see
        # request_table), and whether its token count may be the INFO preview's cap.
        "line_kind": _STRING,
        "count_may_be_capped": _BOOL,
    }
)
REQUEST_ROWS: Final = pl.Schema({**REQUEST_TIME, **REQUEST_FIELDS})
# The printed-time fields a record keeps until the whole file decides the year.
PRINTED_TIME: Final = tuple(name for name in REQUEST_TIME if name != "record_seq")
# Request rows whose time is settled (ts): what request_table.finish_requests takes.
SETTLED_REQUEST_ROWS: Final = pl.Schema({"record_seq": pl.Int64(), **REQUEST_FIELDS, "ts": TS})

# Per chunk: its year-offset base, and the printed time that lines before its first timestamp
# inherit from the chunks before it.
CHUNK_CARRY: Final = pl.Schema(
    {
        "chunk": _INT32,
        "year_offset_base": _INT32,
        "carried_month_day": _INT32,
        "carried_second_of_day": _INT32,
        "carried_year_offset": _INT32,
    }
)


def timed(schema: pl.Schema) -> pl.Schema:
    """``schema`` with ``ts``: the rows once placed in time."""
    return pl.Schema({**schema, "ts": TS})
