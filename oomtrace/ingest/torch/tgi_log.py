"""TGI's (text-generation-inference) own lines, read by the ``pytorch-log`` parser beside the
out-of-memory message: the warm-up's refusals, the KV pool the warm-up settled on, and the
launcher's account of a crash (``docs/formats/pytorch.md``, "TGI").

* The warm-up refuses in three wordings, all ``startup_kv_insufficient`` events: ``Not enough
  memory to handle max_total_tokens={0}`` (v3 ``backends/v3/src/lib.rs``), ``Not enough memory
  to handle {N} prefill tokens. You need to decrease `--max-batch-prefill-tokens``` (the Python
  server's ``warmup`` in ``models/flash_causal_lm.py``, 1.x to 3.x) and, before 1.0, ``Not
  enough memory to handle {T} total tokens with {N} prefill tokens. You need to decrease
  `--max-batch-total-tokens` or `--max-batch-prefill-tokens```.
* ``Setting max batch total tokens to {N}`` (the router once the warm-up is done, ``router/src/
  main.rs``, later ``server.rs``) is the KV pool in tokens, TGI's paged blocks times their size;
  the engine configuration's ``kv_cache_tokens``. A model without paged attention says ``Model
  does not support automatic max batch total tokens`` first, and the figure is then only the
  configured budget: it is not taken. ``Default `max_batch_prefill_tokens` to {N}`` (the
  launcher) is the prefill budget per batch, ``max_num_batched_tokens``. The launcher's ``Args {
  ... }`` line states the ones the user set: ``max_total_tokens`` (a request's prompt and output
  together, ``max_model_len``) and ``max_batch_prefill_tokens``; from 2.1 it prints them pretty,
  a field a line (``max_total_tokens: Some(`` / ``4096,`` / ``),``). When none was set, the 2.x
  launcher says ``Default `max_total_tokens` to {N}`` and 3.x's router ``Maximum total tokens
  defaulted to {N}``.
* The launcher's ``Webserver Crashed``, ``Shard {rank} crashed``, ``Shard {rank} failed to start``
  and its exit ``Error: WebserverFailed`` / ``ShardFailed`` / ``ShardCannotStart`` are the
  server's death, ``engine_dead`` events; the lines of one death (within
  :data:`SAME_DEATH_S` seconds) count once.
"""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.torch.stated import first_stated

SAME_DEATH_S: Final = 5
WARMUP: Final = (
    r"Not enough memory to handle `?(?:max_total_tokens=(?P<max_total>\d+)|(?P<total>\d+) total "
    r"tokens with (?P<with_prefill>\d+) prefill tokens|(?P<prefill>\d+) prefill tokens)"
)
_POOL: Final = r"Setting max batch total tokens to (\d+)"
_NOT_AUTOMATIC: Final = r"Model does not support automatic max batch total tokens"
_PREFILL_DEFAULT: Final = r"Default `max_batch_prefill_tokens` to (\d+)"
# The launcher's first line prints its arguments (Rust's Debug of ``Args``); a limit left to TGI
# is ``None`` there (2.x prints set ones as ``Some(N)``, 1.x as ``N``).
# A paste may drop the "Args" (a System Info section of TGI's issue template holds the bare
# ``{ model_id: ... }``, https://github.com/huggingface/text-generation-inference/issues/710).
_ARGS: Final = r"(?:\bArgs |^\s*)\{ model_id: "
_ARGS_TOTAL: Final = _ARGS + r".*?\bmax_total_tokens: (?:Some\()?(\d+)"
_ARGS_PREFILL: Final = _ARGS + r".*?\bmax_batch_prefill_tokens: (?:Some\()?(\d+)"
# the share of the device PyTorch may take (``--cuda-memory-fraction``, 1.0 unless set)
_ARGS_FRACTION: Final = _ARGS + r".*?\bcuda_memory_fraction: ([0-9.]+)"
# The router's warm-up span names the limits it warms up with (``warmup{max_input_length=64
# max_prefill_tokens=256}:warmup: text_generation_client: ...``, its tracing span's fields,
# https://github.com/huggingface/text-generation-inference/issues/1164).
_SPAN_PREFILL: Final = r"\bwarmup\{[^}]*?\bmax_prefill_tokens=(\d+)"
_SPAN_TOTAL: Final = r"\bwarmup\{[^}]*?\bmax_total_tokens=(\d+)"
# Launchers from 2.1 print Args pretty (``{:#?}``), a field a line, a set limit over three:
# ``max_total_tokens: Some(`` / ``4096,`` / ``),`` (joined by :func:`join_pretty_args`).
PRETTY_ARGS: Final = r"\bArgs \{\s*$"
_PRETTY_FIELD: Final = r"^\s+{}: (?:Some\()?(\d+)\)?,\s*$"
_PRETTY_TOTAL: Final = _PRETTY_FIELD.format("max_total_tokens")
_PRETTY_PREFILL: Final = _PRETTY_FIELD.format("max_batch_prefill_tokens")
_PRETTY_SOME: Final = r"^\s+max_(?:total_tokens|batch_prefill_tokens): Some\($"
# The launcher's own defaults for limits left unset (2.x ``launcher/src/main.rs``).
_LAUNCHER_TOTAL: Final = r"Default `max_total_tokens` to (\d+)"
# 3.x sizes a request's limits from the pool when none is set (``backends/v3/src/main.rs``).
_TOTAL_DEFAULT: Final = r"Maximum total tokens defaulted to (\d+)"
DEATH: Final = (
    r"Webserver Crashed|Shard \d+ (?:crashed|failed to start)|"
    r"Error: (?:WebserverFailed|ShardFailed|ShardCannotStart)"
)
# Every TGI line this module reads.
LINES: Final = "|".join(
    f"(?:{p})"
    for p in (
        WARMUP,
        _POOL,
        _NOT_AUTOMATIC,
        _PREFILL_DEFAULT,
        _ARGS,
        _SPAN_PREFILL,
        _TOTAL_DEFAULT,
        _LAUNCHER_TOTAL,
        PRETTY_ARGS,
        _PRETTY_TOTAL,
        _PRETTY_PREFILL,
        DEATH,
    )
)
# What marks a TGI log whose failure (if any) is beyond the head read for sniffing.
# (a colour code glued before the name: ``#033[2mtext_generation_launcher`` where syslog wrote the
# ESC as text, https://github.com/huggingface/text-generation-inference/issues/1763)
MARKERS: Final = LINES + r"|(?:\b|(?<=\dm))text_generation_(?:launcher|router)\b"


def join_pretty_args(text: pl.Expr) -> pl.Expr:
    """``text`` (lines in file order) with a pretty-printed ``Some(`` limit joined to the number
    on the line under it, so that the field reads on one line; and a one-line ``Args { ... }``
    a paste wrapped (``max_st`` / ``op_sequences: 4, ...``, no closing brace on the first
    piece, https://github.com/huggingface/text-generation-inference/issues/832) joined to the
    piece under it, where that piece starts no record of its own."""
    number = text.shift(-1).str.extract(r"^\s*(\d+),\s*$", 1)
    joined = text + number + pl.lit("),")
    some = text.str.contains(_PRETTY_SOME) & number.is_not_null()
    following = text.shift(-1)
    wrapped = (
        text.str.contains(_ARGS)
        & ~text.str.contains(r"\}\s*$")
        & following.str.contains(r"^[a-z_]+[:,]").fill_null(value=False)
    )
    return pl.when(some).then(joined).when(wrapped).then(text + following).otherwise(text)


def events(lines: pl.DataFrame) -> pl.DataFrame:
    """Warm-up refusals and deaths among ``lines`` (``ts``, ``text``), without repeats."""
    warmup = lines.with_columns(w=pl.col("text").str.extract_groups(WARMUP)).unnest("w")
    warmup = (
        warmup.filter(pl.any_horizontal(pl.col("max_total", "total", "prefill").is_not_null()))
        .with_columns(
            detail=pl.coalesce(
                pl.format("max_total_tokens={}", "max_total"),
                pl.format("{} total tokens with {} prefill tokens", "total", "with_prefill"),
                pl.format("{} prefill tokens (--max-batch-prefill-tokens)", "prefill"),
            )
        )
        .unique(subset=["detail"], keep="first", maintain_order=True)
        .select(
            "ts",
            kind=pl.lit("startup_kv_insufficient"),
            detail=pl.format("TGI warm-up: not enough memory to handle {}", "detail"),
        )
    )
    deaths = lines.filter(pl.col("text").str.contains(DEATH)).sort("ts", maintain_order=True)
    gap = (pl.col("ts") - pl.col("ts").shift(1)).dt.total_seconds()
    deaths = deaths.filter(gap.is_null() | (gap > SAME_DEATH_S)).select(
        "ts",
        kind=pl.lit("engine_dead"),
        detail=pl.format("TGI: {}", pl.col("text").str.extract(f"({DEATH})", 1)),
    )
    return pl.concat([warmup, deaths]).sort("ts", maintain_order=True)


def engine_config(lines: pl.Series, diag: SourceDiagnostics) -> dict[str, Any]:
    """The KV pool and prefill budget TGI states; the first start's where a log holds several,
    a later start that states another figure being a note, not a silent overwrite."""
    config: dict[str, Any] = {}
    automatic = not lines.str.contains(_NOT_AUTOMATIC).any()
    # a pretty field line means a limit only under a pretty Args header
    pretty = bool(lines.str.contains(PRETTY_ARGS).any())
    for key, patterns, wanted in (
        ("kv_cache_tokens", (_POOL,), automatic),
        (
            "max_num_batched_tokens",
            (_ARGS_PREFILL, _PRETTY_PREFILL, _PREFILL_DEFAULT, _SPAN_PREFILL),
            True,
        ),
        (
            "max_model_len",
            (_ARGS_TOTAL, _PRETTY_TOTAL, _LAUNCHER_TOTAL, _TOTAL_DEFAULT, _SPAN_TOTAL),
            True,
        ),
    ):
        read = tuple(p for p in patterns if pretty or p not in (_PRETTY_TOTAL, _PRETTY_PREFILL))
        value = first_stated(lines, read, key, diag, pl.Int64()) if wanted else None
        if value is not None:
            config[key] = value
    fraction = first_stated(lines, (_ARGS_FRACTION,), "cuda_memory_fraction", diag, pl.Float64())
    if fraction is not None:
        config["gpu_memory_utilization"] = fraction
    if not automatic and lines.str.contains(_POOL).any():
        diag.note(
            "TGI says the model does not support automatic max batch total tokens: its batch "
            "token budget is configured, not a KV pool measured at warm-up; not taken as one"
        )
    return config
