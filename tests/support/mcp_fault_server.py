"""An MCP server for the fault tests, written with the SDK's own server class (MCPServer, FastMCP's successor), run
over stdio as `python tests/support/mcp_fault_server.py` (tests/tools/test_mcp.py, tests/cli/test_run_mcp.py).

Its tools: `echo` (the text back), `count` (a counter kept in the process: a second call in the same process says 2,
so whether two rollouts share a process shows), `fail` (raises: the SDK answers a result with isError), `nap`
(sleeps, past --tool-timeout), `die` (the process exits mid-call, as a crashed server does, while MCP_FAULTS_DIE is
unset or 1), `fetch` (opens a URL: refused in the sandbox's network namespace unless the spec gives the server the
network), `hog` (holds N MB: past --tool-memory, a MemoryError). It imports only the SDK and the standard library:
inside the sandbox it sees nothing of the checkout but this file. """

from __future__ import annotations

import os
import urllib.request

import anyio
from mcp.server import MCPServer

server = MCPServer("rfteval-faults")
_calls = {"count": 0}


@server.tool()
def echo(text: str) -> str:
    """The text back."""
    return text


@server.tool()
def count() -> int:
    """How many times this process was asked (1 in a fresh process)."""
    _calls["count"] += 1
    return _calls["count"]


@server.tool()
def fail(reason: str) -> str:
    """Raises with the reason."""
    raise ValueError(reason)


@server.tool()
async def nap(seconds: float) -> str:
    """Sleeps, then says so."""
    await anyio.sleep(seconds)
    return "woke"


@server.tool()
def die() -> str:
    """Exits the process mid-call (unless MCP_FAULTS_DIE is set to something other than 1: then says "alive")."""
    if os.environ.get("MCP_FAULTS_DIE", "1") == "1":
        os._exit(3)
    return "alive"


@server.tool()
def fetch(url: str) -> str:
    """GETs the URL and returns its body."""
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - the test's own loopback server
        return answer.read().decode()


@server.tool()
def hog(mb: int) -> str:
    """Holds `mb` megabytes for a moment, then says so (past the address-space limit: MemoryError)."""
    held = bytearray(mb << 20)
    return f"held {len(held) >> 20} MB"


if __name__ == "__main__":
    server.run()
