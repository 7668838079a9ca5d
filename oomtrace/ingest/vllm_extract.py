"""Per-chunk extraction of vLLM records into partial tables (still on the printed clock).

One cheap literal pass (the table's literals as one regex alternation) picks the candidate
records; an anchored pattern on the start of each candidate's body sorts it into stats, request
or other lines; each family then runs its own patterns on its own rows only. Startup and event
lines are rare, so their per-entry patterns run on a handful of rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Final

import polars as pl

from oomtrace.ingest.vllm_patterns import (
    CONFIG_LINES,
    EVENT_LINES,
    PREEMPT,
    REQUEST_LINES,
    STATS,
    STATS_LITERAL,
    V0_PREFIX,
    V0_PREFIX_LITERAL,
    Family,
)
from oomtrace.ingest.vllm_records import TIME_COLUMNS

OOM_LITERALS: Final = ("out of memory", "ALLOC_FAILED", "preemptively rejected")
_LITERALS: Final = tuple(
    sorted(
        {STATS_LITERAL, V0_PREFIX_LITERAL}
        | {e.literal for e in CONFIG_LINES}
        | {e.literal for e in EVENT_LINES}
        | {e.literal for e in REQUEST_LINES}
    )
)
_ID_HEAD: Final = 320
_REQUEST_TIME: Final = ("_seq", "_chunk", "_md", "_tod", "_yo", "outer_ts", "arrival_ts")
_LITERAL_ALT: Final = "|".join(re.escape(literal) for literal in _LITERALS)
_OOM_ALT: Final = "|".join(re.escape(literal) for literal in OOM_LITERALS)
_REQUEST_KIND: Final = (
    r"^(?:Engine [0-9]+: |[0-9]+ Engines Aggregated: )?(?P<stats>Avg prompt throughput: )?"
    r"(?P<req>Received request |Added request |Finished request |Aborted request|Request |"
    r"Generated response |Streaming request |Preempted request |Sequence group )?"
)


@dataclass
class Extracted:
    """What one chunk yielded; ``used`` holds the ``_seq`` of every record put to use."""

    stats: list[pl.DataFrame] = field(default_factory=list)
    config: list[pl.DataFrame] = field(default_factory=list)
    events: list[pl.DataFrame] = field(default_factory=list)
    requests: list[pl.DataFrame] = field(default_factory=list)
    ooms: list[pl.DataFrame] = field(default_factory=list)
    used: list[pl.Series] = field(default_factory=list)
    unmatched: list[pl.Series] = field(default_factory=list)
    evidence: set[Family] = field(default_factory=set)

    def merge(self, other: Extracted) -> None:
        """Append ``other``'s rows (a later chunk) to these."""
        for name in ("stats", "config", "events", "requests", "ooms"):
            getattr(self, name).extend(getattr(other, name))
        self.evidence |= other.evidence


def flags() -> dict[str, pl.Expr]:
    """Literal scans over raw lines that pick the candidate records (see
    :func:`oomtrace.ingest.vllm_records.build_records`). Written as regex alternations: the
    regex engine's literal search is several times faster than ``str.contains_any`` here."""
    line = pl.col("line")
    return {"_lit": line.str.contains(_LITERAL_ALT), "_oom": line.str.contains(_OOM_ALT)}


def extract(records: pl.DataFrame, out: Extracted) -> None:
    """Add one chunk's rows to ``out``."""
    cand = records.filter(pl.col("_cand"))
    if cand.height == 0:
        return
    ooms = cand.filter(pl.col("_oom"))
    if ooms.height:
        out.ooms.append(ooms.select(*TIME_COLUMNS, "body"))
        out.used.append(ooms.get_column("_seq"))
    cand = cand.filter(pl.col("_lit"))
    if cand.height == 0:
        return
    kind = pl.col("body").str.head(48).str.extract_groups(_REQUEST_KIND)
    cand = cand.with_columns(
        _stats=kind.struct.field("stats").is_not_null(), _req=kind.struct.field("req")
    )
    _stats(cand.filter(pl.col("_stats")), out)
    _requests(cand.filter(pl.col("_req").is_not_null()), out)
    others = cand.filter(~pl.col("_stats") & pl.col("_req").is_null())
    if others.height:
        _config(others, out)
        _events(others, out)
        _v0_prefix_rate(others, out)


def _stats(rows: pl.DataFrame, out: Extracted) -> None:
    if rows.height == 0:
        return
    parsed = rows.with_columns(_g=pl.col("body").str.extract_groups(STATS)).unnest("_g")
    ok = parsed.filter(pl.col("running").is_not_null())
    bad = parsed.filter(pl.col("running").is_null())
    if bad.height:
        out.unmatched.append(bad.get_column("_seq"))
    if ok.height == 0:
        return
    out.used.append(ok.get_column("_seq"))
    fields = [
        "engine", "engines", "prompt_tps", "gen_tps", "running", "swapped", "pending",
        "waiting", "deferred", "preemptions", "device", "kv_pct", "prefix_pct",
    ]  # fmt: skip
    out.stats.append(ok.select(*TIME_COLUMNS, "level", *fields))
    out.evidence |= _stats_evidence(ok)


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
    out.used.append(ok.get_column("_seq"))
    out.stats.append(ok.select(*TIME_COLUMNS, "level", pl.col("prefix_pct").cast(pl.String)))
    out.evidence.add("v0")


def _config(others: pl.DataFrame, out: Extracted) -> None:
    for entry in CONFIG_LINES:
        hit = others.filter(
            pl.col("body").str.contains(entry.literal, literal=True)
            & pl.col("body").str.contains(entry.pattern)
        )
        if hit.height == 0:
            continue
        out.used.append(hit.get_column("_seq"))
        if entry.family is not None:
            out.evidence.add(entry.family)
        groups = _group_names(entry.pattern)
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
    return frame.select(
        *TIME_COLUMNS,
        key=pl.lit(key),
        value=value.cast(pl.String),
        conv=pl.lit(conv),
        line=pl.lit(name),
    ).filter(pl.col("value").is_not_null())


def _events(others: pl.DataFrame, out: Extracted) -> None:
    for entry in EVENT_LINES:
        hit = others.filter(
            pl.col("body").str.contains(entry.literal, literal=True)
            & pl.col("body").str.contains(entry.pattern)
        )
        if hit.height == 0:
            continue
        out.used.append(hit.get_column("_seq"))
        if entry.family is not None:
            out.evidence.add(entry.family)
        groups = _group_names(entry.pattern)
        encoded = (
            pl.col("body").str.extract_groups(entry.pattern).struct.json_encode()
            if groups
            else pl.lit("{}")
        )
        out.events.append(
            hit.select(
                *TIME_COLUMNS, kind=pl.lit(entry.kind), name=pl.lit(entry.name), groups=encoded
            )
        )


def _requests(rows: pl.DataFrame, out: Extracted) -> None:
    if rows.height == 0:
        return
    # The classifier already saw how each line starts: split once, then each entry only looks
    # at its own rows.
    groups = rows.with_columns(_lead=pl.col("_req").str.extract(r"^(\S+ ?\S*)", 1)).partition_by(
        "_lead", as_dict=True
    )
    by_lead = {str(key[0]).strip(): frame for key, frame in groups.items()}
    handled: set[str] = set()
    for entry in REQUEST_LINES:
        if entry.pattern in handled:
            continue
        handled.add(entry.pattern)
        lead = entry.lead if entry.lead in by_lead else entry.lead.split(" ")[0]
        hit = by_lead.get(lead)
        if hit is None:
            continue
        hit = hit.filter(pl.col("body").str.contains(entry.pattern))
        if hit.height == 0:
            continue
        out.used.append(hit.get_column("_seq"))
        if entry.family is not None:
            out.evidence.add(entry.family)
        out.requests.append(_request_rows(hit.drop("_lead"), entry.event, entry.pattern))
        if entry.pattern == PREEMPT:
            out.events.append(_preemption_events(hit))


def _request_rows(hit: pl.DataFrame, event: str, pattern: str) -> pl.DataFrame:
    g = pl.col("_g")
    # The fields sit at the start of the line (ids are short): capture on a short head, which
    # costs a fraction of capturing over a long line. Id lists and the V0 counter are at the end.
    whole = "ids" in _group_names(pattern) or pattern == PREEMPT
    text = pl.col("body") if whole else pl.col("body").str.head(_ID_HEAD)
    frame = hit.with_columns(_g=text.str.extract_groups(pattern))
    names = _group_names(pattern)
    base: dict[str, pl.Expr] = {
        "request_id": g.struct.field("id").str.strip_suffix(".")
        if "id" in names
        else pl.lit(None, pl.String),
        "event": pl.lit(event),
        "prompt_tokens": pl.lit(None, pl.Int64),
        "max_tokens": pl.lit(None, pl.Int64),
        "output_tokens": pl.lit(None, pl.Int64),
        "_kind": pl.lit(event),
        "_capped": pl.lit(value=False),
    }
    if event == "arrived":
        frame = _with_token_count(frame, "prompt_token_ids: [")
        base |= _received()
    elif "ids" in names:
        frame = frame.with_columns(
            _ids=g.struct.field("ids")
            .str.strip_suffix(".")
            .str.split(",")
            .list.eval(pl.element().str.strip_chars())
        ).explode("_ids")
        base["request_id"] = pl.col("_ids")
    elif "what" in names:
        why = g.struct.field("why").fill_null("")
        base["event"] = (
            pl.when(why.is_in(["bad request", "input error"]))
            .then(pl.lit("rejected"))
            .otherwise(pl.lit("aborted"))
        )
    elif "stream" in names:
        frame = _with_token_count(frame, "output_token_ids: [")
        base |= _generated(g)
    # Requests are never de-duplicated across ranks (one API server prints them), so the
    # process key and repeat count are not kept: this table is the bulk of what accumulates.
    return frame.select(*_REQUEST_TIME, **base)


def _received() -> dict[str, pl.Expr]:
    body = pl.col("body")
    params_first = body.str.contains(r"^Received request \S+?: params: ")
    details = body.str.starts_with("Request ")
    found = body.str.extract_all(r"(?-u:\b)max_tokens=(?:[0-9]+|None)")
    # The params come before the prompt preview from 0.12 and after the prompt text before it:
    # take the occurrence inside SamplingParams, never one inside the user's prompt.
    max_tokens = pl.when(params_first).then(found.list.first()).otherwise(found.list.last())
    return {
        "max_tokens": pl.when(details)
        .then(None)
        .otherwise(max_tokens.str.slice(11).cast(pl.Int64, strict=False)),
        "prompt_tokens": pl.col("_count"),
        "_kind": pl.when(details).then(pl.lit("details")).otherwise(pl.lit("arrived")),
        "_capped": params_first & pl.col("_count").is_not_null(),
    }


def _with_token_count(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """``_count``: the number of ids in the ``key`` list of ``body`` (see :func:`_listed_count`),
    or, on a line the collector's log tail redacted, the count it states in place of the list
    (``prompt_token_ids: <2 token ids>``, :func:`collectors.redact.redact_line`)."""
    frame = _listed_count(frame, key)
    redacted = key.removesuffix("[") + "<"
    if not frame.get_column("body").str.contains(redacted, literal=True).any():
        return frame
    stated = pl.col("body").str.extract(re.escape(redacted) + r"([0-9]+) token ids>", 1)
    return frame.with_columns(_count=pl.coalesce("_count", stated.cast(pl.Int64)))


def _listed_count(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """``_count``: the length of the last ``key ... ]`` id list in ``body``
    (``prompt_token_ids: [1, 2]`` -> 2; null when there is none). The last, because a prompt
    printed before the list may itself contain the key. Split on the key, cut at ``]``, count
    commas: several times cheaper than a capturing regex over the list."""
    body = frame.get_column("body")
    has = body.str.contains(key, literal=True)
    if not has.any():
        return frame.with_columns(_count=pl.lit(None, pl.Int64))
    pieces = pl.col("body").str.split(key)
    frame = frame.with_columns(
        _listed=has & (pieces.list.len() > 1),
        _ids=pl.when(has).then(pieces.list.last().str.splitn("]", 2).struct.field("field_0")),
    )
    ids = pl.col("_ids")
    count = (
        pl.when(ids.str.len_bytes() == 0).then(0).otherwise(ids.str.count_matches(",") + 1)
    ).cast(pl.Int64)
    valid = pl.col("_listed") & ids.str.contains(r"^[0-9, ]*$")
    return frame.with_columns(_count=pl.when(valid).then(count)).drop("_listed", "_ids")


def _generated(g: pl.Expr) -> dict[str, pl.Expr]:
    body = pl.col("body")
    stream = g.struct.field("stream").fill_null("")
    kind = (
        pl.when(g.struct.field("details").is_not_null())
        .then(pl.lit("output_details"))
        .when(stream.str.contains("delta", literal=True))
        .then(pl.lit("delta"))
        .when(stream.str.contains("complete", literal=True))
        .then(pl.lit("complete"))
        .otherwise(pl.lit("response"))
    )
    summary = body.str.extract(r": output: '<streaming_complete: ([0-9]+) tokens>'", 1)
    finish = body.str.extract(r", finish_reason: (\w+)$", 1)
    return {
        "event": pl.when(finish == "abort").then(pl.lit("aborted")).otherwise(pl.lit("finished")),
        "output_tokens": pl.coalesce(pl.col("_count"), summary.cast(pl.Int64)),
        "_kind": kind,
    }


def _preemption_events(hit: pl.DataFrame) -> pl.DataFrame:
    encoded = pl.col("body").str.extract_groups(PREEMPT).struct.json_encode()
    return hit.select(
        *TIME_COLUMNS, kind=pl.lit("preemption"), name=pl.lit("preemption (V0)"), groups=encoded
    )


@cache
def _group_names(pattern: str) -> list[str]:
    return list(re.compile(pattern).groupindex)
