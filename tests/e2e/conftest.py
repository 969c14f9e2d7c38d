"""Fixtures for end-to-end tests: the real llama.cpp engine with the real default model (Gemma 3 270M)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, Host, HostConfig
from llmhost.config import ModelConfig
from llmhost.engine.local.models import default_model_path
from probe_driver import ProbeOutcome, run_probe

MODEL = "gemma-3-270m"
SMALL = "gemma-small-context"  # the same weights with a 64-token window, to fill the context quickly
SMALL_CONTEXT = 64
CACHED = "gemma-prefix-cache"  # the same weights with the prompt-prefix cache on
MINILM = "all-minilm-l6-v2"  # the built-in embedding model (BERT encoder, 384 dimensions)
SMOL = "smollm2-135m"  # the second built-in model (49k vocabulary, ChatML template in its GGUF)
MODELS = (MODEL, SMOL)  # suites that test model behaviour run on both
# Each built-in model's end-of-generation tokens (vocabulary facts): a request that forbids them (logit bias -100)
# runs to its token budget.
END_TOKENS = {MODEL: (1, 106, 212), SMOL: (0, 2, 4)}


@pytest.fixture(scope="session")
def real_config(llmhost_cache_dir: Path) -> HostConfig:
    weights = default_model_path(llmhost_cache_dir)
    # Reusing a cached prompt prefix changes how the rest of a prompt is batched, and so (at near-ties) greedy
    # output: tests that compare outputs across calls run without it; the prefix cache has its own model here.
    return HostConfig(
        models={
            MODEL: ModelConfig(prefix_cache=False),
            SMALL: ModelConfig(path=weights, context_length=SMALL_CONTEXT, prefix_cache=False),
            CACHED: ModelConfig(path=weights),
            SMOL: ModelConfig(prefix_cache=False),
            MINILM: ModelConfig(),  # the built-in embedding model (loaded only by the tests that embed with it)
        },
        cache_dir=llmhost_cache_dir,
    )


@pytest.fixture(scope="session")
def real_host(real_config: HostConfig, compile_notes: list[str]) -> Iterator[Host]:
    with Host(real_config) as host:
        yield host


@pytest.fixture(scope="session")
def real_probe_app(real_host: Host, probe_wasm: Path) -> App:
    return real_host.load(probe_wasm)


@pytest.fixture
def real_probe(real_probe_app: App) -> Callable[..., ProbeOutcome]:
    """`real_probe(*args)`: run the probe guest against the real engine."""
    return lambda *args: run_probe(real_probe_app, *args)


@pytest.fixture(scope="session")
def real_probe_0_1_0_app(real_host: Host, probe_0_1_0_wasm: Path) -> App:
    return real_host.load(probe_0_1_0_wasm)


@pytest.fixture
def real_probe_0_1_0(real_probe_0_1_0_app: App) -> Callable[..., ProbeOutcome]:
    """The probe guest as built against llmhost:llm@0.1.0, against the real engine."""
    return lambda *args: run_probe(real_probe_0_1_0_app, *args)


Probe = Callable[..., Any]


@pytest.fixture(scope="session")
def sdk_app(real_host: Host, guest_wasm: dict[str, Path]) -> App:
    """tests/guests/sdk_probe: the guest SDK's calls in a guest (test_sdk_guest.py, test_guest_sampling.py)."""
    return real_host.load(guest_wasm["sdk_probe"])


@pytest.fixture
def sdk(sdk_app: App) -> Probe:
    """`sdk(op, *args)`: run one sdk_probe operation, which must succeed; its value."""

    def call(*args: str) -> Any:
        outcome: ProbeOutcome = run_probe(sdk_app, *args)
        assert outcome.exit_code == 0, (outcome.error, outcome.stderr)
        return outcome.value

    return call
