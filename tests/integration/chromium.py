"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
the standard library only, no driver binary, no WebSocket client.

Chromium reads NUL-terminated JSON messages on fd 3 and writes its answers and events on fd 4.
Every message is kept, so a test can assert on console errors, exceptions and network requests
after the fact.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.waiting import HANG_S

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class ChromiumError(RuntimeError):
    pass


class Chromium:
    """One browser process with a fresh profile; use as a context manager."""

    def __init__(self, executable: str, *, timeout_s: float = HANG_S) -> None:
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="oomtrace-chromium-")
        # a file, not a pipe: Chromium's chatter must never fill a pipe and stall the browser
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # in the child, before exec: its fd 3 reads, fd 4 writes
            high_r, high_w = os.dup(to_child_r) + 100, os.dup(from_child_w) + 100
            os.dup2(to_child_r, high_r)
            os.dup2(from_child_w, high_w)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            close_fds=False,
            preexec_fn=wire_fds,  # noqa: PLW1509 - only dup2 calls, before exec
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._answers: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stderr_tail = ""
        self._open_fds = [self._to_child, self._from_child]

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                with self._lock:
                    if "id" in message and message["id"] in self._answers:
                        self._answers[message["id"]].put(message)
                    else:
                        self.events.append(message)

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            answer: queue.Queue[dict[str, Any]] = queue.Queue()
            self._answers[ident] = answer
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        try:
            reply = answer.get(timeout=self.timeout_s)
        except queue.Empty as err:
            raise ChromiumError(f"{method}: no answer within {self.timeout_s} s") from err
        if "error" in reply:
            raise ChromiumError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def wait_for_event(
        self, method: str, session: str, timeout_s: float = HANG_S
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                for event in self.events:
                    if event.get("method") == method and event.get("sessionId") == session:
                        return event
            time.sleep(0.05)
        raise ChromiumError(f"no {method} within {timeout_s} s")

    def open_page(self, width: int = 1200, height: int = 900) -> str:
        """A new tab, attached; returns its session id. Network is emulated offline."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.send(f"{domain}.enable", {}, session)
        self.send(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
            session,
        )
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        return session

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session,
        )
        if "exceptionDetails" in result:
            raise ChromiumError(f"evaluate failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_until(self, session: str, expression: str, timeout_s: float = HANG_S) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(session, expression)
            if value:
                return value
            time.sleep(0.1)
        raise ChromiumError(f"still false after {timeout_s} s: {expression}")

    def screenshot(self, session: str, path: Path) -> None:
        """The whole page, as a PNG."""
        metrics = self.send("Page.getLayoutMetrics", {}, session)
        size = metrics["cssContentSize"]
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {
                "width": int(size["width"]),
                "height": int(size["height"]),
                "deviceScaleFactor": 1,
                "mobile": False,
            },
            session,
        )
        shot = self.send(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def session_events(self, session: str, *methods: str) -> list[dict[str, Any]]:
        with self._lock:
            return [
                e
                for e in self.events
                if e.get("sessionId") == session and e.get("method") in methods
            ]

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                os.write(
                    self._to_child,
                    json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0",
                )
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
        finally:
            self._log.seek(0)
            self.stderr_tail = self._log.read().decode(errors="replace")[-4000:]
            self._log.close()
            self._reader.join(timeout=5)  # the browser has exited: its pipe is at EOF
            while self._open_fds:
                os.close(self._open_fds.pop())
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
