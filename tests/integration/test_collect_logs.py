"""The agent following a log that an engine really appends to while logrotate rotates it, both
ways; every line is captured once, in order, with prompts removed."""

from __future__ import annotations

import gc
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from collectors.agent import Agent
from collectors.config import build_config
from collectors.reader import CaptureReadResult
from collectors.segments import read_capture
from tests.unit.collectors.factories import wait_for_capture


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
    out = tmp_path / "capture"

    def read(lines: int, *rotations: str) -> Callable[[CaptureReadResult], bool]:
        """On disk: this many lines, and these rotations noticed."""

        def seen(capture: CaptureReadResult) -> bool:
            followed = capture.logs.get(str(log))
            return (
                followed is not None
                and len(followed.text) == lines
                and [r.how for r in capture.rotations] == list(rotations)
            )

        return seen

    agent = Agent(config)
    agent.start()
    try:
        engine.write(50)
        wait_for_capture(out, read(50))
        # rename-and-create; the engine writes to the old file until it reopens
        log.rename(tmp_path / "vllm.log.1")
        engine.write(20)
        wait_for_capture(out, read(70, "vanished"))
        engine.reopen()
        engine.write(30)
        wait_for_capture(out, read(100, "vanished", "rename"))
        # copytruncate after the agent has read everything
        shutil.copyfile(log, tmp_path / "vllm.log.2")
        with log.open("r+") as f:
            f.truncate(0)
        engine.write(40)
        wait_for_capture(out, read(140, "vanished", "rename", "truncate"))
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


def test_the_agent_hands_the_gil_over_within_a_millisecond_and_restores_it(tmp_path: Path) -> None:
    # GIVEN an agent following a log, in a process at Python's default settings
    log = tmp_path / "vllm.log"
    log.write_text("INFO 01-01 00:00:00 [api_server.py:1] started\n")
    config = build_config(out=str(tmp_path / "capture"), logs=[str(log)])
    before = sys.getswitchinterval()
    agent = Agent(config)
    # WHEN it runs THEN a woken sampler waits at most 1 ms for the interpreter lock, and what
    # start-up made is out of the collector's way
    agent.start()
    try:
        assert sys.getswitchinterval() == 0.001
        assert gc.get_freeze_count() > 0
    finally:
        agent.stop()
    # AND once it stops the process is as it was
    assert sys.getswitchinterval() == before
    assert gc.get_freeze_count() == 0
