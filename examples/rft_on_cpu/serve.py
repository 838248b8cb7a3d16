"""`transformers serve` (transformers' own OpenAI-compatible server) on 127.0.0.1, serving Hugging Face checkpoints:
the base and the trained checkpoints of the example, and SmolLM2 converted from its GGUF for the `real_server` tests
(tests/cli/test_real_server_transformers.py). `ServerProcess` is what it shares with llama.cpp's server of those tests
(tests/support/real_server.py): a subprocess in its own process group, its log, waiting until it answers, stopping it.

Two ways to serve. Pinned (`TransformersServer(checkpoint)`, the server's FORCE_MODEL argument): it lists that
directory's path as its one model in GET /v1/models and answers only requests that name it. Unpinned
(`TransformersServer()` then `load(checkpoint)` for each): it loads checkpoints by path, each in a process of its own,
and lists those loaded; the example serves the base and every checkpoint of a training run from one server this way,
so that one `rfteval run` evaluates them all. Nothing is downloaded (HF_HUB_OFFLINE=1).

Why this server: it is what a Hugging Face checkpoint is served with when nothing else is installed, and it follows
the checkpoint's generation config over the request: with a greedy config it answers every request greedily, whatever
`temperature` and `seed` it is sent (checkpoint.sample_by_default is the fix).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Self

INSTALL_HINT = "make trainers installs transformers[serving] and gguf (it prints why it could not)"
# how long a loaded checkpoint stays in memory unused (the server's default unloads it after 5 minutes)
KEEP_LOADED_S = 24 * 3600
# continuous batching's KV cache, in pages of PAGE tokens: sized for a few short chats at once. Left to the server,
# the cache is sized from the machine's free memory, per checkpoint: two loaded at once were killed for want of it.
PAGES, PAGE = 128, 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """An OpenAI-compatible server in a subprocess on 127.0.0.1: `start()` returns once `ready()`; `kill()` is SIGKILL
    (a crash, not a shutdown) and `start()` again brings it back on the same port, so a run pointed at `base_url` can
    be resumed against it. Subclasses say how it is started (`command`, `env`) and when it is ready."""

    name = "server"
    stop_timeout_s = 10.0

    def __init__(self, port: int | None, workdir: Path | None, log_name: str) -> None:
        self.port = port or free_port()
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="rfteval-server-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / log_name
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        """The environment without OPENAI_* variables: a key meant for the client never reaches the server."""
        return {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}

    def ready(self) -> bool:
        return self.models() is not None

    def start(self, timeout_s: float = 120.0) -> Self:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                         start_new_session=True, cwd=self.workdir)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            if self.ready():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s: {self.log_tail()}")

    def models(self) -> list[str] | None:
        """The ids GET /v1/models lists, or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as resp:
                return [m["id"] for m in json.load(resp)["data"]]
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            return None

    def kill(self) -> None:
        """SIGKILL the server's process group: in-flight requests see a reset connection, new ones a refused one."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM to the server's process group (its workers too), SIGKILL after `stop_timeout_s`."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def log_tail(self, n: int = 5) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-n:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def unavailable() -> str | None:
    """One line saying why this server cannot run here, or None when it can."""
    from examples.rft_on_cpu.checkpoint import unavailable as no_checkpoint

    missing = [name for name in ("transformers", "fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        return f"transformers serve: {', '.join(missing)} not installed; {INSTALL_HINT}"
    return no_checkpoint()


class TransformersServer(ServerProcess):
    """`transformers serve` in a subprocess on 127.0.0.1, pinned to `checkpoint` (its path is then `model`, the name
    requests must give) or, without one, serving whatever `load()` loads. `batching` turns on continuous batching, which
    answers concurrent requests together: several times the throughput of one at a time on a small CPU."""

    name = "transformers serve"
    stop_timeout_s = 20.0

    def __init__(self, checkpoint: Path | None = None, port: int | None = None, workdir: Path | None = None,
                 threads: int = 1, batching: bool = False) -> None:
        super().__init__(port, workdir or Path(tempfile.mkdtemp(prefix="rfteval-transformers-")),
                         "transformers-serve.log")
        self.checkpoint = checkpoint
        # one torch thread: on a small machine shared with other processes, torch's thread pool waiting on busy
        # cores made generation several times slower than one thread
        self.threads = threads
        self.batching = batching

    @property
    def model(self) -> str:
        if self.checkpoint is None:
            raise ValueError("an unpinned server has no one model: requests name a checkpoint load() loaded")
        return str(self.checkpoint)

    def command(self) -> list[str]:
        cmd = [sys.executable, "-c", "import sys; from transformers.cli.transformers import main; sys.exit(main())",
               "serve", "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu"]
        if self.batching:
            cmd += ["--continuous-batching", "--cb-num-blocks", str(PAGES), "--cb-block-size", str(PAGE)]
        if self.checkpoint is None:
            return cmd + ["--model-timeout", str(KEEP_LOADED_S)]
        return cmd + [str(self.checkpoint)]

    def env(self) -> dict[str, str]:
        return {**super().env(), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "OMP_NUM_THREADS": str(self.threads), "TOKENIZERS_PARALLELISM": "false"}

    def ready(self) -> bool:
        listed = self.models()
        return listed is not None and (self.checkpoint is None or self.model in listed)

    def start(self, timeout_s: float = 300.0) -> Self:
        return super().start(timeout_s)

    def load(self, checkpoint: Path, timeout_s: float = 600.0) -> str:
        """Load `checkpoint` into an unpinned server (POST /load_model, whose events stream until the model is ready)
        and return the name requests give it: its path, which GET /v1/models lists from then on."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/load_model",
                                     data=json.dumps({"model": str(checkpoint)}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            for raw in resp:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                event = json.loads(line.removeprefix("data:"))
                if event.get("status") == "ready":
                    return str(checkpoint)
                if event.get("status") == "error":
                    raise RuntimeError(f"{self.name} could not load {checkpoint}: {event.get('message')}")
        raise RuntimeError(f"{self.name}: loading {checkpoint} ended without the model ready: {self.log_tail()}")
