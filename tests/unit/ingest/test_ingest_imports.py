"""What `oomtrace ingest` of a vLLM log loads: the parsers of other formats are listed (each is
asked whether it reads the file) but their heavy dependencies are loaded only when one of them
parses something."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LOG = Path(__file__).resolve().parents[2] / "data" / "vllm" / "v1_0.11_tp2_oom.log"
# Loaded only to parse a /metrics text the Polars path leaves, or a collector's capture.
NOT_FOR_A_LOG = ("prometheus_client", "collectors.segments", "collectors.reader")


def test_ingest_of_a_vllm_log_loads_no_other_formats_dependencies(tmp_path: Path) -> None:
    # GIVEN a real vLLM log WHEN `oomtrace ingest` reads it in a fresh interpreter
    code = (
        "import sys\n"
        "from oomtrace.cli import cli\n"
        f"cli.main(['ingest', {str(LOG)!r}, '-o', {str(tmp_path / 'trace')!r}],"
        " prog_name='oomtrace', standalone_mode=False)\n"
        f"print(' '.join(m for m in {NOT_FOR_A_LOG!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # THEN the trace is written and none of the other formats' dependencies was loaded
    assert (tmp_path / "trace" / "manifest.json").exists()
    assert out.stdout.splitlines()[-1].split() == []
