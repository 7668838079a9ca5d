"""The phase an out-of-memory failure came in, as the lines around it state it.

An allocator's message says how much it asked and what was free, never what the engine was doing.
The lines around it do, and a person reads them first:

* llama.cpp names the caller of a failed buffer right after the ``cudaMalloc failed`` line
  (``src/llama-model.cpp``, ``src/llama-context.cpp``, ``ggml/src/ggml-alloc.c``):
  ``llama_model_load: error loading model: unable to allocate CUDA0 buffer`` (the weights, after
  ``load_tensors: loading model tensors``), ``graph_reserve: failed to allocate compute buffers``
  (the compute buffers reserved while the context is made), ``llama_kv_cache_update_impl: failed
  to allocate compute buffers`` (the compute buffers rebuilt while serving, when the KV cache is
  shifted or defragmented; newer builds go through ``graph_reserve`` and then say
  ``memory_update: failed to reserve graph after the memory update``),
  ``llama_kv_cache_init: failed to allocate buffer for kv cache``;
* a Python traceback names the frames it failed in, outermost first: vLLM's start-up profiling
  (``vllm/v1/worker/gpu_model_runner.py``: ``profile_run`` runs ``_dummy_run`` and
  ``_dummy_sampler_run``, whose call passes ``sampling_metadata=dummy_metadata``; the worker's
  ``determine_available_memory``), the KV cache's allocation (``initialize_kv_cache``,
  ``_allocate_kv_cache_tensors``, the engine core's ``_initialize_kv_caches``), CUDA graph
  capture (``capture_model``; ``torch.cuda.graph``'s ``capture_end`` where a compiled backend
  captures), the weights (``load_model``); SGLang's ``init_memory_pool`` and
  its ``Capture cuda graph failed`` wrapper (``python/sglang/srt/model_executor/model_runner.py``).

Each marker is a phase of :data:`oomtrace.schema.EVENT_PHASES`. A marker counts for the nearest
failure line before it (within :attr:`Marker.after` lines: llama.cpp's statements follow the
failure) or after it (within :attr:`Marker.before` lines: a traceback's frames precede its
message), never across another failure line; a marker on the failure's own line counts. Among
the markers of one failure the most specific wins (the list's order: a capture runs
``_dummy_run``, the engine core's ``_initialize_kv_caches`` runs the profile and the capture).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl


@dataclass(frozen=True)
class Marker:
    """A line shape that states a phase, and how far from the failure it may stand: a
    traceback's frames come before its message, llama.cpp's account of a failed buffer after
    the ``cudaMalloc failed`` line (so a marker between two failures belongs to one of them)."""

    phase: str
    pattern: str
    before: int = 0  # lines before the failure line it may stand (0: on that line only)
    after: int = 0  # lines after it


_FRAME = r"\bin "  # a traceback's "File ..., line N, in <function>"
_TRACEBACK = 80  # lines a traceback's frames may stand before its message
_ACCOUNT = 6  # lines llama.cpp's account may stand after the failure
MARKERS: Final[tuple[Marker, ...]] = (
    Marker(
        "graph_capture",
        _FRAME + r"(?:capture_model|_capture_cudagraphs|capture_one_graph|init_cuda_graphs"
        r"|capture_end)\b|Capture cuda graph failed|cuda_graph_runner\.py\", line \d+, in capture\b"
        # vLLM's compiled backends capture inside ``with torch.cuda.graph(...)`` (no capture_model
        # frame in a worker's excerpt), and the capture fails in PyTorch's ``capture_end``
        r"|\bwith torch\.cuda\.graph\(",
        before=_TRACEBACK,
    ),
    # an idle data-parallel rank runs _dummy_run while the others serve (vLLM's gpu_worker.py,
    # execute_dummy_batch): while serving, not the start-up's profiling run
    Marker("dummy_batch", _FRAME + r"execute_dummy_batch\b", before=_TRACEBACK),
    Marker(
        "profile_sampler",
        _FRAME + r"_dummy_sampler_run\b|sampling_metadata=dummy_metadata"
        r"|out of memory occurred when warming up sampler",
        before=_TRACEBACK,
    ),
    # a request's image through the vision encoder while serving: vLLM's frames (after the
    # profile run's: the profile encodes dummy images too), llama.cpp's server saying it is
    # processing an image right before the failure (tools/server, "process_chunk: processing
    # image..."; https://github.com/ggml-org/llama.cpp/issues/13414: a 3 MB image's 4.41 GiB)
    Marker(
        "mm_encode",
        r"\bprocess_chun\w*: processing image|\bencoding image slice",
        before=3,
    ),
    Marker(
        "profile_run",
        _FRAME + r"(?:profile_run|_dummy_run|_dummy_pooler_run|determine_available_memory"
        r"|determine_num_available_blocks)\b",
        before=_TRACEBACK,
    ),
    # the vision tower's own frames too (LLaVA's _image_pixels_to_features, Qwen2-VL's
    # patch_embed, mllama's vision_model) and its patch embedding's im2col, F.unfold in
    # torch/nn/functional.py, which a language model's own layers never call (vllm#9356: the
    # excerpt ends in unfold, 3.59 GiB)
    Marker(
        "mm_encode",
        _FRAME + r"(?:_execute_mm_encoder|get_multimodal_embeddings|_process_image_input"
        r"|_process_video_input|_image_pixels_to_features|get_image_features|encode_images"
        r"|vision_tower|vision_model|patch_embed\w*|unfold)\b",
        before=_TRACEBACK,
    ),
    Marker(
        # newer builds reserve the graph again after the memory update, through graph_reserve:
        # "memory_update: failed to reserve graph after the memory update" names the runtime
        "compute_realloc",
        r"llama_kv_cache_update(?:_impl)?: failed to allocate compute"
        r"|failed to reserve graph after the memory update",
        after=_ACCOUNT,
    ),
    # Ollama's runner assigning a request to a cache slot right before the failure: the compute
    # buffers were reserved again for that request's batch while serving, not at start-up
    # (https://github.com/ollama/ollama/issues/10753: a 720p image's 1953.40 MiB on device 1)
    Marker("compute_realloc", r'msg="loading cache slot"', before=3),
    Marker(
        "compute_reserve",
        r"\b(?:graph_reserve|sched_reserve): |(?:llama_new_context_with_model|llama_init_from_model"
        r"|llama_context): failed to allocate compute buffers"
        # ggml's graph allocator reserving them (ik_llama.cpp#749: its excerpt ends there)
        r"|ggml_gallocr_reserve_n: failed to allocate",
        after=_ACCOUNT,
    ),
    Marker(
        "kv_cache_init",
        _FRAME + r"(?:initialize_kv_cache|_allocate_kv_cache_tensors|initialize_from_config"
        r"|_initialize_kv_caches|init_memory_pool|_allocate_kv_cache|allocate_kv_cache)\b",
        before=_TRACEBACK,
    ),
    Marker(
        "kv_cache_init",
        r"failed to allocate buffer for kv cache|llama_kv_cache(?:_unified)?: failed to allocate",
        after=_ACCOUNT,
    ),
    Marker("load_weights", _FRAME + r"(?:load_model|load_weights)\b", before=_TRACEBACK),
    # LMDeploy's TurboMind creating a model instance (lmdeploy/turbomind/turbomind.py,
    # _create_model_instance): its runtime buffers are allocated there, after the KV cache took
    # cache_max_entry_count of the GPU (https://github.com/InternLM/lmdeploy/issues/1019)
    Marker("engine_create", _FRAME + r"_create_model_instance\b", before=_TRACEBACK),
    # vLLM V0's worker wrapper names the method on the failure's own line ("Exception in worker
    # VllmWorkerProcess while processing method determine_num_available_blocks: CUDA out of
    # memory ...", vllm/executor/multiproc_worker_utils.py; vllm#8903)
    Marker(
        "profile_run",
        r"while processing method (?:determine_num_available_blocks"
        r"|determine_available_memory|profile_run)\b",
    ),
    Marker("load_weights", r"while processing method load_model\b"),
    # informational lines: they count only right beside the failure. vLLM says "Starting to load
    # model X..." before the weights and "Loading weights took" / "Model loading took" after
    # (gpu_model_runner.py): an OOM within three lines after the first is the weights' (vllm#16343).
    # tqdm's shard progress short of 100% beside the failure: the load stopped there (vllm#31273).
    Marker("load_weights", r"\bStarting to load model \S", before=3),
    Marker(
        "load_weights",
        r"Loading (?:safetensors|pt) checkpoint shards:\s+\d{1,2}% Completed",
        before=3,
        after=3,
    ),
    Marker(
        "load_weights",
        r"llama_model_load: error loading model|alloc_tensor_range: failed to allocate",
        after=_ACCOUNT,
    ),
    # an informational line: it counts only right before the failure
    Marker("load_weights", r"\b(?:llm_)?load_tensors: loading model tensors", before=3),
    # the warm-up after the KV cache is allocated: vLLM's compile_or_warm_up_model and its kernel
    # warm-ups (vllm/model_executor/warmup/: kernel_warmup, deep_gemm_warmup's _warmup; vllm#29360),
    # TGI's model.warmup (server/text_generation_server/models/flash_causal_lm.py; TGI#2301)
    Marker(
        "warmup",
        _FRAME + r"(?:compile_or_warm_up_model|warmup_model|warm_up_model|kernel_warmup"
        r"|deep_gemm_warmup|_?warmup)\b|(?i:unable to warm ?up)",
        before=_TRACEBACK,
    ),
)
# The wrappers an engine raises from an OOM, printed after it, whose phase the OOM takes.
WRAPPERS: Final = r"out of memory occurred when warming up sampler"
# tqdm's "Loading safetensors checkpoint shards:   3% Completed | 1/37 [...]": the shards loaded of
# all, kept on a failure within _SHARDS_NEAR lines of it (the ``shards`` column, "1/37").
SHARD_PROGRESS: Final = r"checkpoint shards:\s+\d{1,3}% Completed \| (\d+/\d+)"
_SHARDS_NEAR: Final = 3
_TQDM: Final = "checkpoint shards:"
# Any line that may state a phase: what a parser keeps beside the failures.
LINES: Final = "|".join(f"(?:{m.pattern})" for m in MARKERS)
# Literal text one of the traceback markers holds, for a parser that picks its candidate lines
# by a literal scan (vLLM's oomtrace/ingest/vllm/extract.py, SGLang's line_kinds.py); each line
# so picked is then tested against :data:`LINES`.
FRAME_LITERALS: Final = (
    "in capture_model", "in _capture_cudagraphs", "in capture_one_graph", "in init_cuda_graphs",
    "in capture_end", "with torch.cuda.graph(",
    "in _dummy_sampler_run", "dummy_metadata", "when warming up sampler",
    "in execute_dummy_batch", "in profile_run", "in _dummy_run", "in _dummy_pooler_run",
    "in determine_available_memory",
    "in determine_num_available_blocks", "in initialize_kv_cache", "in _allocate_kv_cache",
    "in initialize_from_config", "in _initialize_kv_caches", "in allocate_kv_cache",
    "in load_model", "in load_weights", "in compile_or_warm_up_model", "in warm_up_model",
    "in warmup_model", "in kernel_warmup", "in deep_gemm_warmup", "in _warmup", "in warmup",
    "in init_memory_pool", "Capture cuda graph failed",
    "while processing method", "Starting to load model", "checkpoint shards:",
    "processing image", "encoding image slice", "in _execute_mm_encoder",
    "in get_multimodal_embeddings", "in _process_image_input", "in _process_video_input",
)  # fmt: skip


def failure_phases(lines: pl.DataFrame, failure: str, by: str | None = None) -> pl.DataFrame:
    """``lines`` (``line``: the line number, in file order; ``text``) with a ``phase`` column:
    on each line where ``failure`` (a pattern) matches, the phase the markers around it state,
    else null; and a ``shards`` column, the checkpoint shards loaded of all (``"1/37"``) where
    tqdm's progress stands beside the failure (in any process's lines: tqdm prints no prefix).
    ``by`` names a column whose groups are read apart (the process that printed each line:
    ranks interleave their tracebacks). Linear in the lines: each marker is offered to the
    one failure before it and the one after it."""
    text = pl.col("text")
    rank = pl.coalesce(
        pl.when(text.str.contains(m.pattern)).then(pl.lit(i, pl.Int32))
        for i, m in enumerate(MARKERS)
    )
    frame = lines.with_columns(
        _fail=text.str.contains(failure),
        _rank=pl.when(text.str.contains(LINES)).then(rank),
    )
    failed = pl.when("_fail").then(pl.col("line"))
    following, preceding = failed.backward_fill(), failed.forward_fill()
    if by is not None:
        # tqdm prints its progress (a load_weights marker) without the process's prefix:
        # offered to the nearest failure of any process (vllm#31273)
        unnamed = pl.col(by).is_null() & text.str.contains(_TQDM, literal=True)
        following, preceding = (
            pl.when(unnamed).then(following).otherwise(following.over(by)),
            pl.when(unnamed).then(preceding).otherwise(preceding.over(by)),
        )
    # _next_any/_prev_any: the nearest failures of any process, for the shard counts below
    frame = frame.with_columns(
        _next=following,
        _prev=preceding,
        _next_any=failed.backward_fill(),
        _prev_any=failed.forward_fill(),
    )
    marked = frame.filter(pl.col("_rank").is_not_null())
    before = pl.col("_rank").replace_strict({i: m.before for i, m in enumerate(MARKERS)})
    after = pl.col("_rank").replace_strict({i: m.after for i, m in enumerate(MARKERS)})
    offered = pl.concat(
        [
            marked.filter(pl.col("_next") - pl.col("line") <= before).select(
                _at="_next", _best="_rank"
            ),
            marked.filter(pl.col("line") - pl.col("_prev") <= after).select(
                _at="_prev", _best="_rank"
            ),
        ]
    )
    best = offered.group_by("_at").agg(pl.col("_best").min())
    # tqdm's shard progress beside the failure: how far the loading of the weights had come
    shards = marked.select(
        "line", "_next_any", "_prev_any", _shards=text.str.extract(SHARD_PROGRESS, 1)
    ).drop_nulls("_shards")
    near = pl.concat(
        [
            shards.filter(pl.col("_next_any") - pl.col("line") <= _SHARDS_NEAR).select(
                _at="_next_any", shards="_shards"
            ),
            shards.filter(pl.col("line") - pl.col("_prev_any") <= _SHARDS_NEAR).select(
                _at="_prev_any", shards="_shards"
            ),
        ]
    ).unique("_at", keep="first", maintain_order=True)
    phases = {i: m.phase for i, m in enumerate(MARKERS)}
    out = (
        frame.join(best, left_on="line", right_on="_at", how="left", maintain_order="left")
        .join(near, left_on="line", right_on="_at", how="left", maintain_order="left")
        .with_columns(
            phase=pl.when("_fail").then(
                pl.col("_best").replace_strict(phases, default=None, return_dtype=pl.String)
            )
        )
        .drop("_rank", "_next", "_prev", "_next_any", "_prev_any", "_best")
    )
    return _wrapped_phases(out, by).drop("_fail")


def _wrapped_phases(frame: pl.DataFrame, by: str | None) -> pl.DataFrame:
    """A failure without a phase takes the phase of the wrapper its process printed next (within
    a traceback's reach): Python prints the exception that wraps an OOM after it ("The above
    exception was the direct cause of the following exception:"), and only the wrapper names the
    phase (vLLM's sampler warm-up; ranks interleave their lines, so only the failure's own
    process's wrapper counts: https://github.com/vllm-project/vllm/issues/15105)."""
    fails = frame.filter("_fail")
    if fails.height < 2 or not fails.select(pl.col("text").str.contains(WRAPPERS).any()).item():
        return frame
    wrapper_phase = pl.when(pl.col("text").str.contains(WRAPPERS)).then(pl.col("phase"))
    after = pl.col("line").shift(-1)
    told = wrapper_phase.shift(-1)
    if by is not None:
        after, told = after.over(by, order_by="line"), told.over(by, order_by="line")
    followed = (
        fails.select(
            "line",
            _after=after,
            _told=told,
            _self=pl.col("text").str.contains(WRAPPERS),
        )
        .filter(
            pl.col("_told").is_not_null()
            & ~pl.col("_self")
            & (pl.col("_after") - pl.col("line") <= _TRACEBACK)
        )
        .select("line", "_told")
    )
    return (
        frame.join(followed, on="line", how="left", maintain_order="left")
        .with_columns(phase=pl.coalesce("phase", "_told"))
        .drop("_told")
    )
