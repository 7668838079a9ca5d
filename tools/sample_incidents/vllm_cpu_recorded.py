"""``vllm-cpu-preemptions``: an incident recorded from a real vLLM 0.32.0 server, not generated.

The other samples are written by the replay simulator, byte for byte the same on every run; this
one is what a real engine did, recorded once with this script and committed as it came out:
``oomtrace collect`` (``/metrics`` every 100 ms, the server's log) and the vLLM plugin inside the
server, writing into one capture directory. The server is the CPU build with a tiny Llama of
random weights (no download), a 40-block pool, request logging off (vLLM's default): four long
completions (1,500 prompt tokens, 600 generated) among twenty short ones (100 and 64) sent at
once run the pool dry. Its README and ``expected.toml`` were worked out from the capture.

    python -m tools.sample_incidents.vllm_cpu_recorded [--out DIR]   # needs .ci/vllm-env
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from tools.vllm_server import VllmServer, free_port, send_load, server_environment, vllm_environment

NAME: Final = "vllm-cpu-preemptions"
NODE: Final = "cpu-node-1"
MODEL_DIR: Final = Path("/srv/models/tiny-llama")  # the path its log and metrics name


def record(directory: Path) -> None:
    """Run the server and the load; the capture lands in ``directory / "capture"``."""
    with tempfile.TemporaryDirectory() as tmp:
        python = server_environment(vllm_environment(), Path(tmp, "server-env"))
        capture, log = Path(tmp, "capture"), Path(tmp, "vllm.log")
        log.touch()
        server = VllmServer(
            python, MODEL_DIR, log, capture, free_port(), log_requests=False,
            extra_env={"OOMTRACE_NODE": NODE},
        )  # fmt: skip
        agent = subprocess.Popen(
            [sys.executable, "-m", "oomtrace", "collect", "--out", str(capture), "--node", NODE,
             "--prometheus", f"{server.base_url}/metrics", "--log", str(log)],
        )  # fmt: skip
        try:
            server.start()
            sent = send_load(server, longs=4, shorts=20, long_shape=(1500, 600))
            time.sleep(1.0)  # the plugin writes every 100 ms; vLLM SIGKILLs its engine core
        finally:
            server.stop()
            time.sleep(1.0)
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=60)
        for item in sent:
            print(f"{item.client_id}-0 prompt {item.prompt_tokens} max {item.max_tokens}")
        target = directory / "capture"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(capture, target)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.sample_incidents.vllm_cpu_recorded")
    parser.add_argument("--out", type=Path, default=Path("sample_logs") / NAME)
    record(parser.parse_args().out)


if __name__ == "__main__":
    main()
