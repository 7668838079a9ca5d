"""An Ollama incident's remedies name Ollama's own settings (ollama/ollama/docs/faq.mdx,
``ollama serve --help``: OLLAMA_CONTEXT_LENGTH or a model's num_ctx, OLLAMA_NUM_PARALLEL,
num_gpu, num_batch, OLLAMA_GPU_OVERHEAD), not the flags of the llama.cpp server it runs (``-c``,
``-ngl``, ``-ub``, ``-ts``)."""

from __future__ import annotations

import re
from pathlib import Path

from oomtrace.analysis import analyze
from oomtrace.ingest import IngestOptions, load_any

# https://github.com/ollama/ollama/issues/3683 (Ollama 0.1.32 under systemd, two GPUs): the
# weights' buffer does not fit device 0
OLLAMA_3683 = (
    "Apr 17 01:25:09 ai-pc ollama[56169]: ggml_cuda_init: found 2 CUDA devices:\n"
    "Apr 17 01:25:09 ai-pc ollama[56169]:   Device 0: NVIDIA GeForce RTX 4090, compute "
    "capability 8.9, VMM: yes\n"
    "Apr 17 01:25:09 ai-pc ollama[56169]:   Device 1: NVIDIA GeForce RTX 3090, compute "
    "capability 8.6, VMM: yes\n"
    "Apr 17 01:25:09 ai-pc ollama[56169]: llm_load_tensors: ggml ctx size =    1.16 MiB\n"
    "Apr 17 01:25:10 ai-pc ollama[56169]: ggml_backend_cuda_buffer_type_alloc_buffer: allocating "
    "24289.03 MiB on device 0: cudaMalloc failed: out of memory\n"
    "Apr 17 01:25:11 ai-pc ollama[56169]: llama_model_load: error loading model: unable to "
    "allocate backend buffer\n"
    "Apr 17 01:25:11 ai-pc ollama[56169]: llama_load_model_from_file: exception loading model\n"
    "Apr 17 01:25:11 ai-pc ollama[56169]: terminate called after throwing an instance of "
    "'std::runtime_error'\n"
    "Apr 17 01:25:11 ai-pc ollama[56169]:   what():  unable to allocate backend buffer\n"
    "Apr 17 01:25:11 ai-pc ollama[56169]: time=2024-04-17T01:25:11.819+04:00 level=ERROR "
    'source=routes.go:120 msg="error loading llama server" error="llama runner process no '
    'longer running: -1 cudaMalloc failed: out of memory"\n'
)
# https://github.com/ollama/ollama/issues/6860's failure (device 4 of five) as Ollama's server
# log holds it: its own line first (the runner's command line as Ollama 0.3 prints it)
OLLAMA_6860 = (
    'time=2024-09-18T10:00:01.000+01:00 level=INFO source=server.go:384 msg="starting llama '
    'server" cmd="/tmp/ollama/runners/cuda_v12/ollama_llama_server --model '
    "/root/.ollama/models/blobs/sha256-x --ctx-size 8192 --batch-size 512 --n-gpu-layers 81 "
    '--parallel 4 --port 3456"\n'
    "llama_new_context_with_model: KV self size  = 5120.00 MiB, K (f16): 2560.00 MiB, V (f16): "
    "2560.00 MiB\n"
    "llama_new_context_with_model: pipeline parallelism enabled (n_copies=4)\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc "
    "failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate CUDA4 buffer of size 150995968\n"
    "llama_new_context_with_model: failed to allocate compute buffers\n"
)
# llama.cpp's own flags: none may appear in an Ollama remedy's action
_LLAMA_FLAGS = re.compile(r"(?<![\w-])(?:-c|-ngl|-ub|-ts|-np|--tensor-split|--ctx-size)\b")


def _actions(tmp_path: Path, text: str) -> list[str]:
    node = tmp_path / "node"
    node.mkdir()
    (node / "ollama.log").write_text(text, encoding="utf-8")
    findings = analyze(load_any([node], IngestOptions(year=2024, tz="UTC")))
    assert findings.primary is not None
    assert findings.primary.cls == "startup_misfit"
    return [r.action for r in findings.remedies]


def test_weights_that_do_not_fit_ask_for_fewer_layers_in_ollamas_words(tmp_path: Path) -> None:
    actions = _actions(tmp_path, OLLAMA_3683)
    assert actions, "a remedy"
    assert actions[0].startswith("lower num_gpu (the layers Ollama puts on the GPU)")
    assert "OLLAMA_GPU_OVERHEAD" in actions[0]
    assert not any(_LLAMA_FLAGS.search(a) for a in actions), actions


def test_one_gpu_of_several_is_relieved_with_ollamas_settings(tmp_path: Path) -> None:
    actions = _actions(tmp_path, OLLAMA_6860)
    split = next(a for a in actions if "CUDA4" in a)
    assert split.startswith("reserve room on each GPU with OLLAMA_GPU_OVERHEAD")
    assert "lower num_batch" in actions
    assert not any(_LLAMA_FLAGS.search(a) for a in actions), actions
