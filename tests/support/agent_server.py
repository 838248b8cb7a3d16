"""llama.cpp's server (tests/support/real_server.py) set up for an agent's turns: SmolLM2-135M under one name
(`smol-agent`) in llama-cpp-python's `hf-tokenizer-config` chat format, with a tool-aware chat template this
project owns (tests/fixtures/chat_templates/smollm2_tools.jinja).

Why this format: in llama-cpp-python 0.3.36 it is the one that both turns a forced `tool_choice` into a proper
`tool_calls` answer (the request's tool schema as a grammar, `finish_reason: "tool_calls"`) and renders a history
holding tool calls and `tool` messages through a Jinja template of our own. Its `chatml-function-calling` format
never shows the model a `tool` message, and `chatml` (SmolLM2's own template) has no place for tools at all. With
`tool_choice` "auto" the format parses no tool call out of the text, so after the forced first turn every answer
is text: a rollout here is two model turns and one tool turn.

One name only: the server holds one model at a time and reloads it whenever a request names another, so two labels
are told apart by their system prompts (a spec's [models.LABEL] system_prompt), not by two names of one model.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import FIXTURES
from tests.support.real_server import RealServer, gguf_path, unavailable

AGENT_ALIAS = "smol-agent"
TEMPLATE = FIXTURES / "chat_templates" / "smollm2_tools.jinja"
# SmolLM2-135M-Instruct's tokenizer_config.json tokens: ChatML's markers, which the format also stops at
BOS, EOS = "<|im_start|>", "<|im_end|>"


def tokenizer_config(path: Path) -> Path:
    """The tokenizer_config.json the server's `hf_tokenizer_config_path` names: the template and its two tokens."""
    path.write_text(json.dumps({"chat_template": TEMPLATE.read_text(), "bos_token": BOS, "eos_token": EOS}))
    return path


class AgentServer(RealServer):
    """RealServer with one model, `smol-agent`, in the hf-tokenizer-config format with the tool-aware template (its
    config file rewritten before it starts; everything else, kill and restart on the same port included, as is)."""

    def __init__(self, workdir: Path, n_ctx: int = 2048, n_threads: int = 2) -> None:
        super().__init__(n_ctx=n_ctx, n_threads=n_threads, workdir=workdir)
        model = gguf_path()
        if model is None:
            raise RuntimeError(unavailable() or "no GGUF")
        config = tokenizer_config(self.workdir / "tokenizer_config.json")
        self.config.write_text(json.dumps({"host": "127.0.0.1", "port": self.port, "models": [
            {"model": str(model), "model_alias": AGENT_ALIAS, "n_ctx": n_ctx, "n_threads": n_threads,
             "n_threads_batch": n_threads, "chat_format": "hf-tokenizer-config",
             "hf_tokenizer_config_path": str(config), "verbose": False}]}))
