"""What the start-up lines say about the engine, once the whole file is read: ``engine_config``
(the first statement of each key wins; a later, different one is a note) and the engine's
version family (:data:`~.line_patterns.FAMILIES`) from the stated version and the line shapes
seen."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from oomtrace.errors import UnitError
from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.vllm.file_tables import Ledger, drop_rank_repeats
from oomtrace.ingest.vllm.frames import CONFIG_ROWS, timed
from oomtrace.ingest.vllm.line_patterns import FAMILY_ORDER, Family
from oomtrace.units import GiB, format_bytes, parse_bytes


def engine_config(rows: pl.DataFrame, ledger: Ledger) -> tuple[dict[str, Any], str | None]:
    """``engine_config`` from the startup rows (first statement of each key wins; a later,
    different statement is a note, e.g. after a restart), and the stated vLLM version."""
    check_frame(rows, timed(CONFIG_ROWS), "vLLM start-up rows")
    config: dict[str, Any] = {}
    changed: dict[str, Any] = {}
    diag = ledger.diag
    rows = drop_rank_repeats(rows, ["line_name", "key", "value"], ledger)
    rows = _smallest_of_ranks(rows)
    for row in rows.sort("order").iter_rows(named=True):
        try:
            value = _convert(row["value"], row["conv"])
        except (ValueError, UnitError):
            diag.note(
                f"{row['line_name']}: {row['key']} value {row['value']!r} did not parse", lost=True
            )
            continue
        key = row["key"]
        if value is None:
            continue
        if key not in config:
            config[key] = value
        elif config[key] != value and key not in changed:
            changed[key] = value
    for key, value in changed.items():
        if key in ("version", "engine_kind"):
            continue
        kept = "the smallest" if key in _SMALLEST_OF_RANKS else "the first"
        diag.note(
            f"engine_config.{key}: another line states {_show(key, value)} (the engine "
            f"restarted or another rank differs); kept {kept}, {_show(key, config[key])}"
        )
    version = config.pop("version", None)
    return config, None if version is None else str(version)


# vLLM gives every worker the KV cache of the smallest budget any of them profiled (V0's executor:
# `num_gpu_blocks = min(b[0] for b in num_blocks)` in determine_num_available_blocks; V1:
# "Change the num_blocks of each rank to the smallest among all ranks" in
# vllm/v1/core/kv_cache_utils.py get_kv_cache_configs): where workers state different budgets at
# one printed second, the smallest is the engine's, whatever the order they were printed in
# (vllm issue 16570: a worker's 0.13 GiB printed before the driver's 0.04 GiB).
_SMALLEST_OF_RANKS: Final = frozenset({"available_kv_cache_bytes"})


def _smallest_of_ranks(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` with an ``order`` to read them in: each start's smallest budget statement (from
    several processes at one printed second) goes first, the others stay for the note."""
    rows = rows.with_columns(order=pl.col("record_seq").cast(pl.Float64))
    budget = rows.filter(pl.col("key").is_in(list(_SMALLEST_OF_RANKS)))
    if budget.height < 2 or budget.get_column("proc").n_unique() < 2:
        return rows
    sizes = []
    for value, conv in budget.select("value", "conv").iter_rows():
        try:
            sizes.append(_convert(value, conv))
        except (ValueError, UnitError):
            sizes.append(None)
    group = ["printed_month_day", "printed_second_of_day", "year_offset", "key"]
    least = (
        budget.with_columns(pl.Series("_size", sizes, dtype=pl.Int64))
        .with_columns(_first=pl.col("record_seq").min().over(group))
        .filter(pl.col("_size") == pl.col("_size").min().over(group))
        .sort("record_seq")
        .unique(group, keep="first", maintain_order=True)
        .select("record_seq", "key", _ahead=pl.col("_first").cast(pl.Float64) - 0.5)
    )
    return (
        rows.join(least, on=["record_seq", "key"], how="left")
        .with_columns(order=pl.coalesce("_ahead", "order"))
        .drop("_ahead")
    )


def _convert(value: str, conv: str) -> Any:
    text = value.strip()
    if conv == "gib":
        return parse_bytes(f"{text} GiB", allow_negative=True)
    if conv == "gb_means_gib":
        # vLLM prints "GB" for a value it computed as bytes / 2**30.
        return parse_bytes(f"{text} GB", decimal_means_binary=True, allow_negative=True)
    if conv == "int":
        return int(text.replace(",", ""))
    if conv == "float":
        return float(text)
    if conv == "bool":
        return text == "True"
    return None if text in ("None", "") else text


def _show(key: str, value: Any) -> str:
    if key.endswith("_bytes") and isinstance(value, int):
        return format_bytes(value) if abs(value) >= GiB // 1024 else f"{value} B"
    return repr(value)


def version_family(
    evidence: set[Family], version: str | None, engine_kind: str | None, bracketed: bool
) -> str:
    """The version family: V0 evidence wins (V0 could be forced up to 0.10); a stated version
    places V1; otherwise the newest family the line shapes prove."""
    v1 = {f for f in evidence if f != "v0"}
    parsed = _version_tuple(version)
    if "v0" in evidence or engine_kind == "V0":
        return "v0"
    if parsed is not None and engine_kind != "V1" and not v1 and parsed < (0, 8):
        return "v0"
    if parsed is not None:
        return _family_of(parsed)
    if v1:
        return max(v1, key=FAMILY_ORDER.index)
    # Un-bracketed file names are vLLM <= 0.7, where V0 was the default engine.
    return "unknown" if bracketed else "v0"


def _family_of(version: tuple[int, ...]) -> Family:
    bounds: list[tuple[tuple[int, ...], Family]] = [
        ((0, 30), "v1-0.30"), ((0, 20), "v1-0.20"), ((0, 12), "v1-0.12"), ((0, 8, 5), "v1-0.8.5"),
    ]  # fmt: skip
    for bound, family in bounds:
        if version >= bound:
            return family
    return "v1-0.7"


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    """``"0.10.2.dev2+gf5635d62e"`` -> ``(0, 10, 2)``."""
    parts: list[int] = []
    for piece in (version or "").split(".")[:3]:
        digits = piece[: next((i for i, ch in enumerate(piece) if not ch.isdigit()), len(piece))]
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if parts else None
