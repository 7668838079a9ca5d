"""Sample lines of mapped families to raw rows: a vectorised path for the plain form, and
``prometheus_client``'s parser for everything else.

``benchmarks/prometheus_parse_bench.py`` shows prometheus_client's per-line parse is the whole
cost when every line is a mapped one (what the collector keeps): it reads some tens of thousands
of lines a second, so six hours of 10 Hz scrapes would take minutes. The plain form (no
backslash anywhere, labels ``name="value"`` separated by commas, a value, an optional integer
timestamp) is therefore read with Polars regular expressions over whole chunks; a line in any
other form (escapes, odd spacing, a value Polars cannot read) goes to prometheus_client, which
parses it or refuses it (counted). ``tests/unit/ingest/prometheus/test_sample_lines.py`` checks with
hypothesis that both paths give the same name, labels, value and timestamp.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.prometheus import dialects as d
from oomtrace.ingest.prometheus.canonical_map import millis_to_ts, raw_frame, seconds_to_ts
from oomtrace.ingest.prometheus.frames import PARSED_SAMPLES, SAMPLE_LINES

log = logging.getLogger(__name__)

_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
PLAIN: Final = (
    r"^\s*[a-zA-Z_:][a-zA-Z0-9_:]*"
    rf"(?:\{{\s*(?:{_PAIR}(?:\s*,\s*{_PAIR})*)?\s*,?\s*\}})?"
    r"[ \t]+[^\s\\]+(?:[ \t]+-?[0-9]+)?\s*$"
)
# Value and timestamp of a plain line. Matching PLAIN is checked first (a cheap test); capture
# groups over the whole line cost five times as much, so they are taken from the tail only.
_TAIL: Final = r"[ \t](?<value>[^\s\\]+)(?:[ \t]+(?<stamp>-?[0-9]+))?\s*$"
# Configs are kept whole (every label), so they always take prometheus_client's path.
_CONFIG = d.CACHE_CONFIG_INFO

ConfigRow = tuple[int, float | None, dict[str, str]]


def parse_samples(
    frame: pl.DataFrame, diag: SourceDiagnostics
) -> tuple[pl.DataFrame | None, list[ConfigRow]]:
    """Raw rows (``ts`` from the line's own timestamp or null, ``scrape``, ``key``) and the
    distinct ``cache_config_info`` samples, from sample lines with ``name`` and ``scrape``."""
    check_frame(frame, SAMPLE_LINES, "Prometheus sample lines")
    frame = frame.with_columns(parts=pl.col("line").str.extract_groups(_TAIL)).unnest("parts")
    frame = frame.with_columns(number=pl.col("value").cast(pl.Float64, strict=False))
    plain = (
        pl.col("line").str.contains(PLAIN)
        & pl.col("number").is_not_null()
        & (pl.col("name") != _CONFIG)
    )
    fast = frame.filter(plain)
    rest = frame.filter(~plain)
    is_config = pl.col("line").str.contains(rf"^\s*{_CONFIG}\b")
    every_config = rest.filter(is_config)
    configs = every_config.unique(subset="line", keep="first", maintain_order=True)
    slow = rest.filter(~is_config)
    # Repeats of one config line are recognised as such; the distinct ones are parsed below.
    diag.lines_recognised += fast.height + every_config.height - configs.height
    parts = [_fast(fast)] if fast.height else []
    config_rows: list[ConfigRow] = []
    if slow.height or configs.height:
        raw, config_rows = _slow(pl.concat([slow, configs]), diag)
        if raw is not None:
            parts.append(raw)
    if not parts:
        return None, config_rows
    raw = pl.concat(parts)
    bad = raw.filter(pl.col("stamp_out_of_range"))
    diag.skip(
        "sample timestamp outside 1970-2255", bad.height, bad["key"][0] if bad.height else None
    )
    diag.lines_recognised -= bad.height
    parsed = raw.filter(~pl.col("stamp_out_of_range")).drop("stamp_out_of_range")
    return check_frame(parsed, PARSED_SAMPLES, "Prometheus parsed samples"), config_rows


def _fast(frame: pl.DataFrame) -> pl.DataFrame:
    tokens = (
        frame.select(
            row=pl.int_range(pl.len(), dtype=pl.UInt32),
            # On a plain line, name="value" pairs occur only inside the braces.
            token=pl.col("line").str.extract_all(_PAIR),
        )
        .explode("token")
        .drop_nulls("token")
        .select(
            "row",
            key=pl.col("token").str.extract(r"^([a-zA-Z_][a-zA-Z0-9_]*)=", 1),
            value=pl.col("token").str.extract(r'="(.*)"$', 1),
        )
        .filter(pl.col("key").is_in(list(d.LABELS)))
    )
    labels = (
        tokens.pivot(on="key", index="row", values="value", aggregate_function="first")
        if tokens.height
        else pl.DataFrame({"row": pl.Series([], dtype=pl.UInt32)})
    )
    base = frame.select(
        row=pl.int_range(pl.len(), dtype=pl.UInt32),
        ts=millis_to_ts(pl.col("stamp").cast(pl.Int64, strict=False)),
        stamp_out_of_range=pl.col("stamp").is_not_null(),
        name="name",
        value="number",
        scrape="scrape",
        key=pl.concat_str(
            "name",
            pl.lit("{"),
            pl.col("line").str.extract_all(_PAIR).list.join(","),
            pl.lit("}"),
        ),
    )
    out = base.join(labels, on="row", how="left", maintain_order="left")
    missing = [pl.lit(None, pl.String).alias(lab) for lab in d.LABELS if lab not in out.columns]
    out = out.with_columns(
        missing, stamp_out_of_range=pl.col("stamp_out_of_range") & pl.col("ts").is_null()
    )
    return out.select("ts", "name", "value", *d.LABELS, "scrape", "key", "stamp_out_of_range")


def _slow(
    frame: pl.DataFrame, diag: SourceDiagnostics
) -> tuple[pl.DataFrame | None, list[ConfigRow]]:
    lines = frame["line"].to_list()
    samples = _client_parse(lines, diag)
    keep = [i for i, s in enumerate(samples) if s is not None]
    diag.lines_recognised += len(keep)
    scrapes = frame["scrape"].gather(keep).to_list()
    parsed = [samples[i] for i in keep]
    configs: list[ConfigRow] = [
        (scrapes[j], s.timestamp, dict(s.labels)) for j, s in enumerate(parsed) if s.name == _CONFIG
    ]
    rows = [j for j, s in enumerate(parsed) if s.name != _CONFIG]
    if not rows:
        return None, configs
    stamps = pl.Series([parsed[j].timestamp for j in rows], dtype=pl.Float64)
    raw = raw_frame(
        seconds_to_ts(stamps),
        [parsed[j].name for j in rows],
        [parsed[j].value for j in rows],
        [parsed[j].labels for j in rows],
    )
    keys = [
        parsed[j].name + "{" + ",".join(f'{k}="{v}"' for k, v in parsed[j].labels.items()) + "}"
        for j in rows
    ]
    return raw.with_columns(
        scrape=pl.Series([scrapes[j] for j in rows], dtype=pl.Int64),
        key=pl.Series(keys, dtype=pl.String),
        stamp_out_of_range=stamps.is_not_null() & pl.col("ts").is_null(),
    ), configs


def _client_parse(lines: list[str], diag: SourceDiagnostics) -> list[Any]:
    """prometheus_client's parse, one sample per line; if a line is refused, the batch is
    parsed line by line so that only that line is lost (counted)."""
    # Imported here: loading it costs every command that lists the parsers (ingest of a vLLM
    # log, too) about 35 ms of CPU, for the lines the Polars path leaves.
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    try:
        batch = [s for f in text_string_to_metric_families("\n".join(lines)) for s in f.samples]
        if len(batch) == len(lines):
            return batch
    except ValueError:
        pass  # a bad line ends the batch parse: fall back to line by line below
    out: list[Any] = []
    for line in lines:
        try:
            found = [s for f in text_string_to_metric_families(line) for s in f.samples]
        except ValueError:
            found = []
        out.append(found[0] if len(found) == 1 else None)
        if len(found) != 1:
            diag.skip("sample line prometheus_client cannot parse", 1, line)
    return out
