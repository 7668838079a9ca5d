"""The frames the modules of the SGLang parser hand each other, declared once.

:mod:`.line_kinds` splits each line into :data:`PREFIX_PARTS`; :mod:`.log_parser` places it in
time and gives it a kind (:data:`KIND_LINES`: ``batch``, ``retract``, ``receive``, ``finish``,
a start-up kind, ``torch_oom``, ...), and :mod:`.extract` reads the lines of each kind into
:data:`BATCH_FIELDS`, :data:`RETRACTIONS`, :data:`STARTUP_FIELDS` or canonical rows.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.ingest.sglang import line_patterns as pat
from oomtrace.schema import TS

_STRING: Final = pl.String()

# A line split at SGLang's prefix: what came before it (an outer prefix), the printed date and
# time, the milliseconds (SGLANG_LOG_MS=1), the rank tags (``DP1 TP1``) and the message. All
# null but ``line`` where the line has no SGLang prefix.
PREFIX_PARTS: Final = pl.Schema(
    dict.fromkeys(("line", "outer", "stamp", "ms", "ranks", "msg"), _STRING)
)

# A line placed in time, with the kind of message it may be (null: none that is used).
KIND_LINES: Final = pl.Schema(
    {"line": _STRING, "ranks": _STRING, "msg": _STRING, "ts": TS, "kind": _STRING}
)

# A scheduler batch line's numbers (line_patterns.FIELDS), with the ranks that printed it.
BATCH_FIELDS: Final = pl.Schema(
    {"ts": TS, "ranks": _STRING, **{f.name: pl.Float64() for f in pat.FIELDS}}
)

# A retraction line: how many requests were retracted (and aborted), by which data-parallel rank.
RETRACTIONS: Final = pl.Schema(
    {
        "ts": TS,
        "ranks": _STRING,
        "msg": _STRING,
        "retracted": pl.Int64(),
        "aborted": pl.Int64(),
        "dp_rank": _STRING,
    }
)

# A start-up line's figures (line_patterns.GIB_FIELDS in bytes, INT_FIELDS, TEXT_FIELDS).
STARTUP_FIELDS: Final = pl.Schema(
    {
        "ts": TS,
        "kind": _STRING,
        "ranks": _STRING,
        **dict.fromkeys(pat.GIB_FIELDS, pl.Int64()),
        **dict.fromkeys(pat.INT_FIELDS, pl.Int64()),
        **dict.fromkeys(pat.TEXT_FIELDS, _STRING),
    }
)
