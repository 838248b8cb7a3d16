"""The MCP servers the MCP tests start, found one way: the real ones from PyPI that `make mcp` installs, each in a
venv of its own under .venv-mcp/ (as uvx or pipx would), and the fault server the tests write with the SDK's own
server class (tests/support/mcp_fault_server.py), run by this interpreter. What is missing skips naming the make
target (with CI set, fails: tests/support/optional.py); so does a host without the sandbox the servers run in."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.optional import missing, require, sandbox_refused

ROOT = Path(__file__).resolve().parents[2]
MCP_VENV = ROOT / ".venv-mcp"
FAULT_SERVER = Path(__file__).with_name("mcp_fault_server.py")


def need_client() -> None:
    """The official MCP SDK, the client rfteval drives servers with (`make trainers` installs it: mcp 2.0.0)."""
    require("mcp.client.stdio", "trainers", "mcp")


def need_sandbox() -> None:
    import shutil

    from rfteval.sandbox import host

    refused = host().refused
    if refused is not None:
        sandbox_refused(refused, shutil.which("bwrap") is not None)


def real_server(name: str) -> Path:
    """`mcp-server-NAME` (time, sqlite) as `make mcp` installed it: .venv-mcp/NAME/bin/mcp-server-NAME."""
    path = MCP_VENV / name / "bin" / f"mcp-server-{name}"
    if not path.is_file():
        missing(f"mcp-server-{name} is not installed in {MCP_VENV / name}", "mcp")
    return path


def fault_server() -> list[str]:
    """The fault server's command: this interpreter (its venv holds the SDK) and the script."""
    return [sys.executable, str(FAULT_SERVER)]
