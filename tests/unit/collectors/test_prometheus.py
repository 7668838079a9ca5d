"""Prometheus filtering on real exposition text of every dialect, and the scrape records."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.prometheus import FetchError, PrometheusSource, filter_exposition
from collectors.prometheus_families import KEEP
from tests.unit.collectors.factories import MemorySink, vllm_metrics

ROOT = Path(__file__).resolve().parents[3]

DATA = Path(__file__).resolve().parent / "data"
# Exposition samples: see data/README.md for where each one comes from.
SGLANG_0_5_1 = (DATA / "sglang-0.5.1.prom").read_text()
VLLM_EARLY_V1 = (DATA / "vllm-early-v1.prom").read_text()
DCGM = (DATA / "dcgm.prom").read_text()
LLAMA_CPP = (DATA / "llamacpp.prom").read_text()
TGI = (DATA / "tgi.prom").read_text()


def sample_names(text: str) -> set[str]:
    return {
        line.split("{", 1)[0].split(" ", 1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_vllm_keeps_memory_families_and_drops_histograms_help_and_created() -> None:
    result = filter_exposition(vllm_metrics(kv=0.9871))
    assert sample_names(result.text) == {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
    }
    assert "# HELP" not in result.text
    assert "# TYPE vllm:kv_cache_usage_perc gauge\n" in result.text
    labels = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    assert f"vllm:kv_cache_usage_perc{{{labels}}} 0.9871\n" in result.text


def test_cache_config_info_is_kept_apart_from_the_per_scrape_text() -> None:
    result = filter_exposition(vllm_metrics(blocks=1234))
    assert "cache_config_info" not in result.text
    assert result.info_text.startswith("# TYPE vllm:cache_config_info gauge\n")
    assert 'num_gpu_blocks="1234"} 1.0' in result.info_text


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (
            SGLANG_0_5_1,
            {
                "sglang:num_running_reqs",
                "sglang:num_used_tokens",
                "sglang:token_usage",
                "sglang:gen_throughput",
            },
        ),
        (
            VLLM_EARLY_V1,
            {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc"},
        ),
        (DCGM, {"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS"}),
        (
            LLAMA_CPP,
            {
                "llamacpp:kv_cache_usage_ratio",
                "llamacpp:n_busy_slots_per_decode",
                # the throughput gauges ingest maps (a live capture dropped them once)
                "llamacpp:prompt_tokens_seconds",
                "llamacpp:predicted_tokens_seconds",
            },
        ),
        (TGI, {"tgi_queue_size", "tgi_request_failure"}),
    ],
    ids=["sglang", "vllm-early-v1", "dcgm-untyped", "llama.cpp", "tgi"],
)
def test_every_dialect_keeps_its_memory_and_admission_families(text: str, kept: set[str]) -> None:
    assert sample_names(filter_exposition(text).text) == kept


def test_a_type_line_first_in_the_text_is_still_a_family() -> None:
    assert filter_exposition("# TYPE tgi_queue_size gauge\ntgi_queue_size 1\n").text == (
        "# TYPE tgi_queue_size gauge\ntgi_queue_size 1\n"
    )


@pytest.mark.parametrize(
    "body", ["<html><body>502 Bad Gateway</body></html>", "", '{"error": "oops"}', "\n\n"]
)
def test_text_that_is_not_exposition_is_a_fetch_error(body: str) -> None:
    with pytest.raises(FetchError, match="not Prometheus text exposition"):
        filter_exposition(body)


@given(st.text(max_size=300))
def test_filtering_never_fails_other_than_with_a_fetch_error(text: str) -> None:
    try:
        result = filter_exposition(text)
    except FetchError:
        return
    assert sample_names(result.text) <= KEEP


def _benchmark() -> ModuleType:
    path = ROOT / "benchmarks" / "collector_overhead.py"
    spec = importlib.util.spec_from_file_location("collector_overhead", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["collector_overhead"] = module
    spec.loader.exec_module(module)
    return module


def test_a_full_size_vllm_scrape_shrinks_to_its_memory_families() -> None:
    # GIVEN the benchmark's full vLLM 0.11 exposition (histograms, _created, process metrics)
    full = _benchmark().full_vllm_exposition().decode()
    # WHEN filtered
    result = filter_exposition(full)
    # THEN only gauge/counter families of the memory and admission set remain
    assert sample_names(result.text) <= KEEP
    assert "vllm:kv_cache_usage_perc" in sample_names(result.text)
    assert not any(
        n.endswith(("_bucket", "_created", "_sum", "_count")) for n in sample_names(result.text)
    )
    assert len(result.text) * 10 < len(full)


class FakeFetcher:
    url = "http://127.0.0.1:9/metrics"

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)

    def fetch(self) -> bytes:
        return self.bodies.pop(0)

    def close(self) -> None:
        return


def test_an_unchanged_scrape_is_written_as_same_and_the_cache_config_once() -> None:
    # GIVEN three scrapes: two identical, then a change of KV usage
    fetcher = FakeFetcher(
        vllm_metrics(kv=0.5).encode(), vllm_metrics(kv=0.5).encode(), vllm_metrics(kv=0.9).encode()
    )
    sink = MemorySink()
    source = PrometheusSource(fetcher, sink, monotonic_ns=iter(range(0, 100, 5)).__next__)
    # WHEN polled three times
    for ts in (100, 200, 300):
        source.poll(ts)
    # THEN the cache config is one sticky record, the repeat is marked, times are the poll times
    prom = sink.kind("prom")
    assert [r.get("info") for r in prom] == [1, None, None, None]
    assert [("same" in r, r["ts"]) for r in prom[1:]] == [(False, 100), (True, 200), (False, 300)]
    assert prom[1]["dur"] == 5
    assert "0.9" in prom[3]["text"]


def test_a_changed_cache_config_is_written_again() -> None:
    sink = MemorySink()
    fetcher = FakeFetcher(vllm_metrics(blocks=100).encode(), vllm_metrics(blocks=200).encode())
    source = PrometheusSource(fetcher, sink)
    source.poll(1)
    source.poll(2)
    infos = [r["text"] for r in sink.kind("prom") if r.get("info")]
    assert len(infos) == 2
    assert 'num_gpu_blocks="200"' in infos[1]


def test_a_body_that_is_not_utf8_is_a_fetch_error() -> None:
    source = PrometheusSource(FakeFetcher(b"\xff\xfe garbage"), MemorySink())
    with pytest.raises(FetchError, match=r"not UTF-8 text \(byte 0\)"):
        source.poll(1)
