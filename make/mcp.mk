# `make mcp`, included by the Makefile: the real MCP servers tests/cli/test_run_mcp.py and bench/bench_mcp.py start over
# stdio, installed as their users install them (uvx, pipx): each in a virtualenv of its own under .venv-mcp/, apart
# from .venv. mcp-server-time needs mcp>=2.3, and .venv pins mcp 2.0.0 (the client rfteval drives them with, from
# make/trainers.mk); mcp-server-sqlite asks for mcp>=1.6 but is written against 1.x's server API (with 2.x it fails
# at start: 'Server' object has no attribute 'list_resources'), so its venv pins the last 1.x, as its users must.
# The stamp is keyed on these lines; a failed install prints one line and those tests skip saying why (with CI set,
# the build fails: the Makefile's INSTALL_FAILED).
MCP_VENV := .venv-mcp
MCP_TIME := mcp-server-time==2026.10.19
MCP_SQLITE := mcp-server-sqlite==2025.4.25 'mcp[cli]==1.30.0'
MCP_STAMP := $(MCP_VENV)/.installed-$(shell echo "$(MCP_TIME) $(MCP_SQLITE)" | cksum | cut -d' ' -f1)

mcp: $(MCP_STAMP)

$(MCP_STAMP):
	@rm -rf $(MCP_VENV) && mkdir -p $(MCP_VENV)
	@{ $(PYTHON) -m venv $(MCP_VENV)/time && $(MCP_VENV)/time/bin/python -m pip install -q $(MCP_TIME) \
	  && $(PYTHON) -m venv $(MCP_VENV)/sqlite && $(MCP_VENV)/sqlite/bin/python -m pip install -q $(MCP_SQLITE) \
	  && touch $@; } >$(MCP_VENV)/install.log 2>&1 \
	  || { echo "make: could not install $(MCP_TIME) and $(MCP_SQLITE) under $(MCP_VENV) (log: $(MCP_VENV)/install.log); the MCP server tests will be skipped"; \
	       $(INSTALL_FAILED); }
