"""What names the requests in each engine's log, for the line that replaces the coverage figure
where the inputs name no request: each engine has its own way, and some have none that oomtrace
reads (the engine names are those ingest records in the manifest's ``engine.name``).

* vLLM logs each request only under ``--enable-log-requests`` (off by default since
  ``vllm-project/vllm#21739``, 2025; earlier releases logged them unless
  ``--disable-log-requests``); the oomtrace vLLM plugin records them from inside the engine once
  ``OOMTRACE_VLLM_DIR`` points it at a capture directory (README, "oomtrace collect").
* SGLang logs no request by default: ``--log-requests`` (``--log-requests-level`` for how much),
  docs.sglang.io "Observability".
* llama.cpp's ``llama-server`` prints a slot line per request (``slot launch_slot_: id 0 | task
  12 | new prompt, ... task.n_tokens = N``) at its default verbosity: what is missing is the
  server's log from before the failure (``tools/server/server.cpp``).
* Ollama's log states no request's tokens (its ``[GIN]`` lines are HTTP calls; its Go runner
  prints no per-request slot line oomtrace reads), and TGI's router logs a request only once it
  succeeded, with no id and no prompt tokens (``text_generation_router::server: ... Success``);
  TensorRT-LLM logs none: for these the requests stay unnamed, and what a capture adds is the
  device's memory over time.
"""

from __future__ import annotations

from typing import Final

_COLLECT: Final = "run `oomtrace collect` beside the server"
_HOW: Final = {
    "vllm": (
        "start vLLM with --enable-log-requests, or with oomtrace's vLLM plugin "
        "(OOMTRACE_VLLM_DIR set to a capture directory)"
    ),
    "sglang": f"start SGLang with --log-requests, or {_COLLECT}",
    "llama.cpp": (
        "keep llama-server's log from before the failure: it prints a slot line per request "
        "(`slot launch_slot_: ... | task N | new prompt`) at its default verbosity"
    ),
    "ollama": (
        "Ollama's log states no request's tokens (its [GIN] lines are HTTP calls only), so the "
        f"size of a request is its num_ctx; {_COLLECT} for the device's memory over time"
    ),
    "tgi": (
        "TGI's router logs a request only once it succeeded, with no id or prompt tokens; "
        f"{_COLLECT} with --prometheus on its /metrics for the batch and queue over time"
    ),
    "tensorrt-llm": (
        f"TensorRT-LLM logs no request by id; {_COLLECT} (--nvml) for the device's memory over time"
    ),
}
_ANY: Final = (
    "turn on the engine's request logging (vLLM's --enable-log-requests, SGLang's "
    f"--log-requests, llama-server's slot lines), or {_COLLECT}"
)


def how_to_name_requests(engine: str | None) -> str:
    """What names the requests for ``engine`` (the manifest's engine name; any other: every
    engine's way), a clause to follow "the inputs name no request"."""
    return _HOW.get((engine or "").lower(), _ANY)
