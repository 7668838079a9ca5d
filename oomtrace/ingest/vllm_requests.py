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
* ``admitted`` is "Added request": in V1 that is when the request enters the engine core's
  queue, not when the scheduler first runs it.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics

INFO_PREVIEW_IDS: Final = 512
ENDING_WINDOW_S: Final = 60
_INTERNAL_SUFFIX: Final = r"-[0-9a-f]{8}$"
OUTPUT: Final = ["ts", "request_id", "event", "prompt_tokens", "max_tokens", "output_tokens"]


def finish_requests(
    rows: pl.DataFrame, max_log_len: int | None, diag: SourceDiagnostics
) -> pl.DataFrame:
    """Canonical request rows (without node/source) from the extracted rows (with ``ts``)."""
    rows = rows.filter(pl.col("request_id").is_not_null() & (pl.col("request_id") != ""))
    if rows.height == 0:
        return rows.select(OUTPUT)
    rows = _join_internal_ids(rows.sort("_seq"))
    rows = _cap_truncated(rows, max_log_len, diag)
    rows = _merge_details(rows)
    rows = _streams(rows)
    return _one_ending(rows).select(OUTPUT)


def _one_ending(rows: pl.DataFrame) -> pl.DataFrame:
    """One abort (or rejection) told by two lines ("Aborted request(s) a,b." and "Request b
    failed (engine dead).") is one event: a repeat of the same ending for the same id within
    :data:`ENDING_WINDOW_S` is dropped. Later ones are kept (ids can be reused after a
    restart)."""
    ending = pl.col("event").is_in(["aborted", "rejected"])
    endings = rows.filter(ending)
    if endings.height == 0:
        return rows
    previous = pl.col("ts").shift(1).over("request_id", "event", order_by="_seq")
    repeat = (pl.col("ts") - previous).dt.total_seconds() <= ENDING_WINDOW_S
    kept = endings.filter(~repeat.fill_null(value=False))
    return pl.concat([rows.filter(~ending), kept]).sort("_seq")


def _join_internal_ids(rows: pl.DataFrame) -> pl.DataFrame:
    external = rows.filter(pl.col("_kind").is_in(["arrived", "details"])).get_column("request_id")
    if external.len() == 0:
        return rows
    stripped = pl.col("request_id").str.replace(_INTERNAL_SUFFIX, "")
    known = external.unique().implode()
    return rows.with_columns(
        request_id=pl.when(~pl.col("request_id").is_in(known) & stripped.is_in(known))
        .then(stripped)
        .otherwise(pl.col("request_id"))
    )


def _cap_truncated(
    rows: pl.DataFrame, max_log_len: int | None, diag: SourceDiagnostics
) -> pl.DataFrame:
    caps: list[pl.Expr] = []
    if max_log_len is not None:
        caps.append(pl.col("prompt_tokens") >= max_log_len)
    preview = pl.col("_capped") & (pl.col("prompt_tokens") >= (max_log_len or INFO_PREVIEW_IDS))
    caps.append(preview)
    cut = pl.any_horizontal(caps).fill_null(value=False)
    out_cut = (
        (pl.col("output_tokens") >= max_log_len).fill_null(value=False)
        if max_log_len is not None
        else pl.lit(value=False)
    )
    n_prompt = int(rows.select(cut.sum()).item())
    n_output = int(rows.select(out_cut.sum()).item())
    if n_prompt or n_output:
        diag.note(
            f"{n_prompt + n_output:,} token id list(s) were cut by --max-log-len or vLLM's "
            "preview limit: their token counts are left empty (a lower bound is not the count)"
        )
    return rows.with_columns(
        prompt_tokens=pl.when(cut).then(None).otherwise(pl.col("prompt_tokens")),
        output_tokens=pl.when(out_cut).then(None).otherwise(pl.col("output_tokens")),
    )


def _merge_details(rows: pl.DataFrame) -> pl.DataFrame:
    """DEBUG detail lines fill the counts of the INFO line of the same request."""
    if not rows.select(pl.col("_kind").is_in(["details", "output_details"]).any()).item():
        return rows
    details = (
        rows.filter(pl.col("_kind") == "details")
        .group_by("request_id", maintain_order=True)
        .agg(_dp=pl.col("prompt_tokens").first())
    )
    out_details = (
        rows.filter(pl.col("_kind") == "output_details")
        .group_by("request_id", maintain_order=True)
        .agg(_do=pl.col("output_tokens").first())
    )
    arrived_ids = rows.filter(pl.col("_kind") == "arrived").get_column("request_id").implode()
    finished_ids = rows.filter(pl.col("_kind") == "response").get_column("request_id").implode()
    rows = rows.join(details, on="request_id", how="left").join(
        out_details, on="request_id", how="left"
    )
    orphan_details = (pl.col("_kind") == "details") & ~pl.col("request_id").is_in(arrived_ids)
    orphan_outputs = (pl.col("_kind") == "output_details") & ~pl.col("request_id").is_in(
        finished_ids
    )
    return (
        rows.with_columns(
            prompt_tokens=pl.when(pl.col("_kind") == "arrived")
            .then(pl.coalesce("_dp", "prompt_tokens"))
            .otherwise(pl.col("prompt_tokens")),
            output_tokens=pl.when(pl.col("_kind") == "response")
            .then(pl.coalesce("output_tokens", "_do"))
            .otherwise(pl.col("output_tokens")),
            _kind=pl.when(orphan_details)
            .then(pl.lit("arrived"))
            .when(orphan_outputs)
            .then(pl.lit("response"))
            .otherwise(pl.col("_kind")),
        )
        .filter(~pl.col("_kind").is_in(["details", "output_details"]))
        .drop("_dp", "_do")
    )


def _streams(rows: pl.DataFrame) -> pl.DataFrame:
    """Per-chunk streaming lines: cumulative output tokens; the first is ``first_token``."""
    deltas = pl.col("_kind") == "delta"
    if not rows.select(deltas.any()).item():
        return rows
    tokens = pl.when(deltas).then(pl.col("output_tokens").fill_null(0)).otherwise(0)
    first = pl.col("_seq").filter(deltas).min().over("request_id")
    complete = (pl.col("_kind") == "complete") & deltas.any().over("request_id")
    # rows are in file order (sorted by _seq), so the running sum follows the stream.
    return rows.with_columns(
        event=pl.when(deltas & (pl.col("_seq") == first))
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
