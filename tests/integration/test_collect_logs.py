"""The agent following a log that an engine really appends to while logrotate rotates it, both
ways; every line is captured once, in order, with prompts removed."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from collectors.agent import Agent
from collectors.config import build_config
from collectors.segments import read_capture


class Engine:
    """Appends numbered lines through one open handle, as a logging FileHandler does; reopens
    its file on request (what a postrotate signal makes an engine do)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = path.open("a", encoding="utf-8")
        self.count = 0
        self.lock = threading.Lock()

    def write(self, n: int) -> None:
        with self.lock:
            for _ in range(n):
                self.handle.write(
                    f"INFO 03-11 06:18:50 [logger.py:39] Received request r-{self.count}: "
                    f"prompt: 'secret {self.count}', params: SamplingParams(max_tokens=7)\n"
                )
                self.count += 1
            self.handle.flush()

    def reopen(self) -> None:
        with self.lock:
            self.handle.close()
            self.handle = self.path.open("a", encoding="utf-8")

    def close(self) -> None:
        self.handle.close()


def test_lines_survive_rename_and_copytruncate_rotation_exactly_once(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    engine = Engine(log)
    config = build_config(
        out=str(tmp_path / "capture"), logs=[str(log)], log_interval="20ms", flush_interval="50ms"
    )
    agent = Agent(config)
    agent.start()
    try:
        engine.write(50)
        time.sleep(0.2)
        # rename-and-create; the engine writes to the old file until it reopens
        log.rename(tmp_path / "vllm.log.1")
        engine.write(20)
        time.sleep(0.1)
        engine.reopen()
        engine.write(30)
        time.sleep(0.2)
        # copytruncate after the agent has read everything
        shutil.copyfile(log, tmp_path / "vllm.log.2")
        with log.open("r+") as f:
            f.truncate(0)
        engine.write(40)
        time.sleep(0.3)
    finally:
        agent.stop()
        engine.close()
    capture = read_capture(tmp_path / "capture")
    lines = capture.logs[str(log)].text
    ids = [int(line.split("Received request r-")[1].split(":")[0]) for line in lines]
    assert ids == list(range(140))
    assert not any("secret" in line for line in lines)
    # the path was missing between the rename and the engine's reopen, then a new file appeared
    assert [r.how for r in capture.rotations] == ["vanished", "rename", "truncate"]
