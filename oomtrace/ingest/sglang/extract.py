"""Field extraction for the SGLang parser: each function takes the lines of one kind (columns
``ts``, ``ranks``, ``msg``, ``line``) and returns canonical rows or small intermediate frames.
Vectorised throughout; the only Python loops run over rank tags and startup rows (a handful)."""

from __future__ import annotations

import re
from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.sglang import line_patterns as pat
from oomtrace.ingest.sglang.frames import BATCH_FIELDS, KIND_LINES, RETRACTIONS, STARTUP_FIELDS
from oomtrace.ingest.text.input_file import first_line
from oomtrace.units import bytes_expr

REPEAT_WINDOW_S: Final = 5
STARTUP_KINDS: Final = (
    "server_args",
    "load_weight_end",
    "kv_cache_allocated",
    "graph_end",
    "memory_summary",
)


def lead_tag(tags: list[str | None]) -> str:
    """The rank tag whose ranks are lowest (``""`` for untagged lines, then ``TP0``, ``DP0 TP0``
    before ``DP1 TP1``): the rank that SGLang's rank-0-only lines come from. A null tag is a line
    that lost its prefix (or a logging configuration that prints none): its rank is unknown, it
    chooses nothing and is kept with the lead rank's lines."""

    def key(tag: str) -> tuple[int, int, str]:
        numbers = [int(n) for n in re.findall(r"\d+", tag)]
        return (sum(numbers), len(numbers), tag)

    present = [t for t in tags if t is not None]
    return min(present, key=key) if present else ""


def dedupe(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """One row per repeat: the same message from several ranks, or a log line and its traceback,
    within :data:`REPEAT_WINDOW_S` seconds counts once."""
    frame = frame.sort("ts")
    previous = pl.col("ts").shift(1).over(keys)
    gap = (pl.col("ts") - previous).dt.total_seconds()
    return frame.filter(previous.is_null() | (gap > REPEAT_WINDOW_S))


def batch_fields(batch: pl.DataFrame) -> pl.DataFrame:
    """The fields of the batch lines. A field whose key word appears in none of these lines (the
    hybrid-pool fields in most logs, ``cache hit rate`` after 0.3) is not searched for: a literal
    scan costs a fraction of a capturing regex."""
    msg = pl.col("msg")
    check_frame(batch, KIND_LINES, "SGLang batch lines")
    present = batch.select(
        msg.str.contains(f.key, literal=True).any().alias(f.name) for f in pat.FIELDS
    ).row(0, named=True)
    fields = batch.select(
        "ts",
        "ranks",
        *[
            (
                msg.str.extract(f.pattern, 1).cast(pl.Float64, strict=False)
                if present[f.name]
                else pl.lit(None, dtype=pl.Float64)
            ).alias(f.name)
            for f in pat.FIELDS
        ],
    )
    return check_frame(fields, BATCH_FIELDS, "SGLang batch fields")


def batch_samples(batch: pl.DataFrame) -> pl.DataFrame:
    """Long samples from the kept batch lines (one rank). A hybrid model's usage is the fullest
    attention pool; its used tokens are the full-attention pool's; HiSparse's are its device
    pool's."""
    check_frame(batch, BATCH_FIELDS, "SGLang batch fields")
    columns: dict[str, pl.Expr] = {
        "kv_usage_ratio": pl.coalesce(
            pl.col("usage"),
            pl.max_horizontal(pl.col("full_usage"), pl.col("swa_usage")),
            pl.col("gpu_usage"),
        ),
        "kv_tokens_used": pl.coalesce(
            pl.col("tokens"), pl.col("full_tokens"), pl.col("gpu_tokens")
        ),
    }
    for f in pat.FIELDS:
        if f.metric is not None:
            columns[f.metric] = pl.col(f.name) * f.scale
    # 0.1.x spells the counters of its prefill lines with underscores
    columns["requests_running"] = pl.coalesce(pl.col("running"), pl.col("running_v01"))
    columns["requests_waiting"] = pl.coalesce(pl.col("queued"), pl.col("queued_v01"))
    wide = batch.select("ts", **columns)
    return (
        wide.unpivot(index="ts", variable_name="metric", value_name="value")
        .drop_nulls("value")
        .select("ts", "metric", "value")
    )


def retractions(frame: pl.DataFrame) -> pl.DataFrame:
    """The figures of the retraction lines (those that state a count)."""
    check_frame(frame, KIND_LINES, "SGLang retraction lines")
    msg = pl.col("msg")
    rows = frame.select(
        "ts",
        pl.col("ranks").fill_null(""),
        "msg",
        retracted=msg.str.extract(r"#retracted_reqs: (\d+)", 1).cast(pl.Int64, strict=False),
        aborted=msg.str.extract(r"#aborted_retracted_reqs: (\d+)", 1).cast(pl.Int64, strict=False),
        dp_rank=pl.col("ranks").str.extract(r"DP(\d+)", 1),
    ).drop_nulls("retracted")
    return check_frame(rows, RETRACTIONS, "SGLang retractions")


def _unique_retractions(frame: pl.DataFrame) -> pl.DataFrame:
    check_frame(frame, RETRACTIONS, "SGLang retractions")
    # TP ranks of one scheduler print the same line (same ratio change): count it once.
    return dedupe(frame.with_columns(pl.col("dp_rank").fill_null("")), ["dp_rank", "msg"])


def retraction_events(frame: pl.DataFrame) -> pl.DataFrame:
    if frame.height == 0:
        return pl.DataFrame()
    rows = _unique_retractions(frame)
    aborted = pl.when(pl.col("aborted") > 0).then(
        pl.format(", {} of them aborted", pl.col("aborted"))
    )
    rank = pl.when(pl.col("ranks") != "").then(pl.format(" on {}", pl.col("ranks")))
    return rows.select(
        "ts",
        kind=pl.lit("preemption"),
        detail=pl.concat_str(
            [
                pl.format(
                    "SGLang retracted {} request(s): KV cache pool full", pl.col("retracted")
                ),
                aborted.fill_null(""),
                rank.fill_null(""),
            ]
        ),
    )


def retraction_samples(frame: pl.DataFrame) -> pl.DataFrame:
    if frame.height == 0:
        return pl.DataFrame()
    return _unique_retractions(frame).select(
        "ts", metric=pl.lit("preemptions_in_interval"), value=pl.col("retracted").cast(pl.Float64)
    )


# What a KV-pool OOM's event says (its detail), and the figures in it, for the analysis to read
# back: the tokens the step asked for and those the pool had (free plus evictable).
KV_POOL_OOM: Final = "SGLang could not allocate KV cache slots"
POOL_TOKENS: Final = r"(\d+) tokens asked, (\d+) available"
# SGLang's KV-pool OOM (python/sglang/srt/managers/schedule_batch.py, alloc_token_slots and the
# paged alloc_*_token_slots; mem_cache/common.py since 0.5): "Prefill out of memory. Try to lower
# your batch size." ("Decode", or "Out of memory." without the phase since 0.5), then, each on a
# line of its own, "Try to allocate N tokens." and the pool's room: "Avaliable tokens: N" (0.4,
# misspelt), "Available tokens: N (available_size=A + evictable_size=E)", "Available full
# tokens: N (...)" (a hybrid SWA pool).
# retract_decode's assertion when the one request left cannot grow is the decode's KV-pool OOM:
# "AssertionError: No space left for only one request,
# self.token_to_kv_pool_allocator.available_size()=0" (https://github.com/sgl-project/sglang/pull/14948).
_POOL_HEAD: Final = r"((?:Prefill|Decode) out|\bOut) of memory\. Try to lower"
_RETRACT_HEAD: Final = r"No space left for only one request"
_ASKED: Final = r"Try to allocate (\d+) tokens\."
_AVAILABLE: Final = r"Ava(?:i)?liable (?:full )?tokens: (\d+)|available_size\(\)=(\d+)"


def kv_pool_oom_events(oom_text: pl.DataFrame) -> pl.DataFrame:
    """One ``oom`` event per KV-pool OOM, with the tokens it asked for and the pool had where
    the lines after it state them (the next head line ends a failure's lines)."""
    if oom_text.height == 0:
        return pl.DataFrame()
    line = pl.col("line")
    frame = oom_text.sort("ts", maintain_order=True).with_columns(
        _head=pl.coalesce(
            line.str.extract(_POOL_HEAD, 1),
            pl.when(line.str.contains(_RETRACT_HEAD)).then(pl.lit("Decode out")),
        ),
        _asked=line.str.extract(_ASKED, 1).cast(pl.Int64, strict=False),
        _available=pl.coalesce(
            line.str.extract(_AVAILABLE, 1), line.str.extract(_AVAILABLE, 2)
        ).cast(pl.Int64, strict=False),
    )
    frame = frame.with_columns(_failure=pl.col("_head").is_not_null().cum_sum())
    figures = (
        frame.filter(pl.col("_failure") > 0)
        .group_by("_failure")
        .agg(pl.col("_asked").drop_nulls().first(), pl.col("_available").drop_nulls().first())
    )
    rows = frame.filter(pl.col("_head").is_not_null()).select("ts", "_head", "_failure")
    if rows.height == 0:
        return pl.DataFrame()
    rows = rows.join(figures, on="_failure", how="left").with_columns(
        phase=pl.concat_str(pl.col("_head"), pl.lit(" of memory"))
    )
    asked = pl.format("{} tokens asked", pl.col("_asked"))
    available = pl.format("{} available", pl.col("_available"))
    stated = pl.concat_str(asked, available, separator=", ", ignore_nulls=True)
    sizes = pl.when(stated != "").then(": " + stated).otherwise(pl.lit("; sizes not stated"))
    return dedupe(rows, ["phase"]).select(
        "ts",
        kind=pl.lit("oom"),
        detail=pl.concat_str(pl.format(KV_POOL_OOM + " ({})", pl.col("phase")), sizes),
    )


def dead_events(frame: pl.DataFrame) -> pl.DataFrame:
    if frame.height == 0:
        return pl.DataFrame()
    what = (
        pl.when(pl.col("msg").str.starts_with("Received sigquit"))
        .then(pl.lit("SGLang: a child process failed (SIGQUIT to the launcher)"))
        .when(pl.col("msg").str.starts_with("Scheduler"))
        .then(pl.lit("SGLang scheduler hit an exception"))
        .otherwise(pl.lit("SGLang data-parallel controller hit an exception"))
    )
    return dedupe(frame.with_columns(detail=what), ["detail"]).select(
        "ts", kind=pl.lit("engine_dead"), detail="detail"
    )


def no_kv_memory_events(frame: pl.DataFrame) -> pl.DataFrame:
    """SGLang's start-up refusal for want of KV room (``model_runner.py``, ``init_memory_pool``):
    "Not enough memory. Please try to increase --mem-fraction-static.", and the warning that
    states the profiled KV room negative (the weights and the reserve left nothing). One event
    per statement, the same from several ranks counted once."""
    if frame.height == 0:
        return pl.DataFrame()
    profiled = pl.col("line").str.extract_groups(
        r"max_total_tokens=(?<asked>\d+) is larger than the profiled value (?<profiled>-\d+)"
    )
    what = (
        pl.when(profiled.struct.field("profiled").is_not_null())
        .then(
            pl.format(
                "SGLang profiled {} tokens of KV room after the weights (max_total_tokens={} "
                "asked): nothing left for the KV cache at --mem-fraction-static",
                profiled.struct.field("profiled"),
                profiled.struct.field("asked"),
            )
        )
        .otherwise(
            pl.lit(
                'SGLang found no KV room left at its --mem-fraction-static ("Not '
                'enough memory. Please try to increase --mem-fraction-static")'
            )
        )
    )
    return dedupe(frame.with_columns(detail=what), ["detail"]).select(
        "ts", kind=pl.lit("startup_no_kv_memory"), detail="detail"
    )


def startup_fields(startup: pl.DataFrame) -> pl.DataFrame:
    if startup.height == 0:
        return pl.DataFrame()
    check_frame(startup, KIND_LINES, "SGLang start-up lines")
    msg = pl.col("msg")
    fields = startup.select(
        "ts",
        "kind",
        "ranks",
        *[
            bytes_expr(msg.str.extract(p, 1), pl.lit("GB"), decimal_means_binary=True).alias(n)
            for n, p in pat.GIB_FIELDS.items()
        ],
        *[
            msg.str.extract(p, 1).cast(pl.Int64, strict=False).alias(n)
            for n, p in pat.INT_FIELDS.items()
        ],
        *[msg.str.extract(p, 1).alias(n) for n, p in pat.TEXT_FIELDS.items()],
    )
    return check_frame(fields, STARTUP_FIELDS, "SGLang start-up fields")


def start_events(startup: pl.DataFrame) -> pl.DataFrame:
    if startup.height == 0:
        return pl.DataFrame()
    return startup.filter(pl.col("kind") == "server_args").select(
        "ts", kind=pl.lit("engine_start"), detail=pl.lit("SGLang server started (server_args line)")
    )


# engine_config key <- (startup kind, field), in order of preference.
_CONFIG: Final[dict[str, list[tuple[str, str]]]] = {
    "kv_cache_tokens": [
        ("memory_summary", "max_total_num_tokens"),
        ("kv_cache_allocated", "kv_tokens"),
    ],
    "max_num_seqs": [("memory_summary", "max_running_requests")],
    "max_model_len": [("memory_summary", "context_len")],
    "chunked_prefill_size": [("memory_summary", "chunked_prefill_size")],
    "max_prefill_tokens": [("memory_summary", "max_prefill_tokens")],
    "model_weights_bytes": [("load_weight_end", "mem_usage")],
    "available_kv_cache_bytes": [("kv_cache_allocated", "kv_total")],
    "cuda_graph_bytes": [("graph_end", "mem_usage")],
    "free_memory_after_startup_bytes": [
        ("memory_summary", "available_gpu_mem"),
        ("graph_end", "avail_mem"),
    ],
    "block_size": [("server_args", "page_size")],
    "tensor_parallel_size": [("server_args", "tp_size")],
    "data_parallel_size": [("server_args", "dp_size")],
    "mem_fraction_static": [("server_args", "mem_fraction_static")],
    "cache_dtype": [("kv_cache_allocated", "kv_dtype")],
}
_MODEL: Final = {
    "architecture": ("load_weight_end", "arch"),
    "dtype": ("load_weight_end", "dtype"),
    "name": ("server_args", "model_path"),
}


def engine_config(startup: pl.DataFrame) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Startup figures of the lowest rank (per GPU), the first start's where the log holds
    several; a later start that states something else is a note, not a silent overwrite."""
    if startup.height == 0:
        return {}, {}, []
    check_frame(startup, STARTUP_FIELDS, "SGLang start-up fields")
    ranked = startup.filter(pl.col("kind") != "server_args")
    lead = lead_tag(ranked["ranks"].unique().to_list())
    rows = startup.filter(
        (pl.col("ranks") == lead) | pl.col("ranks").is_null() | (pl.col("kind") == "server_args")
    ).sort("ts")
    rows = rows.with_columns(
        kv_total=pl.coalesce(pl.col("k_size") + pl.col("v_size"), pl.col("kv_size"))
    )
    config: dict[str, Any] = {}
    notes: list[str] = []
    for key, sources in _CONFIG.items():
        for kind, column in sources:
            values = rows.filter(pl.col("kind") == kind)[column].drop_nulls()
            if values.len() == 0:
                continue
            first = values[0]
            config[key] = float(first) if key == "mem_fraction_static" else first
            if values.n_unique() > 1:
                notes.append(
                    f"{key}: the log states {values.unique(maintain_order=True).to_list()} "
                    "(several starts); kept the first"
                )
            break
    model = {}
    for key, (kind, column) in _MODEL.items():
        values = rows.filter(pl.col("kind") == kind)[column].drop_nulls()
        if values.len():
            model[key] = values[0]
    if any(k.endswith("_bytes") for k in config):
        rank = f"rank {lead}" if lead else "one rank"
        notes.append(
            f"SGLang startup memory figures are per GPU ({rank}), printed in GiB with two "
            "decimals (SGLang writes GB), so each is exact to about 5 MiB"
        )
    return config, model, notes


def requests(frame: pl.DataFrame, diag: SourceDiagnostics) -> pl.DataFrame:
    """``Receive:`` -> arrived, ``Finish:`` -> finished / aborted, with ids and token counts only.

    The engine prints a dataclass repr whose text fields come first; ids and counts are taken
    from the last match so that text quoting them cannot stand in for the real ones.
    """
    if frame.height == 0:
        return pl.DataFrame()
    msg = pl.col("msg")
    several = frame.filter(msg.str.contains(r"\brid=\["))
    diag.skip(
        "batch request line (several requests in one line)",
        several.height,
        first_line(several["line"]),
    )
    frame = frame.filter(~msg.str.contains(r"\brid=\["))
    meta = msg.str.extract(r".*'meta_info': \{(.*)$", 1)
    last_rid = msg.str.extract_all(r"\brid='[^']*'").list.last().str.extract(r"rid='([^']*)'", 1)
    ids = msg.str.extract_all(r"\binput_ids=\[[0-9, ]*\](?: \.\.\. )?").list.last()
    id_list = ids.str.extract(r"\[([0-9, ]*)\]", 1)
    prompt = (
        pl.when(ids.str.ends_with(" ... "))
        .then(None)
        .when(id_list.str.strip_chars() == "")
        .then(0)
        .otherwise(id_list.str.count_matches(",") + 1)
    )
    finish_type = meta.str.extract(r"'finish_reason': \{'type': '(\w+)'", 1)
    out = frame.select(
        "ts",
        request_id=pl.when(pl.col("kind") == "finish")
        .then(pl.coalesce(meta.str.extract(r"'id': '([^']*)'", 1), last_rid))
        .otherwise(last_rid),
        event=pl.when(pl.col("kind") == "receive")
        .then(pl.lit("arrived"))
        .when(finish_type == "abort")
        .then(pl.lit("aborted"))
        .otherwise(pl.lit("finished")),
        prompt_tokens=pl.coalesce(
            meta.str.extract(r"'prompt_tokens': (\d+)", 1).cast(pl.Int64, strict=False),
            prompt.cast(pl.Int64, strict=False),
        ),
        max_tokens=msg.str.extract_all(r"'max_new_tokens': (?:\d+|None)")
        .list.last()
        .str.extract(r"(\d+)", 1)
        .cast(pl.Int64, strict=False),
        output_tokens=meta.str.extract(r"'completion_tokens': (\d+)", 1).cast(
            pl.Int64, strict=False
        ),
        cached_tokens=meta.str.extract(r"'cached_tokens': (\d+)", 1).cast(pl.Int64, strict=False),
        _line=pl.col("line"),
    )
    missing = out.filter(pl.col("request_id").is_null())
    diag.skip(
        "request line without a request id",
        missing.height,
        first_line(missing["_line"]),
    )
    diag.lines_recognised -= missing.height + several.height
    return out.drop_nulls("request_id").drop("_line")
