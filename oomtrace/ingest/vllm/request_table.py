"""The request table from vLLM's request lines, once the whole file is read.

* One request, one id: from 0.14 the engine adds 8 hex characters to the id it was given
  (``chatcmpl-abc`` -> ``chatcmpl-abc-1a2b3c4d``) and prints that internal id in "Added
  request" and abort lines; such ids are joined back to the external id that "Received
  request" printed.
* 0.12+ prints the prompt token ids at DEBUG in a separate "Request X details" line; its count
  fills the ``arrived`` event. 0.33 does the same for output token ids.
* Streamed responses with ``--enable-log-outputs`` print one "(streaming delta)" line per
  chunk: the first becomes ``first_token``, the others ``progress`` with the cumulative output
  token count; "(streaming complete)" is ``finished`` with the total.
* A token id list cut by ``--max-log-len`` (or by the 512-id cap of the 0.33 INFO preview)
  gives no count: a lower bound is not the number.
* "Added request" is when the request enters the engine's waiting queue (V0 and V1), not when the
  scheduler first runs it: it is a second ``arrived`` event (the engine side's), never an
  ``admitted`` one. No vLLM log line states a scheduling; the analysis infers admissions from the
  running count (:mod:`oomtrace.analysis.admission`).
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.vllm.frames import SETTLED_REQUEST_ROWS

INFO_PREVIEW_IDS: Final = 512
ENDING_WINDOW_S: Final = 60
_INTERNAL_SUFFIX: Final = r"-[0-9a-f]{8}$"
OUTPUT: Final = [
    "ts",
    "request_id",
    "event",
    "prompt_tokens",
    "max_tokens",
    "output_tokens",
    "n",
    "best_of",
    "logprobs",
    "prompt_logprobs",
]


def finish_requests(
    rows: pl.DataFrame, max_log_len: int | None, diag: SourceDiagnostics
) -> pl.DataFrame:
    """Canonical request rows (without node/source) from the extracted rows (with ``ts``)."""
    check_frame(rows, SETTLED_REQUEST_ROWS, "vLLM request rows")
    named = pl.col("request_id").is_not_null() & (pl.col("request_id") != "")
    if not rows.select(named.all()).item():
        rows = rows.filter(named)
    if rows.height == 0:
        return rows.select(OUTPUT)
    # One abort line can name several requests: their rows share a record_seq, and _row keeps them
    # in the order the line names them.
    if not rows.get_column("record_seq").is_sorted():
        rows = rows.sort("record_seq", maintain_order=True)
    rows = _join_internal_ids(rows.with_row_index("_row"))
    rows = _cap_truncated(rows, max_log_len, diag)
    rows = _merge_details(rows)
    rows = _streams(rows)
    return _one_arrival(_one_ending(rows)).select(OUTPUT)


def drop_told_additions(rows: pl.DataFrame) -> pl.DataFrame:
    """Part of one chunk's request rows (before :func:`finish_requests`) without the "Added
    request" rows that :func:`_one_arrival` would drop for a "Received request" row of the
    same chunk: the same rows in the end, half as many carried to it by a busy server's log.
    Only rows with a full time (``outer_ts``, ``arrival_ts``) go: one whose printed time turns
    out to place nothing is counted as such first."""
    added = (pl.col("event") == "admitted") & pl.coalesce("arrival_ts", "outer_ts").is_not_null()
    if not rows.select(added.any()).item():
        return rows
    return rows.filter(~_told(rows, added))


def _told(rows: pl.DataFrame, added: pl.Expr) -> pl.Expr:
    """``added`` rows whose id a "Received request" row of ``rows`` names too. The additions
    left are few (the scanner drops those it saw told), the arrivals many: only the ids of
    the additions are hashed, and only the arrivals that share one are looked up again."""
    ids = pl.col("request_id")
    added_ids = rows.filter(added).get_column("request_id").implode()
    told = rows.filter((pl.col("event") == "arrived") & ids.is_in(added_ids))
    return added & ids.is_in(told.get_column("request_id").implode())


def _one_arrival(rows: pl.DataFrame) -> pl.DataFrame:
    """ "Added request" is the engine side's arrival: where the API server's "Received request"
    line told it already, with nothing more stated, it is the same arrival and is dropped;
    otherwise (no request line, or counts only it states) it is the request's arrival."""
    added = pl.col("event") == "admitted"
    if not rows.select(added.any()).item():
        return rows
    bare = pl.all_horizontal(
        pl.col(c).is_null() for c in ("prompt_tokens", "max_tokens", "output_tokens")
    )
    return rows.filter(~(_told(rows, added) & bare)).with_columns(
        event=pl.when(added).then(pl.lit("arrived")).otherwise(pl.col("event"))
    )


def _one_ending(rows: pl.DataFrame) -> pl.DataFrame:
    """One abort (or rejection) told by two lines ("Aborted request(s) a,b." and "Request b
    failed (engine dead).") is one event: a repeat of the same ending for the same id within
    :data:`ENDING_WINDOW_S` is dropped. Later ones are kept (ids can be reused after a
    restart)."""
    ending = _one_of("event", "aborted", "rejected")
    endings = rows.filter(ending).select("_row", "record_seq", "request_id", "event", "ts")
    if endings.height == 0:
        return rows
    # Each id's endings of one kind in file order, the one before on the row above: a sort of
    # the few endings (a window over them orders each group apart, several times the cost).
    endings = endings.sort("request_id", "event", "record_seq")
    same = (pl.col("request_id") == pl.col("request_id").shift(1)) & (
        pl.col("event") == pl.col("event").shift(1)
    )
    repeat = same & ((pl.col("ts") - pl.col("ts").shift(1)).dt.total_seconds() <= ENDING_WINDOW_S)
    dropped = endings.filter(repeat.fill_null(value=False)).get_column("_row")
    if dropped.len() == 0:
        return rows
    return rows.filter(~pl.col("_row").is_in(dropped.implode()))


def _one_of(column: str, *values: str) -> pl.Expr:
    """``column`` is one of ``values``: a comparison per value (``is_in`` hashes every row's
    string, several times the cost on a day's request rows)."""
    return pl.any_horizontal(pl.col(column) == value for value in values)


def _join_internal_ids(rows: pl.DataFrame) -> pl.DataFrame:
    named = _one_of("line_kind", "arrived", "details")
    # Only an id with the engine's suffix, that the request lines never named, can be an
    # internal one: the suffix test (anchored at the end) runs on the few rows left.
    suffixed = rows.filter(~named).filter(pl.col("request_id").str.contains(_INTERNAL_SUFFIX))
    if suffixed.height == 0:
        return rows
    external = rows.filter(named).get_column("request_id")
    if external.len() == 0:
        return rows
    known = external.implode()
    unnamed = suffixed.filter(~pl.col("request_id").is_in(known)).select("_row", "request_id")
    if unnamed.height == 0:
        return rows
    stripped = pl.col("request_id").str.replace(_INTERNAL_SUFFIX, "")
    joined = unnamed.filter(stripped.is_in(known)).select("_row", captured_id=stripped)
    if joined.height == 0:
        return rows
    return (
        rows.join(joined, on="_row", how="left", maintain_order="left")
        .with_columns(request_id=pl.coalesce("captured_id", "request_id"))
        .drop("captured_id")
    )


def _cap_truncated(
    rows: pl.DataFrame, max_log_len: int | None, diag: SourceDiagnostics
) -> pl.DataFrame:
    caps: list[pl.Expr] = []
    if max_log_len is not None:
        caps.append(pl.col("prompt_tokens") >= max_log_len)
    preview = pl.col("count_may_be_capped") & (
        pl.col("prompt_tokens") >= (max_log_len or INFO_PREVIEW_IDS)
    )
    caps.append(preview)
    cut = pl.any_horizontal(caps).fill_null(value=False)
    out_cut = (
        (pl.col("output_tokens") >= max_log_len).fill_null(value=False)
        if max_log_len is not None
        else pl.lit(value=False)
    )
    n_prompt, n_output = rows.select(cut.sum(), out_cut.sum()).row(0)
    if not n_prompt and not n_output:
        return rows
    diag.note(
        f"{n_prompt + n_output:,} token id list(s) were cut by --max-log-len or vLLM's "
        "preview limit: their token counts are left empty (a lower bound is not the count)",
        lost=True,
    )
    return rows.with_columns(
        prompt_tokens=pl.when(cut).then(None).otherwise(pl.col("prompt_tokens")),
        output_tokens=pl.when(out_cut).then(None).otherwise(pl.col("output_tokens")),
    )


def _merge_details(rows: pl.DataFrame) -> pl.DataFrame:
    """DEBUG detail lines fill the counts of the INFO line of the same request."""
    if not rows.select(pl.col("line_kind").is_in(["details", "output_details"]).any()).item():
        return rows
    details = (
        rows.filter(pl.col("line_kind") == "details")
        .group_by("request_id", maintain_order=True)
        .agg(_dp=pl.col("prompt_tokens").first())
    )
    out_details = (
        rows.filter(pl.col("line_kind") == "output_details")
        .group_by("request_id", maintain_order=True)
        .agg(_do=pl.col("output_tokens").first())
    )
    arrived_ids = rows.filter(pl.col("line_kind") == "arrived").get_column("request_id").implode()
    finished_ids = rows.filter(pl.col("line_kind") == "response").get_column("request_id").implode()
    rows = rows.join(details, on="request_id", how="left", maintain_order="left").join(
        out_details, on="request_id", how="left", maintain_order="left"
    )
    orphan_details = (pl.col("line_kind") == "details") & ~pl.col("request_id").is_in(arrived_ids)
    orphan_outputs = (pl.col("line_kind") == "output_details") & ~pl.col("request_id").is_in(
        finished_ids
    )
    return (
        rows.with_columns(
            prompt_tokens=pl.when(pl.col("line_kind") == "arrived")
            .then(pl.coalesce("_dp", "prompt_tokens"))
            .otherwise(pl.col("prompt_tokens")),
            output_tokens=pl.when(pl.col("line_kind") == "response")
            .then(pl.coalesce("output_tokens", "_do"))
            .otherwise(pl.col("output_tokens")),
            line_kind=pl.when(orphan_details)
            .then(pl.lit("arrived"))
            .when(orphan_outputs)
            .then(pl.lit("response"))
            .otherwise(pl.col("line_kind")),
        )
        .filter(~pl.col("line_kind").is_in(["details", "output_details"]))
        .drop("_dp", "_do")
    )


def _streams(rows: pl.DataFrame) -> pl.DataFrame:
    """Per-chunk streaming lines: cumulative output tokens; the first is ``first_token``."""
    deltas = pl.col("line_kind") == "delta"
    if not rows.select(deltas.any()).item():
        return rows
    tokens = pl.when(deltas).then(pl.col("output_tokens").fill_null(0)).otherwise(0)
    first = pl.col("record_seq").filter(deltas).min().over("request_id")
    complete = (pl.col("line_kind") == "complete") & deltas.any().over("request_id")
    # rows are in file order (sorted by record_seq), so the running sum follows the stream.
    return rows.with_columns(
        event=pl.when(deltas & (pl.col("record_seq") == first))
        .then(pl.lit("first_token"))
        .when(deltas)
        .then(pl.lit("progress"))
        .otherwise(pl.col("event")),
        output_tokens=pl.when(deltas)
        .then(tokens.cum_sum().over("request_id"))
        .when(complete)
        .then(tokens.sum().over("request_id"))
        .otherwise(pl.col("output_tokens")),
    )
