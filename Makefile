# Every target sets itself up: a fresh clone needs only Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup test test-fast lint demo bench browser sandbox ray clean

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

# The Ray Data tests (tests/test_ray_llm.py) need the `ray` extra: large, so not in setup. Install it when
# missing; when it cannot be installed, those tests say so and skip.
ray: $(STAMP)
	@$(BIN)/python -c "import ray.data" >/dev/null 2>&1 || $(BIN)/python -m pip install -q -e '.[ray]' >/dev/null 2>&1 \
	  || echo "make: could not install ray[data]; the Ray Data tests will be skipped"

# What CI runs before the tests: ruff (pyproject's rules) and mypy, both clean.
lint: $(STAMP)
	$(BIN)/python -m ruff check rfteval tests bench scripts
	$(BIN)/python -m mypy rfteval

# pytest caches its rewritten test modules as bytecode; an environment that forbids bytecode makes every run
# rewrite them all again, so the tests allow it (the cache lives in tests/__pycache__, ignored by git).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

# The quick loop while editing: everything but the tests marked slow (what slow means: tests/README.md).
test-fast: $(STAMP) sandbox
	$(PYTEST) -q -m "not slow"

test: $(STAMP) browser sandbox ray
	$(PYTEST) -q

demo: $(STAMP) sandbox
	@bash scripts/demo.sh $(BIN)

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis runs
