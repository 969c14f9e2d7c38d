"""The host sampler (engine/local/host_sampler.py) against llama.cpp's own sampler chain, on the real models.

Both paths run on the same machine, in the same engine, one stream at a time (the same batches, so the same
logits): greedy tokens must be identical, with logit bias and penalties too. Seeded draws are the host sampler's
own; the same seed must give the same tokens run to run, and under concurrency where a row's logits do not
depend on its batch (deterministic mode).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from llmhost import Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig
from llmhost.domain.types import LogitBias
from llmhost.engine.local import host_sampler

from .conftest import MODELS

PROMPTS = (
    "The capital of France is",
    "Write a list of three fruits:\n1.",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
)


def llama_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_sampler, "eligible", lambda params, n_vocab: False)


GREEDY_VARIANTS = {
    "plain": InferencingParams(max_tokens=40, temperature=0.0, repeat_penalty=1.0),
    "penalties": InferencingParams(
        max_tokens=40,
        temperature=0.0,
        repeat_penalty=1.3,
        repeat_penalty_last_n_token_count=16,
        frequency_penalty=0.4,
        presence_penalty=0.2,
    ),
}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("variant", sorted(GREEDY_VARIANTS))
def test_greedy_tokens_equal_llama_cpps_sampler(
    real_host: Host, model: str, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = GREEDY_VARIANTS[variant]
    assert host_sampler.eligible(params, real_host.model_info(model).vocab_size)
    runs = {}
    for path in ("host", "llama.cpp"):
        if path == "llama.cpp":
            llama_chain(monkeypatch)
        runs[path] = [generated(real_host, model, p, params) for p in PROMPTS]
    assert runs["host"] == runs["llama.cpp"]
    assert all(len(ids) >= 10 for ids in runs["host"]), runs["host"]


@pytest.mark.parametrize("model", MODELS)
def test_logit_bias_is_applied_as_llama_cpp_applies_it(
    real_host: Host, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = InferencingParams(max_tokens=12, temperature=0.0, repeat_penalty=1.0)
    first = generated(real_host, model, PROMPTS[0], plain)[0]
    # Forbid the greedy first token, favour another one a little: both paths must pick the same replacement.
    biased = plain.model_copy(
        update={"logit_bias": (LogitBias(token_id=first, bias=-100.0), LogitBias(token_id=first + 1, bias=0.5))}
    )
    host_ids = generated(real_host, model, PROMPTS[0], biased)
    llama_chain(monkeypatch)
    assert generated(real_host, model, PROMPTS[0], biased) == host_ids
    assert host_ids[0] != first


def generated(host: Host, model: str, prompt: str, params: InferencingParams) -> tuple[int, ...]:
    ids: list[int] = []
    for event in host.infer_stream(model, prompt, params):
        ids += getattr(event, "token_ids", ())
    return tuple(ids)


@pytest.fixture(scope="module")
def deterministic_host(real_config: HostConfig) -> Iterator[Host]:
    """Both models in deterministic mode: a row's logits do not depend on what it is batched with (in the default
    mode they may, at near-ties, and so may a seeded draw: README, "Continuous batching")."""
    models = {m: ModelConfig(slots=4, context_length=512, deterministic=True) for m in MODELS}
    with Host(real_config.model_copy(update={"models": models})) as host:
        yield host


@pytest.mark.parametrize("model", MODELS)
def test_a_seed_gives_the_same_tokens_run_to_run_and_under_concurrency(
    real_host: Host, deterministic_host: Host, model: str
) -> None:
    # Gemma's draws are the host sampler's; SmolLM2's, from a small vocabulary, llama.cpp's chain's
    # (host_sampler.HOST_DRAW_MIN_VOCAB): a seed must repeat either way.
    params = InferencingParams(max_tokens=32, temperature=0.9, top_k=40, top_p=0.95, seed=1234)
    vocab = real_host.model_info(model).vocab_size
    assert host_sampler.eligible(params, vocab) == (vocab >= host_sampler.HOST_DRAW_MIN_VOCAB)
    alone = generated(real_host, model, PROMPTS[3], params)
    assert generated(real_host, model, PROMPTS[3], params) == alone
    other = generated(real_host, model, PROMPTS[3], params.model_copy(update={"seed": 99}))
    assert other != alone  # the seed matters (32 tokens at temperature 0.9: a collision is negligible)
    alone = generated(deterministic_host, model, PROMPTS[3], params)
    together: dict[int, tuple[int, ...]] = {}

    def run(i: int) -> None:
        prompt = PROMPTS[3] if i % 2 == 0 else PROMPTS[i % len(PROMPTS)]
        together[i] = generated(deterministic_host, model, prompt, params)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together[0] == alone and together[2] == alone
