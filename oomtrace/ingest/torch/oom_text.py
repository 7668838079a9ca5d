"""PyTorch out-of-memory messages, in every generation, found anywhere in any log.

Shared by every log parser: give :func:`extract_ooms` the lines (already timestamped) and it
returns one ``oom`` event per failing allocation plus a ``process_used_bytes`` sample for each
process the message lists. The message layouts (``docs/formats/pytorch.md``):

* ``old``: ``CUDA out of memory. Tried to allocate A (GPU d; T total capacity; X already
  allocated; F free; [L allowed; ]R reserved in total by PyTorch)`` (torch <= 2.0; very old
  builds end ``; C cached)``; ROCm builds say ``HIP``, other vendors reuse it, e.g. ``NPU ...
  current active;``; Intel's IPEX leaves out ``F free;``; a paste may lose the head and start at
  ``Tried to allocate``);
* ``sentences``: ``CUDA out of memory. Tried to allocate A. GPU d has a total capacity of T of
  which F is free. [Process P has X memory in use. ]...[Including non-PyTorch memory, this
  process has X memory in use. ][L allowed; ]Of the allocated memory X is allocated by PyTorch,
  [with X allocated in private pools (e.g., CUDA Graphs), ]and U is reserved by PyTorch but
  unallocated.`` (torch >= 2.1; 2.1 prints "capacty"; ROCm builds say ``HIP out of memory``;
  an XPU that cannot report its free memory leaves out ``of which F is free``); the process
  clauses are read by :mod:`.oom_processes`;
* ``mps``: Apple's ``MPS backend out of memory (MPS allocated: ...)``, read by :mod:`.oom_mps`;
* ``fraction``: the ``cudaMallocAsync`` backend's six-line refusal, "Allocation on device d would
  exceed allowed memory", read by :mod:`.oom_fraction`;
* ``ggml``: llama.cpp's ``ggml_backend_cuda_buffer_type_alloc_buffer: allocating A MiB on device
  d: cudaMalloc failed: out of memory`` (the requested size and device only);
* ``xla``: JAX/XLA's ``RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes.``
  (the requested size only);
* ``vulkan``, ``nccl`` and Metal's sizeless status: the layers under PyTorch and llama.cpp,
  read as :mod:`.oom_backends` says;
* ``sizeless``: ``CUDA error: out of memory``, ``HIP error: out of memory``,
  ``CUBLAS_STATUS_ALLOC_FAILED``, ``CUDNN_STATUS_ALLOC_FAILED``, ``Tried to allocate more than 1EB
  memory``, the 2.14 ``preemptively rejected`` form, and PyTorch 0.x's ``cuda runtime error (2) :
  out of memory`` (``THCudaCheck FAIL ... error=2``): an ``oom`` event whose sizes are null,
  never 0;
* ``headless``: a message of either layout whose head ("CUDA out of memory. ") a paste or a
  wrapped record lost, from ``Tried to allocate`` on, read as its layout;
* ``cut``: a message of either layout cut short where it was pasted (a title, a truncated
  excerpt: ``... Tried to allocate 616.00 MiB. GPU 0 has a total capaci``): the requested size
  and the device it states, the rest null.

A memory fraction's limit (``L allowed``) is not the device's capacity: ``total_bytes`` stays the
device total and the limit is told in the event's ``detail``.

The same failure is often printed several times (the worker's traceback, then the engine's
"Worker failed with error '...'" wrapper): identical messages for one device within
:data:`REPEAT_WINDOW_S` seconds count once.
"""

from __future__ import annotations

import re
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.text.input_file import first_line
from oomtrace.ingest.text.outer_prefixes import ANSI
from oomtrace.ingest.torch import oom_backends, oom_fraction, oom_mps, workspace
from oomtrace.ingest.torch.oom_processes import (
    SIZE,
    empty_samples,
    process_samples,
    with_processes,
)
from oomtrace.schema import EVENT_PHASES, OUT_OF_RANGE, empty
from oomtrace.units import bytes_beyond_range, bytes_expr

REPEAT_WINDOW_S: Final = 5

_DEVICE_WORD = r"(?:GPU|NPU|XPU|HPU|MPS)"
_VENDOR = r"(?:CUDA|HIP|NPU|XPU|HPU|MUSA)"

# A paste may lose the head ("CUDA out of memory. ") and start the line at "Tried to allocate";
# only there, since IPEX's 4 GB single-block refusal prints the same parenthesis after its own
# sentence and is no out-of-memory.
_OLD: Final = (
    r"(?:"
    + _VENDOR
    + r" out of memory\. |^[\s>`]*)Tried to allocate "
    + SIZE
    + r" \("
    + _DEVICE_WORD
    + r" (\d+); "
    + SIZE
    + r" total capacity; "
    + SIZE
    + r" already allocated; (?:[0-9.]+ ?(?:bytes|[KMGTP]iB) current active; )?(?:"
    + SIZE
    + r" free; )?(?:"
    + SIZE
    + r" allowed; )?(?:"
    + SIZE
    + r" reserved in total by PyTorch|"
    + r"[0-9.]+ ?(?:bytes|[KMGTP]iB) cached)"
)
_OLD_NAMES: Final = [
    "req_n", "req_u", "device", "total_n", "total_u", "alloc_n", "alloc_u", "free_n", "free_u",
    "allowed_n", "allowed_u", "reserved_n", "reserved_u",
]  # fmt: skip

# A paste or a wrapped record may begin mid-message, at "Tried to allocate": the sentence that
# follows ("GPU d has a total capacity of T") is PyTorch's alone, so the head is not required.
_NEW: Final = (
    r"(?:out of memory\. )?Tried to allocate "
    + SIZE
    + r"\. "
    + _DEVICE_WORD
    # TGI's shards have printed "GPU  has" with no index (two spaces)
    + r" (\d+)? ?has a total capac(?:i)?ty of "
    + SIZE
    + r"(?: of which "
    + SIZE
    + r" is free)?\."
)
_NEW_NAMES: Final = ["req_n", "req_u", "device", "total_n", "total_u", "free_n", "free_u"]
_ALLOWED: Final = r"([0-9.]+ ?(?:bytes|[KMGTP]iB)) allowed; "
_ALLOCATED: Final = r"Of the allocated memory " + SIZE + r" is allocated by PyTorch"
_UNALLOCATED: Final = r"and " + SIZE + r" is reserved by PyTorch but unallocated"

# NCCL's own allocations ("NCCL WARN Cuda failure 2 'out of memory'", NCCL's alloc.h and
# enqueue.cc; relayed as "Last error: Cuda failure 2 'out of memory'", vllm#19865, vllm#25597,
# TensorRT-LLM#1670) and PyTorch's OOM report failing in NVML before it could be printed
# (c10/cuda/CUDACachingAllocator.cpp's reportProcessMemoryInfo asserts NVML_SUCCESS == r; NVML
# does not answer it on a MIG slice or in some containers, vllm#5107).
NCCL_OOM: Final = r"Cuda failure (?:2 )?'out of memory'"
# Ollama relays its runner's death with ggml's last words, no size: ``msg="error loading llama
# server" error="llama runner process has terminated: signal: aborted (core dumped) cudaMalloc
# failed: out of memory"`` (https://github.com/ollama/ollama/issues/5113); where ggml's sized
# line is in the log too, the relay is that failure told again (TOLD_AGAIN).
OLLAMA_RELAY: Final = r"cudaMalloc failed: out of memory"
# How many lines below ggml's sized failure Ollama's relay of it may come (ollama#3683: five).
_RELAY_REACH: Final = 12
# TensorRT's default allocator (TensorRT-LLM's engines under Triton): the failure, then the size
# on the next line as a warning ("[TensorRT-LLM][ERROR] 1: [defaultAllocator.cpp::allocate::20]
# Error Code 1: Cuda Runtime (out of memory)", "[TensorRT-LLM][WARNING] Requested amount of GPU
# memory (14434380600 bytes) could not be allocated.",
# https://github.com/triton-inference-server/tensorrtllm_backend/issues/274): one failure, sized.
TRT_RUNTIME: Final = r"Cuda Runtime \(out of memory\)"
_TRT_REQUESTED: Final = r"Requested amount of GPU memory \((\d+) (bytes)\) could not be allocated"
NVML_REPORT: Final = r"NVML_SUCCESS == r INTERNAL ASSERT FAILED at \S*CUDACachingAllocator\.cpp"
SIZELESS: Final = (
    NCCL_OOM + "|" + NVML_REPORT + "|"
    # the runtime's error, and the driver API's (c10's C10_CUDA_DRIVER_CHECK: "CUDA driver error:
    # out of memory", vLLM's weight repacking, noonghunna/club-3090#60)
    r"(?:CUDA|HIP)(?: driver)? error(?: 2 at \S+:\d+)?: out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
    r"CUDNN_STATUS_ALLOC_FAILED|"
    r"Tried to allocate more than 1EB memory|Allocation was preemptively rejected|"
    r"(?:CUDA|HIP|XPU|NPU) out of memory|cuda runtime error \(2\) : out of memory|"
    r"THCudaCheck FAIL .*error=2 : out of memory|" + OLLAMA_RELAY + "|" + TRT_RUNTIME + "|"
    r"CUDA runtime error: out of memory|" + oom_backends.SIZELESS
)
# What a message cut short still states: the size it tried to allocate.
_CUT: Final = r"out of memory\. Tried to allocate " + SIZE
_GGML: Final = r"allocating ([0-9.]+) (MiB) on device (\d+): cudaMalloc failed: out of memory"
# ggml's own account of the buffer it could not get (``ggml_gallocr_reserve_n``,
# ``alloc_tensor_range``): the size in bytes and the backend device (``CUDA0``, ``ROCm0``). It
# follows the ``allocating`` line above, and stands alone where only a runner's last words were
# relayed (Ollama's "llama runner process has terminated: cudaMalloc failed: out of memory").
# Not among OOM_SHAPES: it is no failure of its own where it follows the allocating line.
BUFFER_FAILURE: Final = r"failed to allocate [A-Za-z]+?(\d+) buffer of size (\d+)\b"
# ggml's CUDA error report names the device on the line after (``current device: 0``, 2023-2024).
GGML_DEVICE: Final = r"^\s*current device: (\d+)"
# JAX/XLA (``xla/service``, raised as ``XlaRuntimeError``; older jaxlib ``Resource exhausted``):
# the request in bytes, no device.
_XLA: Final = (
    r"(?:RESOURCE_EXHAUSTED|Resource exhausted): Out of memory while trying to allocate "
    r"(\d+) (bytes)"
)
# Cheap test that a line may hold an OOM (or a line of a multi-line one); parsers use it to pick
# the lines worth keeping.
PREFILTER: Final = (
    r"out of memory|ALLOC_FAILED|preemptively rejected|total capacity; |has a total capac|"
    r"Out of memory while trying|buffer of size \d|NVML_SUCCESS == r|Requested amount of GPU mem|"
    + oom_backends.PREFILTER
    + "|"
    + oom_fraction.PARTS
    + "|"
    + workspace.PARTS
)
# Any line that extract_ooms reads matches this (used to count recognised lines).
OOM_SHAPES: Final = "|".join(
    f"(?:{p})"
    for p in (
        _OLD,
        _NEW,
        oom_fraction.HEAD,
        oom_fraction.PARTS,
        oom_mps.HEAD,
        _GGML,
        _XLA,
        _TRT_REQUESTED,
        oom_backends.VULKAN,
        SIZELESS,
        workspace.LINE,
        workspace.PARTS,
    )
)

EVENT_COLUMNS: Final = [
    "ts", "device", "pid", "kind", "requested_bytes", "total_bytes", "free_bytes",
    "allocated_bytes", "reserved_unallocated_bytes", "process_bytes", "detail", "phase", "proc",
]  # fmt: skip


def extract_ooms(
    lines: pl.DataFrame, text: str = "text", diag: SourceDiagnostics | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """OOM events and per-process samples from ``lines`` (columns ``ts`` and ``text``, in file
    order; an optional ``pid`` column is the pid of the process that printed each line, where
    the parser knows it; an optional ``proc`` column, the process prefixes that printed it
    (:func:`oomtrace.ingest.text.outer_prefixes.strip_prefixes`), kept on the event as printed,
    colour codes removed; an optional ``phase`` column, the phase the lines around it state:
    :func:`oomtrace.ingest.torch.oom_phase.failure_phases`).

    Returns ``(events, samples)`` with canonical column names (without ``node``/``source``).
    A size beyond any device (``10^29 GiB``) is left out of its event and counted on ``diag``.
    Cost: one literal-ish scan of every line; the detailed patterns run only on the few lines
    that mention running out of memory.
    """
    # the lines around each: ggml names the device on the line after, and its buffer line
    # repeats the failure the allocating line above (or before it on a fold-joined line) told
    told = pl.col(text).shift(1).str.contains(_GGML).fill_null(value=False)
    keep = [
        "ts",
        pl.col(text).alias("_t"),
        pl.col(text).shift(-1).alias("_next"),
        # a FlashInfer workspace message wrapped over the lines after its head
        pl.concat_str(
            [pl.col(text).shift(-n) for n in range(workspace.WRAPPED + 1)],
            separator="\n",
            ignore_nulls=True,
        ).alias("_ahead"),
        (told | pl.col(text).str.contains(_GGML)).alias("_told"),
        # the loader's "unable to allocate CUDA0 buffer" after the buffer's own account
        pl.any_horizontal(
            pl.col(text).shift(n).str.contains(f"{_GGML}|{BUFFER_FAILURE}").fill_null(value=False)
            for n in range(1, 4)
        ).alias("_buffer_told"),
        # Ollama's relay of ggml's failure a few lines below it (the loader's and the runner's
        # last words between): that failure told again, whatever times the two lines print
        (
            pl.int_range(pl.len())
            - pl.when(pl.col(text).str.contains(f"{_GGML}|{BUFFER_FAILURE}"))
            .then(pl.int_range(pl.len()))
            .forward_fill()
            .shift(1)
            <= _RELAY_REACH
        )
        .fill_null(value=False)
        .alias("_relay_told"),
    ]
    if "pid" in lines.columns:
        keep.append(pl.col("pid").cast(pl.Int64, strict=False))
    if "phase" in lines.columns:
        keep.append(pl.col("phase"))
    if "proc" in lines.columns:
        keep.append(pl.col("proc").str.replace_all(ANSI, "").str.strip_chars(" "))
    if "shards" in lines.columns:
        keep.append(pl.col("shards"))
    hits = lines.select(keep).filter(pl.col("_t").str.contains(PREFILTER))
    # NCCL's size is on its own line after the failure, itself a hit (blank lines between are not)
    hits = hits.with_columns(oom_backends.nccl_request(pl.col("_t")).alias("_nccl_bytes"))
    if hits.height == 0:
        return _empty_events(), empty_samples()
    hits = oom_fraction.stitch(hits)
    # Only the sentences layout names the failing process; the line's pid helps name it there.
    anonymous = hits.drop("pid", strict=False)
    found = [
        _sized(anonymous, _OLD, _OLD_NAMES, "old"),
        _sized(hits, _NEW, _NEW_NAMES, "sentences"),
        oom_fraction.refusals(anonymous),
        oom_mps.refusals(anonymous),
        _one_size(anonymous, _GGML, "ggml"),
        _one_size(anonymous.filter(~pl.col("_told")), BUFFER_FAILURE, "ggml", bytes_first=False),
        _one_size(anonymous, _XLA, "xla"),
        _one_size(anonymous, _TRT_REQUESTED, "tensorrt"),
        _one_size(anonymous, oom_backends.VULKAN, "vulkan"),
        # not an OOM: FlashInfer's fixed workspace ran out (kind workspace_overflow, below)
        workspace.overflows(hits),
    ]
    sized = pl.concat([f for f in found if f is not None] or [hits.clear()], how="diagonal_relaxed")
    sizeless = (
        anonymous.join(sized.select("_t").unique(), on="_t", how="anti")
        .filter(
            pl.col("_t").str.contains(SIZELESS)
            | (pl.col("_t").str.contains(oom_backends.GGML_LOAD) & ~pl.col("_buffer_told"))
        )
        .filter(~(pl.col("_t").str.contains(OLLAMA_RELAY) & pl.col("_relay_told")))
        .with_columns(
            _what=pl.col("_t").str.extract(f"({SIZELESS}|{oom_backends.GGML_LOAD})", 1),
            device=pl.coalesce(
                pl.col("_t").str.extract(r"(?:GPU|NPU|XPU|HPU|device):? (\d+)", 1),
                pl.col("_next").str.extract(GGML_DEVICE, 1),
                pl.col("_t").str.extract(oom_backends.NCCL_DEVICE, 1),
                pl.col("_t").str.extract(oom_backends.GGML_LOAD, 1),
            ).cast(pl.Int32, strict=False),
            requested_bytes=bytes_expr(
                pl.col("_t").str.extract(_CUT, 1), pl.col("_t").str.extract(_CUT, 2)
            ),
            _nccl=pl.col("_t").str.contains("NCCL WARN " + NCCL_OOM),
        )
        .with_columns(
            requested_bytes=pl.coalesce(
                "requested_bytes", pl.when("_nccl").then(pl.col("_nccl_bytes"))
            ),
            _layout=pl.when("_nccl")
            .then(pl.lit("nccl"))
            .when(pl.col("requested_bytes").is_not_null())
            .then(pl.lit("cut"))
            .otherwise(pl.lit("sizeless")),
        )
    )
    events = _dedupe(pl.concat([sized, sizeless], how="diagonal_relaxed"))
    if diag is not None and "_beyond" in events.columns:
        beyond = events.filter(pl.col("_beyond") > 0)
        diag.skip(OUT_OF_RANGE, int(beyond["_beyond"].sum()), first_line(beyond["_t"]))
    samples = process_samples(events)
    if diag is not None:
        diag.skip(OUT_OF_RANGE, samples["value"].null_count(), None)
    samples = samples.drop_nulls("value")
    if "phase" not in events.columns:
        events = events.with_columns(phase=pl.lit(None, dtype=pl.String))
    # TGI's launcher names the phase: "Unable to warmup model" (the start-up's warm-up)
    warmup = pl.col("_t").str.contains(r"(?i)unable to warm ?up")
    events = events.with_columns(
        phase=pl.coalesce("phase", pl.when(warmup).then(pl.lit("warmup"))),
    )
    overflow = pl.col("_layout") == workspace.LAYOUT
    events = events.with_columns(
        kind=pl.when(overflow).then(pl.lit("workspace_overflow")).otherwise(pl.lit("oom")),
        detail=pl.when(overflow).then(workspace.detail()).otherwise(_detail(events))
        if "_buffer" in events.columns
        else _detail(events),
    )
    events = events.with_columns(
        pl.lit(None).alias(column) for column in EVENT_COLUMNS if column not in events.columns
    )
    return events.select(EVENT_COLUMNS).sort("ts"), samples


def _detail(events: pl.DataFrame) -> pl.Expr:
    layout = pl.col("_layout")
    base = (
        pl.when(layout == "sizeless")
        .then(pl.format("{} (no size stated)", pl.col("_what")))
        .when(layout == "cut")
        .then(pl.lit("PyTorch OOM message cut short: only the requested size read"))
        .when(layout == "ggml")
        .then(pl.lit("llama.cpp (ggml) cudaMalloc failed: out of memory"))
        .when(layout == "vulkan")
        .then(pl.lit("llama.cpp (ggml) Vulkan device memory allocation failed"))
        .when(layout == "nccl")
        .then(pl.format("{} (NCCL's own allocation)", pl.col("_what")))
        .when(layout == "tensorrt")
        .then(pl.lit("TensorRT's allocator could not get the GPU memory requested"))
        .when(layout == "xla")
        .then(pl.lit("JAX/XLA RESOURCE_EXHAUSTED: out of memory (the request only)"))
        .when(layout == "fraction")
        .then(pl.lit("PyTorch cudaMallocAsync refusal: allocation would exceed allowed memory"))
        .when(layout == "mps")
        .then(pl.lit("PyTorch MPS (Apple GPU) refusal: allocation would pass the watermark"))
        .otherwise(pl.format("PyTorch OOM message ({} layout)", layout))
    )
    parts = [base]
    rocm = pl.col("_t").str.contains(r"\bHIP (?:out of memory|error)")
    parts.append(pl.when(rocm).then(pl.lit("; ROCm (HIP)")))
    for column, words in (
        ("_allowed", "; {} allowed by the process's memory fraction"),
        ("_limit", "; {}"),
        ("_who", "; {}"),
    ):
        if column in events.columns:
            parts.append(
                pl.when(pl.col(column).is_not_null()).then(pl.format(words, pl.col(column)))
            )
    phase = pl.col("phase").replace_strict(EVENT_PHASES, default=None, return_dtype=pl.String)
    parts.append(pl.format("; during {}", phase))
    if "shards" in events.columns:
        loaded = pl.col("shards").str.split("/")
        parts.append(
            pl.format(
                "; with {} of {} checkpoint shards loaded", loaded.list.get(0), loaded.list.get(1)
            )
        )
    return pl.concat_str(parts, ignore_nulls=True)


def _sized(hits: pl.DataFrame, pattern: str, names: list[str], layout: str) -> pl.DataFrame | None:
    groups = pl.col("_t").str.extract_groups(pattern).struct.rename_fields(names)
    found = hits.with_columns(_g=groups).unnest("_g").filter(pl.col("req_n").is_not_null())
    if found.height == 0:
        return None

    def size(prefix: str) -> pl.Expr:
        return bytes_expr(pl.col(f"{prefix}_n"), pl.col(f"{prefix}_u"))

    def beyond() -> pl.Expr:
        prefixes = {c[:-2] for c in found.columns if c.endswith("_n")}
        checks = [bytes_beyond_range(pl.col(f"{p}_n"), pl.col(f"{p}_u")) for p in prefixes]
        return pl.sum_horizontal(*checks).alias("_beyond")

    if layout == "old":
        found = found.with_columns(
            allocated_bytes=size("alloc"),
            reserved_unallocated_bytes=(size("reserved") - size("alloc")).clip(lower_bound=0),
            total_bytes=size("total"),
            _allowed=pl.concat_str(pl.col("allowed_n"), pl.lit(" "), pl.col("allowed_u")),
        )
    else:
        extra = [
            pl.col("_t").str.extract_groups(p).struct.rename_fields([f"{n}_n", f"{n}_u"])
            for p, n in ((_ALLOCATED, "alloc"), (_UNALLOCATED, "unalloc"))
        ]
        found = (
            found.with_columns(_a=extra[0], _u=extra[1])
            .unnest("_a", "_u")
            .with_columns(
                total_bytes=size("total"),
                allocated_bytes=size("alloc"),
                reserved_unallocated_bytes=size("unalloc"),
                _allowed=pl.col("_t").str.extract(_ALLOWED, 1),
            )
        )
        found = with_processes(found)
    return found.with_columns(
        beyond(),
        _layout=pl.lit(layout),
        device=pl.col("device").cast(pl.Int32, strict=False),
        requested_bytes=size("req"),
        free_bytes=size("free"),
    ).select(~pl.selectors.matches(r"_(n|u)$"))


def _one_size(
    hits: pl.DataFrame, pattern: str, layout: str, *, bytes_first: bool = True
) -> pl.DataFrame | None:
    """A failure that states only its request (size, unit) and perhaps its device (group 3);
    ``bytes_first=False``: the pattern's groups are the device, then the size in bytes."""
    names = ["n", "u", "d"][: re.compile(pattern).groups] if bytes_first else ["d", "n"]
    groups = pl.col("_t").str.extract_groups(pattern).struct.rename_fields(names)
    found = hits.with_columns(_g=groups).unnest("_g").filter(pl.col("n").is_not_null())
    if found.height == 0:
        return None
    if "u" not in names:
        found = found.with_columns(u=pl.lit("bytes"))
    device = pl.col("d") if "d" in names else pl.lit(None)
    return found.select(
        "ts",
        "_t",
        *(c for c in ("phase", "proc") if c in found.columns),
        _layout=pl.lit(layout),
        device=device.cast(pl.Int32, strict=False),
        requested_bytes=bytes_expr(pl.col("n"), pl.col("u")),
        free_bytes=pl.lit(None, dtype=pl.Int64),
        _beyond=bytes_beyond_range(pl.col("n"), pl.col("u")).cast(pl.Int32),
    )


def _dedupe(events: pl.DataFrame) -> pl.DataFrame:
    """Identical failures on one device within the repeat window count once."""
    # The allocated figure tells apart two failures of one size that are not repeats (a second
    # try after the first freed nothing still states what PyTorch then held).
    names = ("device", "requested_bytes", "free_bytes", "allocated_bytes", "_layout")
    key = [c for c in names if c in events.columns]
    events = events.sort("ts")
    previous = pl.col("ts").shift(1).over(key)
    gap = (pl.col("ts") - previous).dt.total_seconds()
    return events.filter(previous.is_null() | (gap > REPEAT_WINDOW_S))


def _empty_events() -> pl.DataFrame:
    return empty("events").select(EVENT_COLUMNS)


# The size-less OOMs the PyTorch-log reader takes for a wrapper of a sized one (the messages that
# restate an allocator's failure), rather than a failure of their own: a raw "CUDA error: out of
# memory" is another failure (a kernel's or a library's), kept.
TOLD_AGAIN: Final = (
    r"^(?:CUDA out of memory|unable to allocate \w+ buffer|"
    + OLLAMA_RELAY
    + "|"
    + TRT_RUNTIME
    + r") \(no size stated\)"
)


def fold_wrappers(events: pl.DataFrame, told_again: str | None = None) -> pl.DataFrame:
    """An engine wraps an allocator OOM in its own text (vLLM's "CUDA out of memory occurred when
    warming up sampler ...", "Worker failed with error '...'"; Ollama's "unable to allocate CUDA0
    buffer" after ggml's failed cudaMalloc): a size-less OOM within :data:`REPEAT_WINDOW_S` of a
    sized one on the same (or an unnamed) device is that failure told again, not another one.
    With ``told_again`` (a pattern of ``detail``), only the size-less ones it matches are."""
    sized = events.filter(pl.col("requested_bytes").is_not_null())
    wrapper = pl.col("requested_bytes").is_null()
    if told_again is not None:
        wrapper = wrapper & pl.col("detail").str.contains(told_again).fill_null(value=False)
    others = events.filter(~wrapper)
    sizeless = events.filter(wrapper).with_row_index("_n")
    if sized.height == 0 or sizeless.height == 0:
        return events
    near = (
        sizeless.select("_n", "ts", "device")
        .sort("ts")
        .join_asof(
            sized.select("ts", _sized_device="device", _sized_ts="ts").sort("ts"),
            on="ts",
            strategy="nearest",
            tolerance=f"{REPEAT_WINDOW_S}s",
        )
    )
    told = near.filter(
        pl.col("_sized_ts").is_not_null()
        & (pl.col("device").is_null() | (pl.col("device") == pl.col("_sized_device")))
    ).get_column("_n")
    kept = sizeless.filter(~pl.col("_n").is_in(told.implode())).drop("_n")
    return pl.concat([others, kept]).sort("ts")
