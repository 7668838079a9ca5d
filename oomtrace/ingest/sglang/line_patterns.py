"""SGLang's log lines as data: version families, message kinds and batch-line fields, each with
the sample that exercises it (``tests/unit/ingest/sglang/test_line_patterns.py`` runs every sample
through the parser). Sources: ``docs/formats/sglang.md`` (the SGLang source files and releases
each form comes from) and the public logs the samples are taken from.

Patterns apply to the *message*: the text after SGLang's ``[YYYY-MM-DD HH:MM:SS[.mmm][ DPn TPn
...]] `` prefix. Batch-line fields are extracted one by one (``key: value`` pairs), so their order,
optional fields (``accept len``, ``cuda graph``, ``#pending-token``, PD fields, ``largest-len``)
and the trailing ``, `` of 0.5.3 change nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from oomtrace.ingest.torch import oom_phase

# SGLang's own prefix, after any outer prefix (docker-compose, kubectl, Ray "(name pid=N)", ...).
# Releases up to 0.3.x print the time of day only (``datefmt="%H:%M:%S"``): ``[11:19:46 TP0]``.
PREFIX: Final = (
    r"^(?<outer>.*?)\[(?<stamp>(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2})(?:\.(?<ms>\d{3}))?"
    r"(?<ranks>(?: [A-Z][A-Z_]*\d+)*)\] ?(?<msg>.*)$"
)
# The same, capture-free, for locating the prefix fast (Polars ``str.find``).
PREFIX_FIND: Final = (
    r"\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: [A-Z][A-Z_]*\d+)*\](?: |$)"
)
# Just the prefix, for sniffing (Python ``re``).
PREFIX_SNIFF: Final = (
    r"\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?(?: [A-Z][A-Z_]*\d+)*\] "
)
# SGLang's lines under a logging configuration of the user's own (``SGLANG_LOGGING_CONFIG_PATH``,
# or an application that embeds SGLang's engine): Python ``logging``'s ``asctime``
# (``2026-06-07 10:59:32,625``), then the level and the logger's name in one of the usual
# arrangements, then SGLang's message. A logger name must have a dot (``sglang.srt...``) so that a
# message such as ``Receive: obj=...`` is never taken for one.
_LEVEL: Final = r"\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?"
PYTHON_LOGGING: Final = (
    r"^(?<outer>.*?)(?<date>\d{4}-\d{2}-\d{2})[ T](?<time>\d{2}:\d{2}:\d{2})[,.](?<ms>\d{3})\d*"
    r"(?:\s*-)?\s+(?:" + _LEVEL + r"\s*[-:|]?\s+)?(?:(?:sglang[\w.]*|\w+(?:\.\w+)+|root|__main__)"
    r"\s*(?:\[[^\]]*\])?\s*[-:|]\s+)?(?:" + _LEVEL + r"\s*[-:|]?\s+)?(?<msg>\S.*)$"
)
# A logging format of the user's that puts the process id after the level and SGLang's rank tag
# (if any: one GPU has none) with the source file in one bracket: ``2025-10-20 03:02:22 INFO
# 31223 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] Decode batch. ...`` (a PD deployment's own
# format).
RANKED_LOGGING: Final = (
    r"^(?<outer>.*?)(?<date>\d{4}-\d{2}-\d{2})[ T](?<time>\d{2}:\d{2}:\d{2})"
    r"(?:[,.](?<ms>\d{3})\d*)?\s+" + _LEVEL + r"\s+(?:\d+\s+)?"
    r"\[(?<ranks>(?:[A-Z][A-Z_]*\d+ )*)[\w./-]+\.py:\d+\]\s+(?<msg>\S.*)$"
)
# SGLang's own prefix with its opening bracket lost in a paste (``2025-09-13 09:09:15 TP0]
# Decode batch. ...``); only with a rank tag, which no other program prints there.
LOST_BRACKET: Final = (
    r"^(?<outer>.*?)(?<date>\d{4}-\d{2}-\d{2}) (?<time>\d{2}:\d{2}:\d{2})(?:\.(?<ms>\d{3}))?"
    r"(?<ranks>(?: [A-Z][A-Z_]*\d+)+)\] (?<msg>\S.*)$"
)
# A format of the user's with each field in its own brackets, no space between them
# (``[2026-04-15 17:13:10][scheduler_metrics_mixin.py:424][INFO]: Prefill batch, ...``, a large
# PD deployment's, sgl-project/sglang issue 22877).
BRACKETED_FIELDS: Final = (
    r"^(?<outer>.*?)\[(?<date>\d{4}-\d{2}-\d{2})[ T](?<time>\d{2}:\d{2}:\d{2})"
    r"(?:[,.](?<ms>\d{3})\d*)?\]\[[\w./-]+\.py:\d+\]\[(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]"
    r":?\s+(?<msg>\S.*)$"
)
# The forms a line without SGLang's own prefix is tried in, in this order.
OTHER_PREFIXES: Final = (RANKED_LOGGING, LOST_BRACKET, BRACKETED_FIELDS, PYTHON_LOGGING)


@dataclass(frozen=True)
class Family:
    """A version family: the newest family whose marker matches any batch or retraction message
    names the log. ``sample`` is a whole log line of that family."""

    name: str
    marker: str
    sample: str


FAMILIES: Final[tuple[Family, ...]] = (
    Family(
        "0.5.5+",
        r"^(?:Prefill|Decode) batch, |#new_tokens_gained: ",
        "[2026-04-05 20:02:51] Decode batch, #running-req: 32, #token: 11179, token usage: 0.08, "
        "cuda graph: True, gen throughput (token/s): 1635.11, #queue-req: 0",
    ),
    Family(
        # 0.5.4 prints the forward counter; 0.5.5+ does too with SGLANG_LOG_FORWARD_ITERS=1.
        "0.5.4",
        r"^(?:Prefill|Decode) batch \[\d+\], ",
        "[2025-10-21 08:12:40 TP0] Decode batch [5120], #running-req: 12, #token: 9000, "
        "token usage: 0.31, cuda graph: True, gen throughput (token/s): 980.12, #queue-req: 3, ",
    ),
    Family(
        "0.5.0-0.5.3",
        r"^(?:Prefill|Decode) batch\. .*(?:cuda|npu|cpu) graph: |#aborted_retracted_reqs: ",
        "[2025-10-02 11:00:01 TP0] Decode batch. #running-req: 40, #token: 51234, "
        "token usage: 0.55, cuda graph: True, gen throughput (token/s): 2101.40, #queue-req: 7, ",
    ),
    Family(
        "0.3",
        r"^Prefill batch\. .*cache hit rate: |^Decode out of memory happened\. ",
        "[2024-11-20 10:15:02 TP0] Prefill batch. #new-seq: 2, #new-token: 812, #cached-token: 40, "
        "cache hit rate: 4.69%, token usage: 0.02, #running-req: 5, #queue-req: 0",
    ),
    Family(
        "0.3-0.4",
        r"^(?:Prefill|Decode) batch\. ",
        "[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8, #token: 62531, "
        "token usage: 0.12, gen throughput (token/s): 186.64, #queue-req: 0",
    ),
    Family(
        # 0.1.x (2024, router/model_rpc.py) printed no time and no "batch" word on decode lines
        "0.1",
        r"^new fill batch\. |^#running-req: \d+, #token: ",
        "new fill batch. #seq: 1. #cached_token: 757. #new_token: 1. #remaining_req: 4. "
        "#running_req: 2. tree_cache_hit_rate: 80.83%.",
    ),
)


@dataclass(frozen=True)
class Kind:
    """A message the parser uses: ``pattern`` matches the message (after the prefix); ``starts``
    are the literal first words that select candidate lines cheaply (empty: see the parser)."""

    name: str
    pattern: str
    sample: str
    starts: tuple[str, ...] = ()


BATCH: Final = Kind(
    "batch",
    r"^(?:(?:Prefill|Decode) batch(?:\.|,| \[\d+\],)|new fill batch\. "
    r"|#running-req: \d+, #token: )",
    "[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, "
    "token usage: 0.08, #running-req: 31, #queue-req: 0, cuda graph: True, "
    "input throughput (token/s): 559.53",
    starts=("Prefill batch", "Decode batch", "new fill batch. ", "#running-req: "),
)
KINDS: Final[tuple[Kind, ...]] = (
    BATCH,
    Kind(
        # Three generations: 0.3.6 "Decode out of memory happened.", 0.5.3 with
        # #aborted_retracted_reqs, 0.5.23 (WARNING) with #new_tokens_gained.
        "retract",
        r"^(?:Decode out of memory happened|KV cache pool is full\. Retract requests)\. "
        r"#retracted_reqs: \d+",
        "[2025-10-02 11:00:05 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#aborted_retracted_reqs: 0, #new_token_ratio: 0.4500 -> 0.7000",
        starts=("Decode out of memory happened", "KV cache pool is full"),
    ),
    Kind(
        # "Out of memory." without the phase since 0.5 (mem_cache/common.py); retract_decode's
        # assertion when the one request left cannot grow (schedule_batch.py, "No space left for
        # only one request", https://github.com/sgl-project/sglang/pull/14948)
        "kv_pool_oom",
        r"(?:(?:Prefill|Decode) out|\bOut) of memory\. Try to lower your batch size"
        r"|No space left for only one request",
        "[2025-05-01 12:00:00 TP0] Prefill out of memory. Try to lower your batch size.",
    ),
    Kind(
        # the lines after it, without a prefix: what it asked, what the pool had
        "kv_pool_figures",
        r"^[\s`>]*(?:Try to allocate \d+ tokens\.|Ava(?:i)?liable (?:full )?tokens: \d+)",
        "Try to allocate 148 tokens.",
    ),
    Kind(
        # a traceback's frame around an OOM that says what the engine was doing: read with the
        # failure it belongs to (SGLang's model_runner.py: init_memory_pool, init_cuda_graphs)
        "oom_phase",
        oom_phase.LINES,
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line '
        "252, in init_cuda_graphs",
    ),
    Kind(
        # model_runner.py (init_memory_pool): the KV room profiled after the weights is at most
        # zero -> RuntimeError "Not enough memory. Please try to increase --mem-fraction-static."
        # (a traceback's last line, no prefix); the warning before it when --max-total-tokens
        # is set states the profiled value, negative when the weights left nothing
        "no_kv_memory",
        r"Not enough memory\. Please try to increase --mem-fraction-static"
        r"|max_total_tokens=\d+ is larger than the profiled value -\d+",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),
    Kind(
        "engine_dead",
        r"^(?:Received sigquit from a child process|Scheduler hit an exception|"
        r"DataParallelController hit an exception)",
        "[2026-02-27 15:27:13] Received sigquit from a child process. It usually means the child "
        "failed.",
        starts=("Received sigquit", "Scheduler hit an exception", "DataParallelController hit"),
    ),
    Kind(
        "server_args",
        r"^server_args=ServerArgs\(",
        "[2025-03-03 17:50:01] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', "
        "tp_size=2, mem_fraction_static=0.88, max_running_requests=None, page_size=1, dp_size=1)",
        starts=("server_args=ServerArgs(",),
    ),
    Kind(
        "load_weight_end",
        r"^Load weight end\. ",
        "[2025-12-29 18:33:03 TP0] Load weight end. type=Lfm2ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=13.81 GB, mem usage=1.52 GB.",
        starts=("Load weight end. ",),
    ),
    Kind(
        # 0.5.x adds the pool's dtype first: "KV Cache is allocated. dtype: torch.bfloat16, ..."
        "kv_cache_allocated",
        r"^KV Cache is allocated\. (?:dtype: [\w.]+, )?#tokens: \d+",
        "[2025-12-29 18:33:03 TP0] KV Cache is allocated. #tokens: 473854, K size: 2.71 GB, "
        "V size: 2.71 GB",
        starts=("KV Cache is allocated. ",),
    ),
    Kind(
        "graph_end",
        r"^Capture (?:cuda|npu|cpu) graph end\. ",
        "[2025-12-29 18:33:04 TP0] Capture cuda graph end. Time elapsed: 1.01 s. "
        "mem usage=0.03 GB. avail mem=2.39 GB.",
        starts=("Capture cuda graph end", "Capture npu graph end", "Capture cpu graph end"),
    ),
    Kind(
        "memory_summary",
        r"^max_total_num_tokens=\d+",
        "[2025-12-29 18:33:04 TP0] max_total_num_tokens=473854, chunked_prefill_size=2048, "
        "max_prefill_tokens=16384, max_running_requests=3730, context_len=40960, "
        "available_gpu_mem=2.39 GB",
        starts=("max_total_num_tokens=",),
    ),
    Kind(
        "receive",
        r"^Receive: obj=",
        "[2025-03-03 17:53:04] Receive: obj=GenerateReqInput(text=None, input_ids=[151646, 198, "
        "5405], sampling_params={'temperature': 0.1, 'max_new_tokens': 256}, rid='ced00776', "
        "stream=True)",
        starts=("Receive: obj=",),
    ),
    Kind(
        "finish",
        r"^Finish: obj=",
        "[2025-03-03 17:53:06] Finish: obj=GenerateReqInput(text=None, input_ids=[151646, 198, "
        "5405], rid='ced00776'), out={'text': 'hi', 'meta_info': {'id': 'ced00776', "
        "'finish_reason': {'type': 'length', 'length': 256}, 'prompt_tokens': 3, "
        "'completion_tokens': 256, 'cached_tokens': 1}}",
        starts=("Finish: obj=",),
    ),
)


@dataclass(frozen=True)
class Field:
    """One ``key: value`` of a batch line. ``metric`` is the canonical sample it feeds (None:
    combined with others, see the parser); ``scale`` converts the printed number."""

    name: str
    pattern: str
    metric: str | None
    sample: str
    value: float
    scale: float = 1.0

    @property
    def key(self) -> str:
        """The literal words the pattern needs (for a cheap presence test)."""
        return (
            self.pattern.split(" (", 1)[0]
            .removeprefix("(?:^|, )")
            .removeprefix(", ")
            .replace("\\", "")
        )


FIELDS: Final[tuple[Field, ...]] = (
    Field("running", r"#running-req: (\d+)", "requests_running", "#running-req: 31", 31),
    Field("queued", r"#queue-req: (\d+)", "requests_waiting", "#queue-req: 12279", 12279),
    # "token usage" is a 0-1 fraction of the KV pool. Hybrid models print one per pool; the
    # parser takes the fullest of the attention pools for the KV usage. Mamba state ("mamba
    # usage", slots of the recurrent-state pool) is not KV cache: it is its own metric.
    Field("usage", r"(?:^|, )token usage: ([0-9.]+)", None, ", token usage: 0.93", 0.93),
    Field("full_usage", r"full token usage: ([0-9.]+)", None, "full token usage: 0.74", 0.74),
    Field("swa_usage", r"swa token usage: ([0-9.]+)", None, "swa token usage: 0.81", 0.81),
    Field("mamba_usage", r"mamba usage: ([0-9.]+)", "state_usage_ratio", "mamba usage: 0.80", 0.80),
    Field("tokens", r", #token: (\d+)", None, ", #token: 55006", 55006),
    Field("full_tokens", r"#full token: (\d+)", None, "#full token: 350592", 350592),
    # HiSparse (sgl-project/sglang PR 22331) names the device pool "gpu" beside a host ("cpu")
    # pool that holds evicted tokens: only the device pool is the KV cache that can run out.
    Field("gpu_usage", r"gpu token usage: ([0-9.]+)", None, "gpu token usage: 0.29", 0.29),
    Field("gpu_tokens", r"#gpu-token: (\d+)", None, "#gpu-token: 20800", 20800),
    # 0.1.x's prefill line: "new fill batch. #seq: 1. ... #remaining_req: 4. #running_req: 2."
    Field("running_v01", r"#running_req: (\d+)", None, "#running_req: 2", 2),
    Field("queued_v01", r"#remaining_req: (\d+)", None, "#remaining_req: 4", 4),
    Field(
        "gen_tput",
        r"gen throughput \(token/s\): ([0-9.]+)",
        "generation_throughput_tokens_per_s",
        "gen throughput (token/s): 1397.13",
        1397.13,
    ),
    Field(
        "input_tput",
        r"input throughput \(token/s\): ([0-9.]+)",
        "prompt_throughput_tokens_per_s",
        "input throughput (token/s): 559.53",
        559.53,
    ),
    Field(
        "hit_rate",
        r"cache hit rate: ([0-9.]+)%",
        "prefix_cache_hit_ratio",
        "cache hit rate: 4.69%",
        0.0469,
        0.01,
    ),
)

# Startup lines. SGLang prints "GB" for GiB: every figure comes from torch.cuda.mem_get_info() /
# (1 << 30) (sglang/srt/utils.py get_available_gpu_memory) or from byte counts / GB with
# GB = 1024 * 1024 * 1024 (sglang/srt/mem_cache/memory_pool.py), so GB here means 2**30 bytes.
GIB_FIELDS: Final = {
    "avail_mem": r"avail mem=([0-9.]+) ?GB",
    "mem_usage": r"mem usage=([0-9.]+) ?GB",
    "k_size": r"(?:^|, )K size: ([0-9.]+) ?GB",
    "v_size": r"V size: ([0-9.]+) ?GB",
    "kv_size": r"KV size: ([0-9.]+) ?GB",
    "available_gpu_mem": r"available_gpu_mem=([0-9.]+) ?GB",
}
INT_FIELDS: Final = {
    "kv_tokens": r"#tokens: (\d+)",
    "max_total_num_tokens": r"max_total_num_tokens=(\d+)",
    "max_running_requests": r"max_running_requests=(\d+)",
    "context_len": r"context_len=(\d+)",
    "chunked_prefill_size": r"chunked_prefill_size=(-?\d+)",
    "max_prefill_tokens": r"max_prefill_tokens=(\d+)",
    "tp_size": r"[(,] ?tp_size=(\d+)",
    "dp_size": r"[(,] ?dp_size=(\d+)",
    "page_size": r"[(,] ?page_size=(\d+)",
}
TEXT_FIELDS: Final = {
    "arch": r"type=([A-Za-z0-9_]+)",
    "kv_dtype": r"^KV Cache is allocated\. dtype: (?:torch\.)?(\w+)",
    "dtype": r"dtype=(torch\.[a-z0-9_]+)",
    "model_path": r"\(model_path='([^']*)'",
    "mem_fraction_static": r"mem_fraction_static=([0-9.]+)",
}

# SGLang's messages pasted without its prefix (an issue quoting one line, inline code, a block
# cut at the time): the first words of a message SGLang alone prints. A line may keep the rank
# tag (``[TP0] Scheduler hit an exception``), markdown's quote or code marks, and spaces.
BARE_STARTS: Final = tuple(word for kind in KINDS for word in kind.starts)
BARE: Final = (
    r"^[\s`>*|]*(?:\[(?<ranks>(?:[A-Z][A-Z_]*\d+ ?)+)\] ?)?(?<msg>(?:"
    + "|".join(re.escape(word) for word in BARE_STARTS)
    + r").*?)[`\s]*$"
)
