"""The vLLM plugin's records (``collectors/vllm_plugin``, ``collectors/FORMAT.md``) as canonical
rows: the engine's own account of each request and each scheduler step, first-class evidence
beside the log and the metrics (``docs/formats/capture.md``).

Requests are named by the API server's id (what its log, its metrics and the plugin's
admissions call them); the engine's id, which adds ``-`` and 8 hex digits, is mapped through
the admissions (or, for a request admitted before the capture began, by removing the suffix):

* ``arrived`` at the API server's arrival time with prompt and max tokens (``vllm_req``);
* ``admitted`` at the step that first scheduled it, ``preempted`` (with the blocks it held) and
  ``resumed`` at the step that did so (``vllm_step``): stated, never inferred;
* ``progress`` at every snapshot: tokens so far and the KV blocks the KV cache manager held
  (``kv_blocks``), and at each step that changed its blocks (``kv_blocks`` only);
* ``first_token`` from the API server's figures (``vllm_done``: its finish time less the decode
  time) and ``finished`` / ``aborted`` with the final lengths and blocks (``vllm_fin``).

Samples per step, one row where the value changed: ``requests_running``, ``requests_waiting``,
``kv_usage_ratio``, ``kv_blocks_used`` and ``kv_blocks_total`` (the pool less vLLM's null block,
the blocks a request can hold) and ``preemptions_total`` (counted from the steps).
"""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from collectors.vllm_plugin import records
from collectors.vllm_plugin.columns import VllmRecords
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ParseResult
from oomtrace.schema import TS

PLUGIN: Final = "the vLLM plugin (engine core)"
# Scheduler and pool figures the plugin states at every step: where it speaks, other sources'
# samples of these are set aside (dir_parser).
STEP_METRICS: Final = (
    "requests_running",
    "requests_waiting",
    "kv_usage_ratio",
    "kv_blocks_used",
    "kv_blocks_total",
    "preemptions_total",
)
_SUFFIX: Final = r"-[0-9a-f]{8}$"
_LIFECYCLE: Final = {"new": "admitted", "resumed": "resumed", "preempted": "preempted"}
_ENGINE_KEYS: Final = (
    "block_size",
    "dtype",
    "kv_cache_dtype",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "model",
)


def plugin_result(vllm: VllmRecords) -> ParseResult:
    """Canonical rows and the engine's settings from what the plugin recorded."""
    ids = _id_map(vllm)
    return ParseResult(
        requests=_requests(vllm, ids),
        samples=_samples(vllm),
        engine={"name": "vllm", **_version(vllm)},
        engine_config=engine_config(vllm),
    )


def _ts(column: str | pl.Expr = "ts_ns") -> pl.Expr:
    """To the microsecond: the analysis names instants as Python datetimes, which stop there,
    so a step's own time must be one it can name (steps are milliseconds apart)."""
    ns = pl.col(column) if isinstance(column, str) else column
    return pl.from_epoch(ns // 1000, time_unit="us").cast(TS)


def _id_map(vllm: VllmRecords) -> pl.DataFrame:
    admitted = pl.DataFrame(vllm.admitted.as_dict())
    if admitted.is_empty():
        return pl.DataFrame(schema={"engine_id": pl.String, "request_id": pl.String})
    return admitted.select("engine_id", request_id="api_id").unique("engine_id", keep="first")


def _named(frame: pl.DataFrame, ids: pl.DataFrame) -> pl.DataFrame:
    """``engine_id`` -> ``request_id`` (the API id), by the admissions, else the suffix."""
    return frame.join(ids, on="engine_id", how="left", maintain_order="left").with_columns(
        request_id=pl.coalesce("request_id", pl.col("engine_id").str.replace(_SUFFIX, ""))
    )


def _requests(vllm: VllmRecords, ids: pl.DataFrame) -> pl.DataFrame | None:
    engine = pl.lit(records.ENGINE_SOURCE)
    parts: list[pl.DataFrame] = []
    admitted = pl.DataFrame(vllm.admitted.as_dict())
    if admitted.height:
        parts.append(
            admitted.select(
                ts=_ts(pl.coalesce("arrival_ns", "ts_ns")),
                source=engine,
                request_id="api_id",
                event=pl.lit("arrived"),
                prompt_tokens="prompt_tokens",
                max_tokens="max_tokens",
            )
        )
    prompts = admitted.select("engine_id", prompt="prompt_tokens") if admitted.height else None
    life = pl.DataFrame(vllm.lifecycle.as_dict())
    if life.height:
        known = pl.DataFrame(vllm.released.as_dict()).get_column("engine_id", default=None)
        ended = life.filter(pl.col("event") == "finished")
        if known is not None:
            ended = ended.filter(~pl.col("engine_id").is_in(known.implode()))
        steps = life.filter(pl.col("event").is_in(list(_LIFECYCLE)))
        preempted = pl.col("event") == "preempted"
        parts.append(
            _with_prompt(_named(pl.concat([steps, ended]), ids), prompts).select(
                ts=_ts(),
                source=engine,
                request_id="request_id",
                event=pl.col("event").replace_strict({**_LIFECYCLE, "finished": "finished"}),
                output_tokens=pl.when(preempted).then(_output(pl.col("tokens"), pl.col("prompt"))),
                kv_blocks="blocks",
            )
        )
    blocks = pl.DataFrame(vllm.blocks.as_dict())
    if blocks.height:
        stored = pl.coalesce("tokens", "computed_tokens")
        parts.append(
            _with_prompt(_named(blocks, ids), prompts).select(
                ts=_ts(),
                source=engine,
                request_id="request_id",
                event=pl.lit("progress"),
                prompt_tokens="prompt_tokens",
                output_tokens=_output(stored, pl.coalesce("prompt_tokens", "prompt")),
                kv_blocks="blocks",
            )
        )
    released = pl.DataFrame(vllm.released.as_dict())
    if released.height:
        aborted = pl.col("finish_reason").is_in(["abort", "error"])
        parts.append(
            released.select(
                ts=_ts(),
                source=engine,
                request_id="api_id",
                event=pl.when(aborted).then(pl.lit("aborted")).otherwise(pl.lit("finished")),
                prompt_tokens="prompt_tokens",
                output_tokens="output_tokens",
                kv_blocks="blocks",
            )
        )
    done = pl.DataFrame(vllm.done.as_dict())
    if done.height:
        parts.append(
            done.filter(pl.col("decode_ns").is_not_null()).select(
                ts=_ts().sub(pl.duration(nanoseconds=pl.col("decode_ns"))),
                source=pl.lit(records.API_SOURCE),
                request_id="api_id",
                event=pl.lit("first_token"),
                output_tokens=pl.lit(1, pl.Int64),
            )
        )
    if not parts:
        return None
    return pl.concat(parts, how="diagonal_relaxed").sort("ts", maintain_order=True)


def _with_prompt(frame: pl.DataFrame, prompts: pl.DataFrame | None) -> pl.DataFrame:
    """``prompt``: the prompt tokens the admission stated (a snapshot row states its own)."""
    if prompts is None:
        return frame.with_columns(prompt=pl.lit(None, pl.Int64))
    return frame.join(prompts, on="engine_id", how="left", maintain_order="left")


def _output(stored: pl.Expr, prompt: pl.Expr) -> pl.Expr:
    """Output tokens so far from the tokens a request stores: the timeline's unit is prompt +
    output. During a chunked prefill it stores less than its prompt: that reads as no output."""
    return pl.max_horizontal(stored - prompt, pl.lit(0)).cast(pl.Int64)


def _samples(vllm: VllmRecords) -> pl.DataFrame | None:
    steps = pl.DataFrame(vllm.steps.as_dict())
    if steps.is_empty():
        return None
    usable = pl.DataFrame(
        {
            "stream": list(vllm.engines),
            "total": [_usable_blocks(info) for info in vllm.engines.values()],
        },
        schema={"stream": pl.String, "total": pl.Int64},
    )
    preempted = pl.DataFrame(vllm.lifecycle.as_dict()).filter(pl.col("event") == "preempted")
    per_step = preempted.group_by("stream", "step").agg(pl.len().alias("preempted"))
    steps = (
        steps.join(per_step, on=["stream", "step"], how="left")
        .join(usable, on="stream", how="left")
        .sort("stream", "step")
        .with_columns(preemptions=pl.col("preempted").fill_null(0).cum_sum().over("stream"))
    )
    values = {
        "requests_running": pl.col("running"),
        "requests_waiting": pl.col("waiting"),
        "kv_usage_ratio": pl.col("usage"),
        "kv_blocks_used": pl.col("total") - pl.col("free_blocks"),
        "kv_blocks_total": pl.col("total"),
        "preemptions_total": pl.col("preemptions"),
    }
    long = pl.concat(
        [
            steps.select("stream", "ts_ns", metric=pl.lit(name), value=expr.cast(pl.Float64))
            for name, expr in values.items()
        ]
    ).drop_nulls("value")
    # one row where the value changed (and the last of each series, where the capture ends)
    changed = pl.col("value") != pl.col("value").shift(1).over("stream", "metric")
    last = pl.col("ts_ns") == pl.col("ts_ns").max().over("stream", "metric")
    return long.filter(changed.fill_null(value=True) | last).select(
        ts=_ts(), source=pl.lit(records.ENGINE_SOURCE), metric="metric", value="value"
    )


def _usable_blocks(info: dict[str, Any]) -> int | None:
    blocks = info.get("pool_blocks")
    return blocks - 1 if isinstance(blocks, int) and blocks > 1 else None


def _latest_engine(vllm: VllmRecords) -> dict[str, Any]:
    """The description of the engine core that wrote last (a restart describes itself anew)."""
    if not vllm.engines:
        return {}
    steps = vllm.steps
    last = dict(zip(steps.stream, steps.ts_ns, strict=True))  # each stream's last step
    stream = max(vllm.engines, key=lambda s: last.get(s, 0))
    return vllm.engines[stream]


def _version(vllm: VllmRecords) -> dict[str, Any]:
    version = _latest_engine(vllm).get("vllm_version")
    return {"version": version} if isinstance(version, str) else {}


def engine_config(vllm: VllmRecords) -> dict[str, Any]:
    """The settings the engine core ran with, as it holds them, each marked as stated by the
    plugin (``stated_by``: the KV model and the report name it as the source)."""
    info = _latest_engine(vllm)
    stated = info.get("engine")
    config: dict[str, Any] = (
        {k: stated[k] for k in _ENGINE_KEYS if stated.get(k) is not None}
        if isinstance(stated, dict)
        else {}
    )
    if isinstance(info.get("pool_blocks"), int):
        config["num_gpu_blocks"] = info["pool_blocks"]
    groups = info.get("groups")
    if isinstance(groups, list) and len(groups) == 1:
        group = groups[0]
        config["kv_bytes_per_block"] = int(group["page_bytes"]) * int(group["layers"])
        config.setdefault("block_size", int(group["block_size"]))
    if config:
        config["stated_by"] = dict.fromkeys(config, PLUGIN)
    return config


def prefer_plugin(
    parts: list[ParseResult], plugin: ParseResult, diag: SourceDiagnostics
) -> list[ParseResult]:
    """``parts`` (the log's and the metrics' rows of the same capture) less what the plugin
    states itself: the request rows of the requests it recorded and the per-step figures. What
    they disagree on is said in the diagnostics; the plugin's account is kept."""
    replaced = 0
    for part in parts:
        if plugin.requests is not None and part.requests is not None and part.requests.height:
            part.requests = _requests_not_recorded(part.requests, plugin.requests, diag)
        if plugin.samples is not None and part.samples is not None and part.samples.height:
            stepped = pl.col("metric").is_in(list(STEP_METRICS))
            replaced += part.samples.filter(stepped).height
            part.samples = part.samples.filter(~stepped)
        for key, value in part.engine_config.items():
            ours = plugin.engine_config.get(key)
            if ours is not None and ours != value and key != "stated_by":
                diag.note(
                    f"engine_config.{key}: the log or metrics state {value!r}, the engine core "
                    f"(vLLM plugin) {ours!r}: kept the engine core's"
                )
    if replaced:
        diag.note(
            f"{replaced:,} samples of the scheduler and pool figures from the metrics or the log "
            "set aside: the vLLM plugin states them at every scheduler step"
        )
    return [plugin, *parts]


def _requests_not_recorded(
    rows: pl.DataFrame, plugin: pl.DataFrame, diag: SourceDiagnostics
) -> pl.DataFrame:
    recorded = plugin.get_column("request_id").unique().implode()
    covered = pl.col("request_id").is_in(recorded)
    dropped = rows.filter(covered)
    if dropped.is_empty():
        return rows
    stated = ["prompt_tokens", "max_tokens"]
    theirs = dropped.filter(pl.col("event") == "arrived").select("request_id", *stated)
    ours = plugin.filter(pl.col("event") == "arrived").select("request_id", *stated)
    both = theirs.join(ours, on="request_id", suffix="_plugin")
    differs = pl.any_horizontal(
        pl.col(c).is_not_null() & pl.col(f"{c}_plugin").is_not_null()
        & (pl.col(c) != pl.col(f"{c}_plugin"))
        for c in stated
    )  # fmt: skip
    disagree = both.filter(differs)
    text = (
        f"{dropped.height:,} request rows of {dropped['request_id'].n_unique():,} requests from "
        "the log set aside: the vLLM plugin recorded those requests inside the engine"
    )
    if disagree.height:
        first = disagree.row(0, named=True)
        text += (
            f"; {disagree.height:,} disagreed on their token counts (e.g. {first['request_id']}:"
            f" prompt {first['prompt_tokens']} / max {first['max_tokens']} in the log, "
            f"{first['prompt_tokens_plugin']} / {first['max_tokens_plugin']} in the engine)"
        )
    diag.note(text)
    return rows.filter(~covered)
