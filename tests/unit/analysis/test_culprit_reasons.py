"""What a culprit's reason claims is what the inputs state: a request is "in prefill" only when
its first token is known to come after the peak."""

from __future__ import annotations

from oomtrace.analysis import analyze
from oomtrace.trace import Manifest, Trace
from tests.factories import at, events, requests, samples

GiB = 1 << 30
MANIFEST = Manifest(
    engine_config={"block_size": 16, "num_gpu_blocks": 1000, "available_kv_cache_bytes": 2 * GiB}
)


def _oom() -> object:
    return events(
        {"ts": at(60), "kind": "oom", "requested_bytes": 4 * GiB, "total_bytes": 40 * GiB,
         "free_bytes": GiB},
    )  # fmt: skip


def _trace(*rows: dict[str, object]) -> Trace:
    """The requests, the OOM, and a KV pool observed at 10 % (room left)."""
    kv = samples(*[{"ts": at(t), "metric": "kv_usage_ratio", "value": 0.1} for t in range(61)])
    return Trace(kv, requests(*rows), _oom(), MANIFEST)  # type: ignore[arg-type]


def test_without_first_tokens_a_transient_culprit_is_admitted_not_said_to_be_in_prefill() -> None:
    # GIVEN a log that states arrivals and admissions but never a first token, and an OOM at 60 s
    trace = _trace(
        {"ts": at(59.4), "request_id": "long", "event": "arrived", "prompt_tokens": 14_000},
        {"ts": at(59.4), "request_id": "long", "event": "admitted"},
        {"ts": at(57), "request_id": "short", "event": "arrived", "prompt_tokens": 900},
        {"ts": at(57), "request_id": "short", "event": "admitted"},
    )
    # WHEN it is analysed
    incident = analyze(trace).primary
    # THEN the longest prompt admitted in the window is first, and its reason says only that
    assert incident is not None
    assert incident.cls == "transient_peak"
    first = incident.culprits[0]
    assert first.request_id == "long"
    assert first.reason.startswith("admitted 0.6 s before the peak with a 14,000-token prompt")
    assert "in prefill at the peak" not in first.reason


def test_a_request_whose_first_token_came_after_the_peak_is_in_prefill() -> None:
    # GIVEN first tokens stated: one request's comes after the OOM
    trace = _trace(
        {"ts": at(59.4), "request_id": "long", "event": "admitted", "prompt_tokens": 14_000},
        {"ts": at(61), "request_id": "long", "event": "first_token"},
        {"ts": at(50), "request_id": "short", "event": "admitted", "prompt_tokens": 900},
        {"ts": at(51), "request_id": "short", "event": "first_token"},
    )
    # WHEN it is analysed, THEN it is named as in prefill, with how long it had been resident
    incident = analyze(trace).primary
    assert incident is not None
    assert incident.culprits[0].reason == (
        "in prefill at the peak with a 14,000-token prompt; resident for 0.6 s"
    )
