"""``nvidia-smi dmon`` / ``pmon`` as captured in public repositories: the frame buffer per GPU and
per process, with or without the monitor's date and time columns."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.nvidia_smi.monitor_parser import PARSER
from oomtrace.trace import Trace
from tests.factories import file_at

DATA = Path(__file__).resolve().parents[3] / "data" / "nvidia_smi"
MiB = 1 << 20
MTIME = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

# https://github.com/sugarcraft/candy-top/blob/main/tests/fixtures/gpu/nvidia/skynet2-pmon.txt
# (driver 595, SGLang on four GPUs): pmon -s um then dmon -s pucm, each in a fence under a
# heading; the dmon fb figures equal the same capture's memory.used in MiB although the unit line
# says MB.
PMON_DMON = (DATA / "monitor-595-pmon-dmon.txt").read_text()

# https://github.com/XueSongTap/XueSongTap.github.io/blob/main/_posts/2024-01-04-nvidia-smi-more.md:
# dmon -o TD (date and time first), a blank line among the rows.
DMON_TD = (DATA / "monitor-dmon-date-time.txt").read_text()

# A dmon without -s m (HeKun-NVIDIA/AI-Blog, 83.nvidia-smi): no fb column, so no memory figure.
DMON_NO_FB = """\
# gpu   pwr gtemp mtemp    sm   mem   enc   dec  mclk  pclk
# Idx     W     C     C     %     %     %     %   MHz   MHz
    0    43    35     -     0     0     0     0  2505  1075
    1    42    31     -    97     9     0     0  2505  1075
"""


def _ingest(tmp_path: Path, text: str, **options: object) -> Trace:
    path = file_at(tmp_path / "monitor.txt", MTIME, text=text)
    return ingest_paths([path], IngestOptions(**options))  # type: ignore[arg-type]


def _rows(trace: Trace, metric: str) -> list[tuple[object, ...]]:
    frame = trace.samples.filter(pl.col("metric") == metric).sort("device", "pid", "ts")
    return frame.select("device", "pid", "value").rows()


def test_pmon_and_dmon_give_process_and_device_frame_buffer(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, PMON_DMON)
    (diag,) = trace.manifest.sources
    assert diag.parser == "nvidia-smi-monitor"
    assert _rows(trace, "process_used_bytes") == [
        (0, 2094147, 90480.0 * MiB),
        (2, 377306, 550.0 * MiB),
        (2, 377813, 47594.0 * MiB),
    ]
    assert _rows(trace, "device_used_bytes") == [(0, None, 90538.0 * MiB), (3, None, 48209.0 * MiB)]
    names = trace.events.filter(pl.col("kind") == "process").sort("pid")
    assert names.select("pid", "detail").rows() == [
        (377306, "python3"),
        (377813, "sgl_diffusion::"),
        (2094147, "sglang::schedul"),
    ]
    assert diag.skipped["pmon row of a GPU with no process"].count == 1
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped
    # no date and time columns: kept in order, never given a made-up time
    assert trace.samples["ts"].null_count() == trace.samples.height


def test_dmon_with_date_and_time_is_placed_in_the_zone_given(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, DMON_TD, tz="Asia/Shanghai")
    frame = trace.samples.sort("ts")
    assert frame.select("device", "value").rows() == [
        (0, 239.0 * MiB),
        (0, 74.0 * MiB),
        (0, 478.0 * MiB),
    ]
    assert frame["ts"][0] == datetime(2024, 1, 4, 5, 54, 35, tzinfo=UTC)
    (diag,) = trace.manifest.sources
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped


def test_a_monitor_without_fb_states_no_memory(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, DMON_NO_FB)
    assert trace.samples.height == 0
    (diag,) = trace.manifest.sources
    assert diag.skipped["monitor row without an fb column (use -s m)"].count == 2


def test_sniffing_wants_the_header_and_its_unit_line() -> None:
    assert PARSER.sniff(DMON_TD, "x") == 0.85
    assert PARSER.sniff("# gpu pwr\nsomething else\n", "x") == 0.0


# https://github.com/mozilla/DeepSpeech/issues/178 (2016, four GPUs): dmon -s pucvmet quoted in an
# issue with "> " and its header's "#" escaped for Markdown; fb is the twelfth column.
DMON_QUOTED = r"""This gives us lots of valuable informations:
> \# gpu   pwr  temp    sm   mem   enc   dec  mclk  pclk pviol tviol    fb  bar1 sbecc dbecc   pci rxpci txpci
> \# Idx     W     C     %     %     %     %   MHz   MHz     %  bool    MB    MB  errs  errs  errs  MB/s  MB/s
>     0   111    83    25     7     0     0  4513  1683     0     0 11651     2     -     -     0    41     8
>     3    86    70    18     6     0     0  4513  1784     0     0 11660     2     -     -     0    62     5

We do this under the assumption that our code is the only one making use of GPU.
"""  # noqa: E501


def test_a_quoted_monitor_with_an_escaped_hash_is_read(tmp_path: Path) -> None:
    assert PARSER.sniff(DMON_QUOTED, "x") > 0
    trace = _ingest(tmp_path, DMON_QUOTED)
    used = trace.samples.filter(pl.col("metric") == "device_used_bytes").sort("device")
    assert used.select("device", "value").rows() == [(0, 11651.0 * MiB), (3, 11660.0 * MiB)]
