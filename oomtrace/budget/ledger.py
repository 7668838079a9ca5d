"""The admission ledger: for a list of requests (id, input tokens, max new tokens), what each
reserves under the request contract, the running total in file order, what remains of the cache,
and which requests could never fit even alone. Rows that cannot be used are counted and reported,
never dropped silently. All per-row work is Polars expressions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from oomtrace.budget.kv import KVSpec
from oomtrace.errors import InputError, special_file_error

ID_COLUMNS = ("request_id", "id")
INPUT_COLUMNS = ("input_tokens", "prompt_tokens")
NEW_COLUMNS = ("max_new_tokens", "max_tokens")
LEDGER_SCHEMA = {
    "request_id": pl.String,
    "input_tokens": pl.Int64,
    "max_new_tokens": pl.Int64,
    "stored_tokens": pl.Int64,
    "reserved_tokens": pl.Int64,
    "reserved_bytes": pl.Int64,
    "cumulative_bytes": pl.Int64,
    "fits_alone": pl.Boolean,
    "admitted": pl.Boolean,
}


@dataclass(frozen=True)
class LedgerGap:
    """Rows left out for one reason: how many, and the first one's request id."""

    reason: str
    count: int
    example: str


@dataclass(frozen=True)
class Ledger:
    source: Path
    rows: pl.DataFrame
    available_bytes: int
    gaps: tuple[LedgerGap, ...]

    @property
    def total_bytes(self) -> int:
        return int(self.rows["reserved_bytes"].sum())

    @property
    def remaining_bytes(self) -> int:
        return self.available_bytes - self.total_bytes

    @property
    def admitted(self) -> int:
        return int(self.rows["admitted"].sum())

    @property
    def never_fit(self) -> pl.DataFrame:
        return self.rows.filter(~pl.col("fits_alone"))


def _read_rows(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise special_file_error(path, "--ledger") or InputError(
            f"--ledger {path}: no such file; give a CSV or JSON file of requests"
        )
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pl.read_csv(path, infer_schema_length=0)
        if suffix in (".jsonl", ".ndjson"):
            return pl.read_ndjson(path, infer_schema_length=None)
        if suffix == ".json":
            document = json.loads(path.read_text(encoding="utf-8"))
            records = document.get("requests") if isinstance(document, dict) else document
            if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                raise InputError(
                    f"--ledger {path}: expected a JSON list of request objects "
                    '(or {"requests": [...]})'
                )
            return pl.from_dicts(records, infer_schema_length=None, strict=False)
    except (pl.exceptions.PolarsError, json.JSONDecodeError, UnicodeDecodeError, OSError) as err:
        raise InputError(f"--ledger {path}: cannot be read ({err})") from err
    raise InputError(
        f"--ledger {path}: unknown file type {suffix or '(none)'}; use .csv, .json or .jsonl"
    )


def _pick(frame: pl.DataFrame, names: tuple[str, ...], path: Path) -> str:
    for name in names:
        if name in frame.columns:
            return name
    raise InputError(
        f"--ledger {path}: no column {' or '.join(repr(n) for n in names)} "
        f"(columns: {', '.join(frame.columns) or 'none'})"
    )


def read_ledger(path: Path) -> tuple[pl.DataFrame, tuple[LedgerGap, ...]]:
    """Usable requests (request_id, input_tokens, max_new_tokens) and the rows left out."""
    raw = _read_rows(path)
    in_col, new_col = _pick(raw, INPUT_COLUMNS, path), _pick(raw, NEW_COLUMNS, path)
    id_col = next((c for c in ID_COLUMNS if c in raw.columns), None)
    row_id = pl.concat_str(pl.lit("row "), pl.int_range(1, pl.len() + 1).cast(pl.String))
    ident = pl.col(id_col).cast(pl.String) if id_col else pl.lit(None, dtype=pl.String)
    frame = raw.select(
        pl.coalesce(ident, row_id).alias("request_id"),
        ident.is_null().alias("_no_id"),
        pl.col(in_col)
        .cast(pl.String)
        .str.strip_chars()
        .cast(pl.Int64, strict=False)
        .alias("input_tokens"),
        pl.col(new_col)
        .cast(pl.String)
        .str.strip_chars()
        .cast(pl.Int64, strict=False)
        .alias("max_new_tokens"),
        pl.col(in_col).is_null().alias("_no_in"),
        pl.col(new_col).is_null().alias("_no_new"),
    )
    checks = [
        ("missing input or max new tokens", pl.col("_no_in") | pl.col("_no_new")),
        (
            "token count is not a whole number",
            (pl.col("input_tokens").is_null() & ~pl.col("_no_in"))
            | (pl.col("max_new_tokens").is_null() & ~pl.col("_no_new")),
        ),
        ("negative token count", (pl.col("input_tokens") < 0) | (pl.col("max_new_tokens") < 0)),
    ]
    gaps = []
    bad = pl.lit(value=False)
    for reason, check in checks:
        # Each row is reported once, under the first reason that applies to it.
        rule = check.fill_null(value=False) & ~bad
        hits = frame.filter(rule)
        if hits.height:
            gaps.append(LedgerGap(reason, hits.height, str(hits["request_id"][0])))
        bad = bad | rule
    unnamed = frame.filter(pl.col("_no_id")).height
    if unnamed:
        gaps.append(LedgerGap("no request id (named by row number)", unnamed, "row"))
    usable = frame.filter(~bad).select("request_id", "input_tokens", "max_new_tokens")
    return usable, tuple(gaps)


def build_ledger(path: Path, spec: KVSpec, available_bytes: int, block_size: int = 16) -> Ledger:
    """Each request's reservation (its peak bytes at input + max new tokens), running total in
    file order, whether it fits alone and whether it is admitted in that order."""
    usable, gaps = read_ledger(path)
    stored = pl.col("input_tokens") + pl.col("max_new_tokens")
    rows = (
        usable.with_columns(stored.alias("stored_tokens"))
        .with_columns(
            ((pl.col("stored_tokens") + block_size - 1) // block_size * block_size).alias(
                "reserved_tokens"
            ),
            spec.peak_sequence_bytes_expr(pl.col("stored_tokens"), block_size).alias(
                "reserved_bytes"
            ),
        )
        .with_columns(pl.col("reserved_bytes").cum_sum().alias("cumulative_bytes"))
        .with_columns(
            (pl.col("reserved_bytes") <= available_bytes).alias("fits_alone"),
            (pl.col("cumulative_bytes") <= available_bytes).alias("admitted"),
        )
        .select(list(LEDGER_SCHEMA))
        .cast(LEDGER_SCHEMA)  # type: ignore[arg-type]
    )
    return Ledger(path, rows, available_bytes, gaps)
