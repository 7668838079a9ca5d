"""Per-chunk reading of vLLM's request lines into request rows (still on the printed clock).

Each entry of :data:`~oomtrace.ingest.vllm.line_patterns.REQUEST_LINES` looks only at the records
whose lead it owns. Ids are captured from the head of the line (they sit at its start), except
in the two shapes nearly every request line has, which are read without a capture to the same
result (``tests/unit/ingest/vllm/test_chunk_readers.py`` holds them to the capture); token id lists
are counted, never kept. :mod:`oomtrace.ingest.vllm.request_table` finishes the table once the whole
file is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Final

import polars as pl

from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.vllm.frames import EVENT_ROWS, REQUEST_ROWS, REQUEST_TIME
from oomtrace.ingest.vllm.line_patterns import PREEMPT, Family
from oomtrace.ingest.vllm.line_records import TIME_COLUMNS
from oomtrace.ingest.vllm.request_patterns import RECEIVED, REQUEST_LINES

ID_HEAD: Final = 320
RECEIVED_LEAD: Final = "Received request "
ADDED_LEAD: Final = "Added request "
PARAMS_FIRST: Final = r"^Received request \S+?: params: "
# ``^Added request (?P<id>\S+)$``: a literal lead, then the id to the end of the line.
_TAIL_ID: Final = re.compile(r"\^([A-Za-z ]+ )\(\?P<id>\\S\+\)\$")


@dataclass
class RequestLines:
    """What one chunk's request lines gave: request rows (one frame, in file order), the
    ``record_seq`` of the lines put to use, the version families they prove, preemption events."""

    rows: pl.DataFrame | None = None
    used: list[pl.Series] = field(default_factory=list)
    families: set[Family] = field(default_factory=set)
    preemptions: list[pl.DataFrame] = field(default_factory=list)


def read_requests(by_req: dict[str, pl.DataFrame]) -> RequestLines:
    """Request rows from the records of each request lead (as the classifier read it)."""
    out = RequestLines()
    by_lead: dict[str, pl.DataFrame] = {}
    for req, part in by_req.items():
        lead = _lead_of(req)
        by_lead[lead] = pl.concat([by_lead[lead], part]) if lead in by_lead else part
    parts: list[pl.DataFrame] = []
    handled: set[str] = set()
    for entry in REQUEST_LINES:
        if entry.pattern in handled:
            continue
        handled.add(entry.pattern)
        lead = entry.lead if entry.lead in by_lead else entry.lead.split(" ")[0]
        hit = by_lead.get(lead)
        if hit is None:
            continue
        if entry.pattern == RECEIVED:
            hit = _match_received(hit)
        else:
            hit = hit.filter(pl.col("body").str.contains(entry.pattern))
        if hit.height == 0:
            continue
        out.used.append(hit.get_column("record_seq"))
        if entry.family is not None:
            out.families.add(entry.family)
        parts.append(_request_rows(hit, entry.event, entry.pattern))
        if entry.pattern == PREEMPT:
            out.preemptions.append(_preemption_events(hit))
    if parts:
        # One frame per chunk, in file order (the chunks' frames then concatenate sorted).
        rows = pl.concat(parts, how="diagonal_relaxed")
        rows = rows.sort("record_seq", maintain_order=True) if len(parts) > 1 else rows
        out.rows = check_frame(rows, REQUEST_ROWS, "vLLM request rows")
    return out


def scanned_requests(requests: pl.DataFrame, runs: pl.DataFrame, chunk: int) -> pl.DataFrame:
    """Request rows of the records the scanner read (:mod:`.scanned_chunk`): their fields and
    the placed times of their runs (``runs``: printed fields and ``year_offset``, by ``run``)."""
    rows = requests.with_columns(
        runs.select(pl.all().gather(requests.get_column("run"))),
        chunk=pl.lit(chunk, REQUEST_TIME["chunk"]),
        arrival_ts=pl.lit(None, REQUEST_TIME["arrival_ts"]),
    )
    return check_frame(rows.select(*REQUEST_ROWS), REQUEST_ROWS, "vLLM request rows")


def merge_request_rows(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """One chunk's request rows from both readers, in file order."""
    if len(parts) == 1:
        return parts[0]
    # An abort line naming several requests gives rows of one record_seq, in the order it names
    # them: the sort must keep it.
    return pl.concat(parts).sort("record_seq", maintain_order=True)


@cache
def _lead_of(req: str) -> str:
    """The words a request lead starts with (``"Received request "`` -> "Received request")."""
    found = re.match(r"^(\S+ ?\S*)", req)
    return found.group(1).strip() if found else ""


def _request_rows(hit: pl.DataFrame, event: str, pattern: str) -> pl.DataFrame:
    g = pl.col("_g")
    names = group_names(pattern)
    frame = _with_id(hit, pattern)
    base: dict[str, pl.Expr] = {
        "request_id": pl.col("captured_id").str.strip_suffix(".")
        if "id" in names
        else pl.lit(None, pl.String),
        "event": pl.lit(event),
        "prompt_tokens": pl.lit(None, pl.Int64),
        "max_tokens": pl.lit(None, pl.Int64),
        "output_tokens": pl.lit(None, pl.Int64),
        **{name: pl.lit(None, pl.Int64) for name in PARAMS if name != "max_tokens"},
        "line_kind": pl.lit(event),
        "count_may_be_capped": pl.lit(value=False),
    }
    if event == "arrived":
        frame = _with_token_count(frame, "prompt_token_ids: [")
        if "params_first" not in frame.columns:
            frame = frame.with_columns(params_first=pl.col("body").str.contains(PARAMS_FIRST))
        frame = _with_max_tokens(frame)
        base |= _received()
    elif "ids" in names:
        frame = frame.with_columns(
            # a record cut from a line that ran on ("... cmpl-a. INFO 06-19 ...": a paste that
            # lost its newlines) keeps the blank after its full stop
            _ids=g.struct.field("ids")
            .str.strip_chars()
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
    return frame.select(*REQUEST_TIME, **base)


def _with_id(hit: pl.DataFrame, pattern: str) -> pl.DataFrame:
    """``hit`` with ``captured_id``, the ``id`` group of ``pattern`` as a capture of the first
    :data:`ID_HEAD` characters gives it (the fields sit at the start; id lists and the V0
    counter sit at the end, so those patterns see the whole line, in ``_g``).

    Two shapes are read without a capture, to the same result: ``^Literal (?P<id>\\S+)$`` (the
    id is the rest of the head) and :data:`RECEIVED` (the id ends at the first colon; whether
    the params come first is the word after it)."""
    names = group_names(pattern)
    body = pl.col("body")
    tail = _TAIL_ID.fullmatch(pattern)
    if tail is not None:
        start = len(tail.group(1))
        return hit.with_columns(captured_id=body.str.slice(start, ID_HEAD - start))
    if "captured_id" in hit.columns:  # read already (RECEIVED)
        return hit
    whole = "ids" in names or pattern == PREEMPT
    text = body if whole else body.str.head(ID_HEAD)
    frame = hit.with_columns(_g=text.str.extract_groups(pattern))
    if "id" in names:
        frame = frame.with_columns(captured_id=pl.col("_g").struct.field("id"))
    return frame


def _match_received(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows that match :data:`RECEIVED`, with ``captured_id`` and ``params_first`` (the
    params come first), read without a pattern: the lead, then an id that runs to the first
    colon and holds no whitespace, then ``: prompt: `` or ``: params: ``. An id so long that the
    match would end past :data:`ID_HEAD` bytes is captured as the table's pattern does it."""
    lead = len(RECEIVED_LEAD)
    body, colon, word = pl.col("body"), pl.col("_colon"), pl.col("_word")
    raw = body.cast(pl.Binary)
    frame = rows.with_columns(_colon=body.str.find(":", literal=True)).with_columns(
        captured_id=raw.bin.slice(lead, colon - lead).cast(pl.String),
        _word=raw.bin.slice(colon, len(": params: ")),
    )
    frame = frame.filter(
        (
            body.str.starts_with(RECEIVED_LEAD)
            & (colon > lead)
            & word.is_in([b": prompt: ", b": params: "])
            & ~pl.col("captured_id").str.contains(r"\s")
        ).fill_null(value=False)
    ).with_columns(params_first=word == b": params: ")
    long = colon + len(": params: ") > ID_HEAD
    if frame.select(long.any()).item():
        frame = frame.with_columns(
            captured_id=pl.when(long)
            .then(body.str.head(ID_HEAD).str.extract(RECEIVED, 1))
            .otherwise("captured_id")
        )
    return frame.drop("_colon", "_word")


# The SamplingParams fields a request row keeps: its length limit, and what sizes its step
# (sequences sampled in parallel, top log-probabilities asked for, over the prompt too).
PARAMS: Final = ("max_tokens", "n", "best_of", "logprobs", "prompt_logprobs")
_PARAM_TEXT: Final = r"(?-u:\b)(?:" + "|".join(PARAMS) + r")=(?:[0-9]+|None)"


def _with_max_tokens(frame: pl.DataFrame) -> pl.DataFrame:
    """``<field>_text`` for each of :data:`PARAMS`: its ``field=N`` inside SamplingParams, from
    one scan of the line. The params come before the prompt preview from 0.12 and after the
    prompt text before it: the first occurrence where the params come first, else the last,
    never one inside the user's prompt (a word boundary keeps ``logprobs=`` apart from
    ``prompt_logprobs=``, ``n=`` apart from ``min_tokens=``)."""
    frame = frame.with_columns(_all=pl.col("body").str.extract_all(_PARAM_TEXT))
    all_first = frame.get_column("params_first").all()
    picked = []
    for name in PARAMS:
        mine = pl.col("_all").list.eval(
            pl.element().filter(pl.element().str.starts_with(name + "="))
        )
        first, last = mine.list.first(), mine.list.last()
        value = first if all_first else pl.when(pl.col("params_first")).then(first).otherwise(last)
        picked.append(value.alias(f"{name}_text"))
    return frame.with_columns(picked).drop("_all")


def _param(name: str) -> pl.Expr:
    text = pl.col(f"{name}_text").str.slice(len(name) + 1)
    return text.cast(pl.Int64, strict=False)


def _received() -> dict[str, pl.Expr]:
    details = pl.col("body").str.starts_with("Request ")
    return {
        **{
            name: pl.when(details).then(None).otherwise(_param(name))
            for name in PARAMS
            if name != "max_tokens"
        },
        "max_tokens": pl.when(details).then(None).otherwise(_param("max_tokens")),
        "prompt_tokens": pl.col("token_count"),
        "line_kind": pl.when(details).then(pl.lit("details")).otherwise(pl.lit("arrived")),
        "count_may_be_capped": pl.col("params_first") & pl.col("token_count").is_not_null(),
    }


def _with_token_count(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """``token_count``: the number of ids in the last ``key ... ]`` list in ``body``
    (``prompt_token_ids: [1, 2]`` -> 2; null when there is none), or the count a collector kept
    when it redacted the list at capture (``prompt_token_ids: <2 token ids>``)."""
    marker = key.removesuffix("[") + "<"
    # Most request lines carry neither form: one scan rules both out.
    either = re.escape(key.removesuffix("[")) + r"[\[<]"
    if not frame.get_column("body").str.contains(either).any():
        return frame.with_columns(token_count=pl.lit(None, pl.Int64))
    frame = _listed_count(frame, key)
    if not frame.get_column("body").str.contains(marker, literal=True).any():
        return frame
    stated = pl.col("body").str.extract(re.escape(marker) + r"([0-9]+) token ids>", 1)
    return frame.with_columns(
        token_count=pl.coalesce("token_count", stated.cast(pl.Int64, strict=False))
    )


def _listed_count(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """The length of the last ``key ... ]`` id list. The last, because a prompt printed before
    the list may itself contain the key. Split on the key, cut at ``]``, count commas: several
    times cheaper than a capturing regex over the list."""
    has = frame.get_column("body").str.contains(key, literal=True)
    if not has.any():
        return frame.with_columns(token_count=pl.lit(None, pl.Int64))
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
    return frame.with_columns(token_count=pl.when(valid).then(count)).drop("_listed", "_ids")


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
        "output_tokens": pl.coalesce(pl.col("token_count"), summary.cast(pl.Int64)),
        "line_kind": kind,
    }


def _preemption_events(hit: pl.DataFrame) -> pl.DataFrame:
    encoded = pl.col("body").str.extract_groups(PREEMPT).struct.json_encode()
    rows = hit.select(
        *TIME_COLUMNS,
        kind=pl.lit("preemption"),
        line_name=pl.lit("preemption (V0)"),
        captures_json=encoded,
    )
    return check_frame(rows, EVENT_ROWS, "vLLM event rows")


@cache
def group_names(pattern: str) -> list[str]:
    return list(re.compile(pattern).groupindex)
