"""The requests of a llama.cpp server (``llama-server``, and the runner Ollama starts), from its
slot lines: read by the ``pytorch-log`` parser beside llama.cpp's start-up and failure lines
(:mod:`oomtrace.ingest.torch.llamacpp_log`; ``docs/formats/pytorch.md``, "llama.cpp's log").

The server gives each request a task id and runs it in a slot, one of ``--parallel`` that share
the KV cache (``tools/server/server.cpp``, earlier ``examples/server/server.cpp``), and says so a
line at a time, ``slot <function>: id <slot> | task <task> | <what>``:

* ``new prompt, n_ctx_slot = 131072, n_keep = 4, task.n_tokens = 14892`` (2025-2026; the 2024
  server's ``prompt tokenized, n_ctx_slot = 4096, n_keep = 0, n_prompt_tokens = 13``): the
  request admitted to its slot with its prompt's tokens, an ``admitted`` event;
* ``prompt done, n_tokens = 1360, batch.n_tokens = 1360``: its prompt processed (the slot's
  context then holds the prompt), a ``first_token`` event with the prompt's tokens;
* ``stop processing: n_tokens = 1369, truncated = 0`` (the 2024 server's ``n_past = 63``) on the
  slot's ``release``: the request finished; the slot's context then holds the prompt and all
  but the last token generated (the last is sampled, never decoded: 1360 prompt tokens, 10
  generated, 1369 held), so ``output_tokens`` is the context less the prompt, plus one, where
  the prompt was seen;
* ``srv  stop: cancel task, id_task = 22416``: the client went away, an ``aborted`` event.

The task id is the request's id (the server numbers tasks from 0 at its start; a restart begins
again, which the analysis sees as one id used twice). The slot lines carry no time of day: a log
without one keeps the order of its lines (the parser's rule for an untimed log).
"""

from __future__ import annotations

from typing import Final

import polars as pl

_TASK: Final = r"\bid +\d+ \| task (\d+) \| "
_NEW_PROMPT: Final = (
    _TASK + r"(?:new prompt|prompt tokenized), n_ctx_slot = \d+, n_keep = -?\d+, "
    r"(?:task\.n_tokens|n_prompt_tokens) = (\d+)"
)
_PROMPT_DONE: Final = _TASK + r"prompt done, n_tokens = (\d+)"
_RELEASE: Final = _TASK + r"stop processing: (?:n_tokens|n_past) = (\d+)"
_CANCEL: Final = r"\bsrv +stop: cancel task, id_task = (\d+)"
# Every slot line read for a request.
LINES: Final = f"(?:{_NEW_PROMPT})|(?:{_PROMPT_DONE})|(?:{_RELEASE})|(?:{_CANCEL})"
# What marks a llama.cpp server's log by its slot lines alone (the server's start cut off).
MARKERS: Final = (
    r"\b(?:slot|srv) +[\w()]+: +(?:id +\d+ \| task -?\d+ \||all slots are idle)|" + _CANCEL
)


def requests(lines: pl.DataFrame) -> pl.DataFrame:
    """The requests' events among ``lines`` (``ts``, ``text``, in file order): admitted and
    prefilled with the prompt's tokens, finished with the tokens generated, aborted."""
    text = pl.col("text")
    admitted = lines.select(
        "ts",
        request_id=text.str.extract(_NEW_PROMPT, 1),
        event=pl.lit("admitted"),
        prompt_tokens=text.str.extract(_NEW_PROMPT, 2).cast(pl.Int64),
    )
    prefilled = lines.select(
        "ts",
        request_id=text.str.extract(_PROMPT_DONE, 1),
        event=pl.lit("first_token"),
        prompt_tokens=text.str.extract(_PROMPT_DONE, 2).cast(pl.Int64),
    )
    released = lines.select(
        "ts",
        request_id=text.str.extract(_RELEASE, 1),
        event=pl.lit("finished"),
        _context=text.str.extract(_RELEASE, 2).cast(pl.Int64),
    )
    cancelled = lines.select("ts", request_id=text.str.extract(_CANCEL, 1), event=pl.lit("aborted"))
    found = (admitted, prefilled, released, cancelled)
    rows = pl.concat(
        [f.filter(pl.col("request_id").is_not_null()) for f in found], how="diagonal_relaxed"
    ).sort("ts", maintain_order=True)
    if rows.height == 0:
        return pl.DataFrame()
    prompt = pl.col("prompt_tokens").forward_fill().over("request_id")
    # the last token sampled is never decoded into the context: the context holds one fewer
    output = pl.col("_context") - prompt + 1
    return rows.with_columns(output_tokens=pl.when(output >= 0).then(output).cast(pl.Int64)).drop(
        "_context"
    )
