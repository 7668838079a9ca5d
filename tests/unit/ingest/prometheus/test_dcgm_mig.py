"""dcgm-exporter on MIG-partitioned GPUs: every GPU instance's framebuffer is its own memory,
kept as a part of its GPU (a ``#mig=ID`` source qualifier on the GPU's index), not dropped."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from tests.factories import file_at

MiB = 1 << 20
MTIME = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
LABELS = 'UUID="GPU-{u}",device="nvidia{g}",modelName="NVIDIA A30",GPU_I_PROFILE="1g.6gb"'

# NVIDIA/dcgm-exporter#317: two A30s each split into four 1g.6gb instances (GI 3 to 6), no
# whole-GPU series; the paste starts at the TYPE line.
A30_FOUR_EACH = "# TYPE DCGM_FI_DEV_FB_USED gauge\n" + "".join(
    f'DCGM_FI_DEV_FB_USED{{gpu="{g}",{LABELS.format(u=f"265c981{g}", g=g)},GPU_I_ID="{i}",'
    f'Hostname="a30-node-0003"}} 3\n'
    for g in (0, 1)
    for i in (3, 4, 5, 6)
)


def test_each_mig_instance_of_each_gpu_is_kept_as_a_part_of_it(tmp_path: Path) -> None:
    path = file_at(tmp_path / "dcgm.prom", MTIME, text=A30_FOUR_EACH)
    trace = ingest_paths([path], IngestOptions())
    rows = trace.samples.select(
        "device", pl.col("source").str.extract(r"#mig=(\d+)$").alias("gi"), "value"
    ).sort("device", "gi")
    assert rows.rows() == [
        (device, gi, 3.0 * MiB) for device in (0, 1) for gi in ("3", "4", "5", "6")
    ]
    assert set(trace.samples["metric"]) == {"device_used_bytes"}
    assert not trace.manifest.sources[0].skipped
