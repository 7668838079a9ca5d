"""A capture's device inventory (the NVML source's info record) names the GPU: ingest keeps the
names, and the report's header says which device ran out."""

from __future__ import annotations

from pathlib import Path

from oomtrace.ingest import IngestOptions, load_any
from oomtrace.report import ReportInputs, build_report

CAPTURE = Path(__file__).resolve().parents[4] / "sample_logs" / "vllm-prefill-oom" / "capture"


def test_the_gpu_nvml_named_is_kept_and_shown_in_the_report_header() -> None:
    # GIVEN the shipped capture of an L40S node (its NVML source wrote the device inventory)
    trace = load_any([CAPTURE], IngestOptions())
    # THEN the manifest keeps the device's name, by index
    assert trace.manifest.engine_config["gpu_names"] == ["NVIDIA L40S"]
    # AND the report's header names it beside the memory NVML measured
    report = build_report(ReportInputs({}, trace))
    assert "GPU NVIDIA L40S, 44.99 GiB" in report.subtitle
