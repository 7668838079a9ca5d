"""Small factories for replay tests: requests with a lifecycle, and a trace directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oomtrace.schema import empty
from oomtrace.trace import Manifest, Trace, write_trace
from tests import factories
from tests.factories import at


def lifecycle(
    rid: str,
    arrived: float,
    *,
    prompt: int = 32,
    output: int | None = 8,
    max_tokens: int | None = 64,
    prefill_s: float | None = 1.0,
    decode_s: float = 8.0,
    admitted: float | None = None,
    ended: str = "finished",
) -> list[dict[str, Any]]:
    """The canonical events of one request: arrived, admitted, first_token and its end.

    ``decode_s`` is the time from first token to the end; ``prefill_s`` None leaves out the
    first_token event (no recorded prefill or decode time)."""
    start = arrived if admitted is None else admitted
    rows: list[dict[str, Any]] = [
        {"ts": at(arrived), "request_id": rid, "event": "arrived", "prompt_tokens": prompt,
         "max_tokens": max_tokens},
        {"ts": at(start), "request_id": rid, "event": "admitted"},
    ]  # fmt: skip
    end = start + (prefill_s or 0.0) + decode_s
    if prefill_s is not None:
        rows.append({"ts": at(start + prefill_s), "request_id": rid, "event": "first_token"})
    rows.append({"ts": at(end), "request_id": rid, "event": ended, "output_tokens": output})
    return rows


def trace_of(
    *requests: list[dict[str, Any]],
    samples: list[dict[str, Any]] | None = None,
    engine_config: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
) -> Trace:
    rows = [row for request in requests for row in request]
    return Trace(
        samples=factories.samples(*samples) if samples else empty("samples"),
        requests=factories.requests(*rows) if rows else empty("requests"),
        manifest=Manifest(
            nodes=["node-a"],
            engine={"name": "vllm", "version_family": "v1"},
            model=model or {},
            engine_config=engine_config if engine_config is not None else {},
        ),
    )


def trace_dir(tmp_path: Path, trace: Trace) -> Path:
    out = tmp_path / "trace"
    write_trace(trace, out)
    return out
