"""llama.cpp's own log lines: what marks a llama.cpp log, and what its line prefix is.

llama.cpp's logger (``common/log.cpp``, ``common_log_entry::print``; ``docs/formats/pytorch.md``)
prints, when its prefix and timestamps are on (``--log-prefix --log-timestamps``, as newer
``llama-server`` builds print by default), ``M.SS.mmm.uuu L message``: minutes, seconds,
milliseconds and microseconds since the logger started, then a level letter (``I``, ``W``, ``E``,
``D``), both perhaps wrapped in ANSI colours. That is a duration, not a time of day: the log says
how far apart its lines are, never when they were, so it is read as a log without times.

At start-up llama.cpp states its KV cache (``src/llama-kv-cache.cpp``, ``llama_kv_cache``; named
``llama_kv_cache_unified`` in 2025 builds): ``llama_kv_cache: size = S MiB (N cells, L layers,
q/n seqs), K (f16): ..., V (f16): ...``, its size in MiB and in cells (tokens). Builds of 2024
print ``llama_kv_cache_init: kv_size = N, offload = ...`` and ``llama_new_context_with_model: KV
self size  = S MiB, K (f16): ...`` instead. The context's ``n_seq_max = N`` is how many sequences
(server slots) share it. They become the engine configuration's ``available_kv_cache_bytes``,
``kv_cache_tokens`` (the context's ``n_ctx`` where no cache line states the cells) and
``max_num_seqs`` (the server's ``n_slots`` where no ``n_seq_max`` is printed, or the slots its
early-2024 build lists one a line). A recurrent
model's state (``R (f32): ...``) is not KV.

Ollama, which runs llama.cpp, logs its plan before it starts the runner (Go's ``slog`` in logfmt,
``llm/memory.go`` ``msg="offload to cuda"``, later ``llm/server.go`` ``msg=offload
library=cuda``): ``memory.available="[23.3 GiB]"`` is the free memory of each GPU it may use and
``memory.required.kv="9.5 GiB"`` the KV cache it will allocate (sizes in binary units). They
become ``available_kv_cache_bytes`` and, where one GPU is listed, ``initial_free_bytes``. The
runner's command line that follows (``msg="starting llama server" cmd="... --ctx-size 8192 ...
--parallel 4"``) gives ``kv_cache_tokens`` and ``max_num_seqs`` where the runner's own start-up
lines are not in the log.
From 0.12 it logs the layout it loaded one line a device (``msg="kv cache" device=CUDA0
size="2.5 GiB"``): the devices' parts together are ``available_kv_cache_bytes``.
"""

from __future__ import annotations

import re
from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.torch.stated import first_stated
from oomtrace.units import MiB, parse_bytes

_COLOUR = r"(?:\x1b\[[0-9;]*m)*"
RELATIVE: Final = (
    rf"^{_COLOUR}(\d+)\.(\d{{2}})\.(\d{{3}})\.(\d{{3}}){_COLOUR} (?:{_COLOUR}[IWED] {_COLOUR})?"
)
# The supervisor's prefix a runner's lines may carry: journald's (``Dec 31 01:58:01 host
# ollama[555324]: ``, Ollama under systemd) or docker compose's (``ollama  | ``).
_SUPERVISOR: Final = (
    r"(?:[A-Za-z][a-z]{2} [ 0-9]\d [\d:.]+ (?:\S+ )?[^\s\[\]:]+\[\d+\]: |[\w.-]+ +\| )?"
)
# Ollama's own start-up lines in Go's logfmt (``source=file.go:N msg=...``), which mark its log
# before any runner line: GPU discovery and the memory it plans with.
_OLLAMA_LINES: Final = (
    r'\bsource=\w+\.go:\d+ msg="?(?:system memory|inference compute|looking for compatible '
    r"GPUs|evaluating|new model will fit|loaded runners|waiting for llama runner|llama runner "
    r"started|starting llama server|error loading llama server|Listening on \S+ \(version "
    r"|Dynamic LLM libraries|total blobs:)"
)
# What marks Ollama's log (its runner's llama.cpp lines aside): the engine a remedy names; also
# journald's prefix naming Ollama's unit (``Apr 17 01:25:09 ai-pc ollama[56169]: ``, ollama
# issue 3683; ``ollama.listener[2840147]``, issue 3711) and the runner's death as ``ollama run``
# prints it (``Error: llama runner process has terminated: ...``, issue 9170).
OLLAMA_MARKERS: Final = (
    _OLLAMA_LINES
    + r'|\bmsg="?offload(?: to \w+"| library=\w+) '
    + r"|^[A-Za-z][a-z]{2} [ 0-9]\d [\d:.]+ (?:\S+ )?ollama(?:\.[\w-]+)?\[\d+\]: "
    + r"|^Error: llama runner process has terminated"
)
# Lines only llama.cpp prints (model loading, the server's start), for sniffing a log whose
# allocation failure is beyond the head.
MARKERS: Final = re.compile(
    r"(?m)^"
    + _SUPERVISOR
    + r"(?:\d+\.\d{2}\.\d{3}\.\d{3} [IWED] )?(?:llama_model_loader: |load_tensors: |"
    r"llm_load_tensors: |ggml_cuda_init: found \d+ |llama_context: |llama_init_from_model: |"
    r"llama_new_context_with_model: |llama_kv_cache(?:_init|_unified)?: |"
    r"llama_memory_recurrent: |srv +load_model: |main: server is listening|"
    r"llama_model_load_internal: |llama_init_from_file: )"
    r'|\bmsg="?offload(?: to \w+"| library=\w+) |\bmsg="kv cache" device=|' + _OLLAMA_LINES
)
DURATIONS_NOTE: Final = (
    "llama.cpp prints how long after its start each line came (minutes.seconds.ms.us), not "
    "when: the order of its lines is kept, their times are not known"
)

_KV_SIZE: Final = r"llama_kv_cache(?:_unified)?: size = +([0-9.]+) MiB \( *\d+ cells,[^)]*\), K \("
_KV_CELLS: Final = r"llama_kv_cache(?:_unified)?: size = +[0-9.]+ MiB \( *(\d+) cells,[^)]*\), K \("
# (2023 builds print it "llama_init_from_file: kv self size  =  400.00 MB": MiB, divided by
# 1024 * 1024, https://github.com/ggml-org/llama.cpp/issues/1230)
_KV_SELF: Final = r"(?i:KV self size) += +([0-9.]+) Mi?B"
_KV_SIZE_OLD: Final = r"llama_kv_cache_init: kv_size = (\d+),"
_SEQ_MAX: Final = r"\bn_seq_max += (\d+)"
# The cache line's "q/n seqs" is n_seq_max over n_stream (its sequences, then the streams that
# hold them: 1 where the cache is unified), the context's n_seq_max where that line is not kept.
_KV_SEQS: Final = r"llama_kv_cache(?:_unified)?: size = .* layers, +(\d+)/ *\d+ seqs\)"
# The context's size, which is the KV cache's in cells where no cache line says so (2024 builds
# allocate ``kv_size = cparams.n_ctx``); never ``n_ctx_per_seq`` or ``n_ctx_train``.
_N_CTX: Final = (
    r"\b(?:llama_new_context_with_model|llama_init_from_model|llama_context|"
    r"llama_model_load_internal): n_ctx += (\d+)"
)
# The server's slots share the cache like the context's sequences: its text log says "n_slots =
# N", its JSON log of 2024 (as Ollama 0.1 embedded it) "n_slots":N.
_SLOTS: Final = r'\bn_slots(?: = |":)(\d+)\b'

# The server of early 2024 lists its slots instead: "Available slots:" then " -> Slot 0 - max
# context: 512", one line a slot, numbered from 0.
_SLOT_LISTED: Final = r"^\s*-> Slot (\d+) - max context: \d+"

# (a plan for the CPU, ``library=cpu``, puts the KV cache in host memory: not read,
# https://github.com/atineiatte/deep-research-at-home/issues/14)
_GPU_LIBRARY: Final = r"(?:cuda|rocm|metal|oneapi|vulkan)"
_OLLAMA: Final = rf'\bmsg="?offload(?: to {_GPU_LIBRARY}"| library={_GPU_LIBRARY}) .*'
_OLLAMA_KV: Final = _OLLAMA + r'\bmemory\.required\.kv="([0-9.]+ ?[KMGT]?i?B)"'
_OLLAMA_FREE: Final = _OLLAMA + r'\bmemory\.available="\[([0-9.]+ ?[KMGT]?i?B)\]"'
# Ollama then starts its runner (``llm/server.go``, ``msg="starting llama server" cmd="..."``)
# with the context it sized: ``--ctx-size`` is the cache's cells for all ``--parallel`` slots
# together (the scheduler multiplies a model's num_ctx by the parallel requests it allows).
_OLLAMA_RUNNER: Final = r'\bmsg="starting llama server" cmd=".*'
_OLLAMA_CTX: Final = _OLLAMA_RUNNER + r"\s--ctx-size (\d+)\b"
_OLLAMA_PARALLEL: Final = _OLLAMA_RUNNER + r"\s--parallel (\d+)\b"
# Its scheduler says how many requests the model is loaded for before the runner starts
# (``server/sched.go``: ``msg="new model will fit in available VRAM, loading" ... parallel=4``,
# https://github.com/ollama/ollama/issues/8825).
_OLLAMA_SCHED_PARALLEL: Final = r'\bmsg="new model will fit in [^"]*" .*\bparallel=(\d+)\b'
# From 0.12 Ollama states the layout it loaded one line a device and kind (``ml/device.go``):
# ``msg="kv cache" device=CUDA1 size="2.5 GiB"``; the cache is every device's part together.
_OLLAMA_DEVICE_KV: Final = r'\bmsg="kv cache" device=(\S+) size="([0-9.]+ ?[KMGT]?i?B)"'
# The server's decode finding no room in the KV cache for its batch (``update_slots``:
# ``examples/server/server.cpp`` in 2023 builds, ``tools/server/server.cpp`` later): it retries
# with half the batch ("retrying with smaller n_batch = N", later "... smaller batch size, off =
# O, n_batch = N, ret = R"); at n_batch 1 it gives up: "failed to decode the batch, n_batch = 1,
# ret = 1" (2023; its source's comment: the KV cache is full, increase the context size), later
# "Context size has been exceeded." sent to the slots. The cache's cells (``n_ctx``) were all
# held by the slots' contexts: KV exhaustion, not a device allocation.
# From 2025 the context says it first: "decode: failed to find KV cache slot for ubatch of size N"
# (``src/llama-context.cpp``), then llama_decode returns 1 and its caller retries or gives up;
# koboldcpp gives up with "Failed to predict at token position N! Check your context buffer
# sizes!", which ends a streak only after a KV line (it says the same after any failed decode).
KV_SNIFF: Final = (
    r"failed to find free space in the KV cache|failed to find KV cache slot for ubatch"
)
_KV_FAILED: Final = r"failed to decode the batch, n_batch = \d+|Context size has been exceeded"
_KV_GAVE_UP: Final = r"Failed to predict at token position \d+"
KV_FULL: Final = rf"{KV_SNIFF}|{_KV_FAILED}|{_KV_GAVE_UP}"
# What the event's detail starts with (the analysis reads it as the KV pool running out).
KV_FULL_DETAIL: Final = "llama.cpp found no free space in the KV cache"
_N_BATCH: Final = r"\bn_batch = (\d+)"

# Every start-up line read for the engine configuration.
STARTUP: Final = "|".join(
    f"(?:{p})"
    for p in (
        _KV_SIZE,
        _KV_SELF,
        _KV_SIZE_OLD,
        _SEQ_MAX,
        _KV_SEQS,
        _SLOTS,
        _N_CTX,
        _OLLAMA_KV,
        _OLLAMA_RUNNER,
        _OLLAMA_DEVICE_KV,
        _OLLAMA_SCHED_PARALLEL,
        _SLOT_LISTED,
    )
)


def engine_config(lines: pl.Series, diag: SourceDiagnostics) -> dict[str, Any]:
    """The KV cache's size in bytes and tokens and the sequences sharing it, as stated."""
    config: dict[str, Any] = {}
    mib = first_stated(lines, (_KV_SIZE, _KV_SELF), "KV cache size (MiB)", diag, pl.Float64())
    if mib is not None:
        config["available_kv_cache_bytes"] = round(mib * MiB)
    if "available_kv_cache_bytes" not in config:
        parts = _ollama_device_kv(lines, diag)
        if parts is not None:
            config["available_kv_cache_bytes"] = parts
    for key, ollama in (
        ("available_kv_cache_bytes", _OLLAMA_KV),
        ("initial_free_bytes", _OLLAMA_FREE),
    ):
        size = first_stated(lines, (ollama,), key, diag, pl.String()) if key not in config else None
        if size is not None:
            config[key] = parse_bytes(size, what=key)
    for key, patterns in (
        ("kv_cache_tokens", (_KV_CELLS, _KV_SIZE_OLD)),
        ("kv_cache_tokens", (_N_CTX,)),  # only where no cache line stated it
        ("kv_cache_tokens", (_OLLAMA_CTX,)),  # the runner's own lines were not captured
        ("max_num_seqs", (_SEQ_MAX, _KV_SEQS, _SLOTS)),
        ("max_num_seqs", (_OLLAMA_PARALLEL, _OLLAMA_SCHED_PARALLEL)),
    ):
        value = first_stated(lines, patterns, key, diag, pl.Int64()) if key not in config else None
        if value is not None:
            config[key] = value
    listed = lines.str.extract(_SLOT_LISTED, 1).cast(pl.Int64, strict=False).max()
    if "max_num_seqs" not in config and listed is not None:
        config["max_num_seqs"] = int(listed) + 1  # type: ignore[arg-type]
    return config


def _ollama_device_kv(lines: pl.Series, diag: SourceDiagnostics) -> int | None:
    """The KV cache Ollama 0.12+ laid out, its devices' parts summed: each device's first
    statement (a later load of another model states its own, noted, not added)."""
    parts = (
        lines.str.extract_groups(_OLLAMA_DEVICE_KV)
        .struct.rename_fields(["device", "size"])
        .struct.unnest()
        .drop_nulls()
    )
    if parts.height == 0:
        return None
    first = parts.unique(subset="device", keep="first", maintain_order=True)
    if first.height < parts.height:
        diag.note("Ollama laid out its KV cache more than once (several loads); kept the first")
    return sum(parse_bytes(size, what="Ollama kv cache") for size in first["size"])


def kv_full_events(lines: pl.DataFrame) -> pl.DataFrame:
    """One event per streak of :data:`KV_FULL` lines among ``lines`` (``ts``, ``text``): an
    ``oom`` of the KV cache where the streak ends in the decode failing, a ``warning`` where the
    retries found room (or the log ends first)."""
    text = pl.col("text")
    rows = lines.filter(text.str.contains(KV_FULL))
    gave_up = text.str.contains(_KV_GAVE_UP)
    rows = rows.filter(~gave_up | text.shift(1).str.contains(KV_SNIFF).fill_null(value=False))
    if rows.height == 0:
        return pl.DataFrame()
    failed = text.str.contains(_KV_FAILED) | gave_up
    rows = rows.with_columns(
        _failed=failed,
        _n_batch=text.str.extract(_N_BATCH, 1).cast(pl.Int64, strict=False),
        # a failure ends its streak: the lines after it start the next
        _streak=failed.cast(pl.Int64).cum_sum().shift(1, fill_value=0),
    )
    streaks = rows.group_by("_streak", maintain_order=True).agg(
        pl.col("ts").last(),
        pl.col("_failed").any(),
        retries=(~pl.col("_failed")).sum(),
        smallest=pl.col("_n_batch").min(),
    )
    down_to = pl.format(", down to n_batch = {}", pl.col("smallest")).fill_null("")
    tried = pl.format("{} retries with smaller batches", pl.col("retries")) + down_to
    return streaks.select(
        "ts",
        kind=pl.when("_failed").then(pl.lit("oom")).otherwise(pl.lit("warning")),
        detail=pl.when("_failed")
        .then(
            pl.lit(KV_FULL_DETAIL + ": the decode failed after ")
            + tried
            + pl.lit(" (the slots' contexts hold all of the cache's cells, -c)")
        )
        .otherwise(pl.lit(KV_FULL_DETAIL + " for a batch (") + tried + pl.lit(")")),
    )
