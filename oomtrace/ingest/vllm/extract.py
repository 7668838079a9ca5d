"""Per-chunk extraction of vLLM records into partial tables (still on the printed clock).

One cheap literal pass (the table's literals as one regex alternation) picks the candidate
records; the start of each candidate's body sorts it into stats, request or other lines (two
literal prefixes for the request lines nearly every record is, an anchored pattern for the
rest); each family then runs its own patterns on its own rows only. Startup and event lines are
rare: only the entries whose literal occurs in the chunk run at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

import polars as pl

from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.torch import oom_phase
from oomtrace.ingest.vllm.frames import (
    CONFIG_ROWS,
    EVENT_ROWS,
    OOM_ROWS,
    STATS_FIELDS,
    STATS_ROWS,
)
from oomtrace.ingest.vllm.line_patterns import (
    EVENT_LINES,
    SCHEDULER_DUMP,
    SCHEDULER_DUMP_LITERAL,
    STATS,
    STATS_LITERAL,
    V0_PREFIX,
    V0_PREFIX_LITERAL,
    EventLine,
    Family,
)
from oomtrace.ingest.vllm.line_records import FLAG_NAMES, TIME_COLUMNS
from oomtrace.ingest.vllm.request_lines import ADDED_LEAD, RECEIVED_LEAD, group_names, read_requests
from oomtrace.ingest.vllm.request_patterns import REQUEST_LINES
from oomtrace.ingest.vllm.startup_patterns import CONFIG_LINES, ConfigLine

L = TypeVar("L", ConfigLine, EventLine)

OOM_LITERALS: Final = (
    "out of memory", "ALLOC_FAILED", "preemptively rejected", "NVML_SUCCESS == r",
    # PyTorch's message without its head (a paste or a wrapped record that begins at "Tried to
    # allocate"): its layouts' own words (oomtrace/ingest/torch/oom_text.py)
    "has a total capac", "total capacity; ",
    # the lines after PyTorch's memory-fraction refusal (oomtrace/ingest/torch/oom_fraction.py),
    # each with a figure the refusal is read from
    "Currently allocated", "Requested      ", "Device limit", "Free (according to CUDA)",
    "user-supplied memory fraction", "          : ",
    # PyTorch 2.13's caching allocator retrying a failed cudaMalloc (its warning, and the rest of
    # one a paste wrapped): memory pressure, read by oomtrace/ingest/torch/alloc_retry.py
    "failed with OOM on device", "bytes (free: ",
    # FlashInfer's attention workspace overflowing (oomtrace/ingest/torch/workspace.py)
    "in AlignedAllocator", "Buffer overflow when allocating memory for", " and alignment ",
)  # fmt: skip
# The request lines that carry prompt or output text.
USER_TEXT_LEADS: Final = r"^(?:Received request |Generated response |Request \S+ details: )"
_LITERALS: Final = tuple(
    sorted(
        {STATS_LITERAL, V0_PREFIX_LITERAL, SCHEDULER_DUMP_LITERAL}
        | {e.literal for e in CONFIG_LINES}
        | {e.literal for e in EVENT_LINES}
        | {e.literal for e in REQUEST_LINES}
    )
)
LITERAL_ALT: Final = "|".join(re.escape(literal) for literal in _LITERALS)
OOM_ALT: Final = "|".join(re.escape(literal) for literal in OOM_LITERALS)
# The OOM candidates and the traceback frames that say what the engine was doing
# (oomtrace/ingest/torch/oom_phase.py): read beside the failures, used only for their phase.
_OOM_CONTEXT_ALT: Final = "|".join(
    re.escape(literal) for literal in (*OOM_LITERALS, *oom_phase.FRAME_LITERALS)
)
_REQUEST_KIND: Final = (
    r"^(?:Engine [0-9]+: |[0-9]+ Engines Aggregated: )?(?P<stats>Avg prompt throughput: )?"
    r"(?P<req>Received request |Added request |Finished request |Aborted request|Request |"
    r"Generated response |Streaming request |Preempted request |Sequence group )?"
)


@dataclass
class Extracted:
    """What one chunk yielded; ``used`` holds the ``record_seq`` of every record put to use."""

    stats: list[pl.DataFrame] = field(default_factory=list)
    config: list[pl.DataFrame] = field(default_factory=list)
    events: list[pl.DataFrame] = field(default_factory=list)
    requests: list[pl.DataFrame] = field(default_factory=list)
    ooms: list[pl.DataFrame] = field(default_factory=list)
    used: list[pl.Series] = field(default_factory=list)
    unmatched: list[pl.Series] = field(default_factory=list)
    evidence: set[Family] = field(default_factory=set)

    def merge(self, other: Extracted) -> None:
        """Append ``other``'s rows (a later chunk, :meth:`own` already) to these."""
        for name in ("stats", "config", "events", "requests", "ooms"):
            getattr(self, name).extend(getattr(other, name))
        self.evidence |= other.evidence

    def own(self) -> None:
        """Copy the text the rows keep out of their chunk's buffers (see :func:`owned`): done
        by the chunk's reader, side by side with the others. A request row's only text from
        the line is its id (its event and kind are the parser's words)."""
        for name in ("stats", "config", "events", "ooms"):
            setattr(self, name, [owned(part) for part in getattr(self, name)])
        self.requests = [owned(part, ["request_id"]) for part in self.requests]


def owned(frame: pl.DataFrame, columns: list[str] | None = None) -> pl.DataFrame:
    """``frame`` with its text (``columns``, default every string column) copied out of the
    buffers it may share with its chunk.

    Slicing a string column (``body``, ``proc``) gives views into the chunk's line buffers, so
    a handful of kept rows would keep every chunk's text alive: memory would grow with the
    file, not with the output. Concatenating with an empty string writes each value anew.
    """
    text = columns or [name for name, dtype in frame.schema.items() if dtype == pl.String]
    if not text or frame.height == 0:
        return frame
    return frame.with_columns(pl.concat_str(pl.col(name), pl.lit("")).alias(name) for name in text)


def flags() -> dict[str, pl.Expr]:
    """Literal scans over raw lines that pick the candidate records (see
    :func:`oomtrace.ingest.vllm.line_records.build_records`). Written as regex alternations: the
    regex engine's literal search is several times faster than ``str.contains_any`` here."""
    line = pl.col("line")
    return {
        "has_literal": line.str.contains(LITERAL_ALT),
        "may_be_oom": line.str.contains(_OOM_CONTEXT_ALT),
    }


def extract(records: pl.DataFrame, out: Extracted) -> None:
    """Add one chunk's rows to ``out``."""
    cand = records.select(*TIME_COLUMNS, "level", "body", *FLAG_NAMES, "is_candidate")
    if not cand.get_column("is_candidate").all():
        cand = cand.filter(pl.col("is_candidate"))
    cand = cand.drop("is_candidate")
    if cand.height == 0:
        return
    # A request line's prompt or output text is the user's, never an OOM message.
    ooms = cand.filter(pl.col("may_be_oom") & ~pl.col("body").str.contains(USER_TEXT_LEADS))
    if ooms.height:
        out.ooms.append(check_frame(ooms.select(*TIME_COLUMNS, "body"), OOM_ROWS, "vLLM OOM rows"))
        # a frame is put to use only where it gives a failure its phase: it stays counted as a
        # record not used (the skip counts are per record, settled per chunk)
        failures = ooms.filter(pl.col("body").str.contains(OOM_ALT))
        out.used.append(failures.get_column("record_seq"))
    if not cand.get_column("has_literal").all():
        cand = cand.filter(pl.col("has_literal"))
    if cand.height == 0:
        return
    stats, by_req, others = _route(cand)
    _stats(stats, out)
    requests = read_requests(by_req)
    if requests.rows is not None:
        out.requests.append(requests.rows)
    out.used += requests.used
    out.evidence |= requests.families
    out.events += requests.preemptions
    if others.height:
        _config(others, out)
        _events(others, out)
        _v0_prefix_rate(others, out)
        _scheduler_dump(others, out)


def _route(cand: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, pl.DataFrame], pl.DataFrame]:
    """Stats records, request records by their lead, and the other records, as
    :data:`_REQUEST_KIND` reads them (a record may be both stats and request). The two leads of
    nearly every request record are literal prefixes, which cost a fraction of the pattern;
    the pattern reads the other records."""
    body = pl.col("body")
    lead = (
        pl.when(body.str.starts_with(RECEIVED_LEAD))
        .then(0)
        .when(body.str.starts_with(ADDED_LEAD))
        .then(1)
        .otherwise(2)
    )
    parts = cand.with_columns(_k=lead).partition_by("_k", as_dict=True, include_key=False)
    by_req = {
        req: parts[(k,)] for k, req in enumerate((RECEIVED_LEAD, ADDED_LEAD)) if (k,) in parts
    }
    rest = parts.get((2,))
    if rest is None:
        return cand.clear(), by_req, cand.clear()
    rest = _classify(rest)
    for req in rest.get_column("request_lead").drop_nulls().unique().to_list():
        part = rest.filter(pl.col("request_lead") == req).drop("request_lead", "is_stats")
        by_req[req] = pl.concat([by_req[req], part]) if req in by_req else part
    stats = rest.filter(pl.col("is_stats")).drop("request_lead", "is_stats")
    others = rest.filter(~pl.col("is_stats") & pl.col("request_lead").is_null()).drop(
        "request_lead", "is_stats"
    )
    return stats, by_req, others


def _classify(rows: pl.DataFrame) -> pl.DataFrame:
    """``is_stats`` and ``request_lead`` (the request lead) of each record, read by
    :data:`_REQUEST_KIND` on the start of its body."""
    kind = pl.col("_g").struct.field
    return (
        rows.with_columns(_g=pl.col("body").str.head(48).str.extract_groups(_REQUEST_KIND))
        .with_columns(is_stats=kind("stats").is_not_null(), request_lead=kind("req"))
        .drop("_g")
    )


def _stats(rows: pl.DataFrame, out: Extracted) -> None:
    if rows.height == 0:
        return
    parsed = rows.with_columns(_g=pl.col("body").str.extract_groups(STATS)).unnest("_g")
    ok = parsed.filter(pl.col("running").is_not_null())
    bad = parsed.filter(pl.col("running").is_null())
    if bad.height:
        out.unmatched.append(bad.get_column("record_seq"))
    if ok.height == 0:
        return
    out.used.append(ok.get_column("record_seq"))
    stats = ok.select(*TIME_COLUMNS, "level", *STATS_FIELDS)
    out.stats.append(check_frame(stats, STATS_ROWS, "vLLM stats rows"))
    out.evidence |= _stats_evidence(ok)


def _scheduler_dump(others: pl.DataFrame, out: Extracted) -> None:
    """The engine core's dump of the scheduler at its death: a stats row of what it states."""
    rows = others.filter(pl.col("body").str.contains(SCHEDULER_DUMP_LITERAL, literal=True))
    if rows.height == 0:
        return
    parsed = rows.with_columns(_g=pl.col("body").str.extract_groups(SCHEDULER_DUMP)).unnest("_g")
    ok = parsed.filter(pl.col("running").is_not_null())
    if ok.height == 0:
        return
    out.used.append(ok.get_column("record_seq"))
    kv_pct = (pl.col("kv_fraction").cast(pl.Float64) * 100).cast(pl.String)
    fields = {name: pl.lit(None, pl.String) for name in STATS_FIELDS}
    fields |= {"running": pl.col("running"), "waiting": pl.col("waiting"), "kv_pct": kv_pct}
    stats = ok.select(*TIME_COLUMNS, "level", **fields)
    out.stats.append(check_frame(stats, STATS_ROWS, "vLLM scheduler dump rows"))


def _stats_evidence(ok: pl.DataFrame) -> set[Family]:
    found: set[Family] = set()
    seen = ok.select(
        v0=pl.col("swapped").is_not_null().any(),
        early=(pl.col("waiting").is_not_null() & pl.col("engine").is_null()).any()
        & pl.col("engines").is_null().all(),
        engine=pl.col("engine").is_not_null().any(),
        later=(pl.col("preemptions").is_not_null() | pl.col("engines").is_not_null()).any(),
        deferred=pl.col("deferred").is_not_null().any(),
        device=(pl.col("device").is_not_null() & (pl.col("device") != "GPU")).any(),
    ).row(0, named=True)
    pairs: list[tuple[str, Family]] = [
        ("v0", "v0"), ("early", "v1-0.7"), ("engine", "v1-0.8.5"), ("later", "v1-0.12"),
        ("deferred", "v1-0.20"), ("device", "v1-0.30"),
    ]  # fmt: skip
    for key, family in pairs:
        if seen[key]:
            found.add(family)
    return found


def _v0_prefix_rate(others: pl.DataFrame, out: Extracted) -> None:
    rows = others.filter(pl.col("body").str.starts_with(V0_PREFIX_LITERAL))
    if rows.height == 0:
        return
    rate = pl.col("body").str.extract(V0_PREFIX, 1).cast(pl.Float64)
    ok = rows.with_columns(prefix_pct=rate).filter(pl.col("prefix_pct").is_not_null())
    out.used.append(ok.get_column("record_seq"))
    # The same rows as a stats line gives, every other field empty.
    fields = [
        pl.col(name).cast(pl.String)
        if name == "prefix_pct"
        else pl.lit(None, pl.String).alias(name)
        for name in STATS_FIELDS
    ]
    stats = ok.select(*TIME_COLUMNS, "level", *fields)
    out.stats.append(check_frame(stats, STATS_ROWS, "vLLM stats rows"))
    out.evidence.add("v0")


def _present(others: pl.DataFrame, literals: list[str]) -> set[str]:
    """Which of ``literals`` occur in any body (one call for the whole table)."""
    body = pl.col("body")
    found = others.select(
        pl.concat_list(body.str.contains(lit, literal=True).any() for lit in literals)
    ).item()
    return {lit for lit, hit in zip(literals, found, strict=True) if hit}


def _hits(
    others: pl.DataFrame, entries: Sequence[L], out: Extracted
) -> Iterator[tuple[L, pl.DataFrame]]:
    """Each kind of line with the rows it matches (its literal, then its pattern); the rows are
    marked used and the kind's version family is evidence."""
    present = _present(others, [entry.literal for entry in entries])
    for entry in entries:
        if entry.literal not in present:
            continue
        hit = others.filter(
            pl.col("body").str.contains(entry.literal, literal=True)
            & pl.col("body").str.contains(entry.pattern)
        )
        if hit.height == 0:
            continue
        out.used.append(hit.get_column("record_seq"))
        if entry.family is not None:
            out.evidence.add(entry.family)
        yield entry, hit


def _config(others: pl.DataFrame, out: Extracted) -> None:
    for entry, hit in _hits(others, CONFIG_LINES, out):
        groups = group_names(entry.pattern)
        parsed = hit.with_columns(_g=pl.col("body").str.extract_groups(entry.pattern))
        for group in groups:
            key, conv = group.split("__")
            out.config.append(
                _config_rows(parsed, pl.col("_g").struct.field(group), key, conv, entry.name)
            )
        for key, pattern, conv in entry.extras:
            out.config.append(
                _config_rows(parsed, pl.col("body").str.extract(pattern, 1), key, conv, entry.name)
            )


def _config_rows(
    frame: pl.DataFrame, value: pl.Expr, key: str, conv: str, name: str
) -> pl.DataFrame:
    rows = frame.select(
        *TIME_COLUMNS,
        key=pl.lit(key),
        value=value.cast(pl.String),
        conv=pl.lit(conv),
        line_name=pl.lit(name),
    ).filter(pl.col("value").is_not_null())
    return check_frame(rows, CONFIG_ROWS, "vLLM start-up rows")


def _events(others: pl.DataFrame, out: Extracted) -> None:
    for entry, hit in _hits(others, EVENT_LINES, out):
        groups = group_names(entry.pattern)
        encoded = (
            pl.col("body").str.extract_groups(entry.pattern).struct.json_encode()
            if groups
            else pl.lit("{}")
        )
        rows = hit.select(
            *TIME_COLUMNS,
            kind=pl.lit(entry.kind),
            line_name=pl.lit(entry.name),
            captures_json=encoded,
        )
        out.events.append(check_frame(rows, EVENT_ROWS, "vLLM event rows"))
