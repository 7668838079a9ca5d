"""The prepared GPU check exits cleanly, saying why, where it cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
ADVICE = "run it on a machine with an NVIDIA GPU, PyTorch and nvidia-ml-py\n"


def run_check(tmp_path: Path, fake_torch: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if fake_torch is not None:
        (tmp_path / "torch.py").write_text(fake_torch)
        env["PYTHONPATH"] = str(tmp_path)
    return subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, check=False
    )


def test_without_pytorch_the_check_is_skipped_with_its_reason(tmp_path: Path) -> None:
    result = run_check(tmp_path, fake_torch="raise ImportError('no torch here')\n")
    assert result.returncode == 0
    assert result.stdout == f"gpu_check: skipped: PyTorch is not installed; {ADVICE}"


def test_without_a_gpu_the_check_is_skipped_with_its_reason(tmp_path: Path) -> None:
    fake = "from types import SimpleNamespace\ncuda = SimpleNamespace(is_available=lambda: False)\n"
    result = run_check(tmp_path, fake_torch=fake)
    assert result.returncode == 0
    assert result.stdout == (
        "gpu_check: skipped: torch.cuda.is_available() is False (no CUDA GPU or driver); " + ADVICE
    )
