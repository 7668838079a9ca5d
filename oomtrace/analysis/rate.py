"""How fast a resident request grows: the decode rate observed in the trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import polars as pl

NS_PER_S: Final = 1_000_000_000


@dataclass(frozen=True)
class DecodeRate:
    """Tokens one resident request generates per second, as observed in this trace."""

    tokens_per_s: float | None
    basis: Literal["requests", "engine_throughput", "none"]
    statement: str


def decode_rate(summary: pl.DataFrame, samples: pl.DataFrame) -> DecodeRate:
    """The per-request decode rate: the median over requests whose source states both the decode
    time and the count; else engine generation throughput per running request; else unknown."""
    start = pl.coalesce("first_token_ts", "admitted_ts")
    generated = pl.col("output_tokens") - pl.col("first_token_ts").is_not_null().cast(pl.Int64)
    per_request = (
        summary.filter(
            (pl.col("end_event") == "finished")
            & (pl.col("output_tokens") >= 2)
            & start.is_not_null()
        )
        .with_columns(seconds=(pl.col("end_ts") - start).dt.total_nanoseconds() / NS_PER_S)
        .filter(pl.col("seconds") > 0)
        .select(rate=generated / pl.col("seconds"))
    )
    if per_request.height >= 3:
        rate = float(per_request["rate"].median())  # type: ignore[arg-type]
        return DecodeRate(
            rate,
            "requests",
            f"median of {per_request.height:,} finished requests: {rate:.1f} tokens/s each",
        )
    engine = _engine_rate(samples) if "metric" in samples.columns else None
    if engine is not None:
        return DecodeRate(
            engine,
            "engine_throughput",
            f"engine generation throughput per running request (median): {engine:.1f} tokens/s",
        )
    return DecodeRate(None, "none", "no decode rate: open requests stay at their last statement")


def _engine_rate(samples: pl.DataFrame) -> float | None:
    wide = samples.filter(
        pl.col("metric").is_in(["generation_throughput_tokens_per_s", "requests_running"])
    )
    if wide.is_empty():
        return None
    per_ts = (
        wide.group_by("node", "ts", "metric")
        .agg(pl.col("value").max())
        .pivot(on="metric", index=["node", "ts"], values="value")
    )
    if not {"generation_throughput_tokens_per_s", "requests_running"} <= set(per_ts.columns):
        return None
    rates = per_ts.filter(pl.col("requests_running") > 0).select(
        pl.col("generation_throughput_tokens_per_s") / pl.col("requests_running")
    )
    rates = rates.filter(pl.all() > 0)
    return None if rates.is_empty() else float(rates.to_series().median())  # type: ignore[arg-type]
