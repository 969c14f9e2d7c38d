"""Backend sampling (`backend-sampling = true`, engine/local/backend_greedy.py): plain greedy tokens chosen in
llama.cpp's compute graph, on the real models. It is off by default, on a GPU too (issue 51: an H100 measured it
no faster); here it is forced on the CPU, where the graph computes the same logits, so every token and
log-probability must equal the host path's, alone and batched with rows that need their logits (log-probabilities,
seeded draws), on sequences a greedy generation held before. Deterministic mode on both hosts: a row's logits do
not depend on its batch. And a GPU model config that leaves the key unset attaches no chain."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import llama_cpp
import pytest

from llmhost import Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig

from .conftest import MODELS

pytestmark = pytest.mark.model

PROMPTS = (
    "The capital of France is",
    "Write a list of three fruits:\n1.",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
)
GREEDY = InferencingParams(max_tokens=24, temperature=0.0, repeat_penalty=1.0)
LOGPROBS = GREEDY.model_copy(update={"logprobs": 3})
SEEDED = InferencingParams(max_tokens=24, temperature=0.9, top_k=40, seed=7)


def config(base: HostConfig, backend: bool) -> HostConfig:
    models = {m: ModelConfig(slots=4, context_length=512, deterministic=True, backend_sampling=backend) for m in MODELS}
    return base.model_copy(update={"models": models})


@pytest.fixture(scope="module")
def hosts(real_config: HostConfig) -> Iterator[dict[str, Host]]:
    with Host(config(real_config, True)) as backend, Host(config(real_config, False)) as host:
        yield {"backend": backend, "host": host}


@pytest.fixture
def sampled_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the tokens read from the graph's sampler (every decoder calls llama.cpp through this module)."""
    calls: list[int] = []
    original = llama_cpp.llama_get_sampled_token_ith

    def counted(ctx: Any, i: int) -> int:
        token = int(original(ctx, i))
        calls.append(token)
        return token

    monkeypatch.setattr(llama_cpp, "llama_get_sampled_token_ith", counted)
    return calls


def run(host: Host, model: str, prompt: str, params: InferencingParams) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    ids: list[int] = []
    logprobs: list[Any] = []
    for event in host.infer_stream(model, prompt, params):
        ids += getattr(event, "token_ids", ())
        logprobs += getattr(event, "logprobs", ())
    return tuple(ids), tuple(logprobs)


@pytest.mark.parametrize("model", MODELS)
def test_greedy_tokens_from_the_graph_equal_the_hosts_argmax(
    hosts: dict[str, Host], model: str, sampled_calls: list[int]
) -> None:
    for prompt in PROMPTS:
        before = len(sampled_calls)
        expected = run(hosts["host"], model, prompt, GREEDY)
        assert len(sampled_calls) == before  # the host path reads logits only
        assert run(hosts["backend"], model, prompt, GREEDY) == expected
        assert len(expected[0]) >= 10
        # Every token came from the graph (a lone stream's, from its first on), none was "not sampled" (-1).
        assert len(sampled_calls) - before >= len(expected[0])
    assert -1 not in sampled_calls
    chains = hosts["backend"].engine.model(model).decoder.greedy_chains  # type: ignore[attr-defined]
    assert chains is not None and chains.bound and not chains.refused


@pytest.mark.parametrize("model", MODELS)
def test_rows_that_read_logits_share_steps_and_sequences_with_graph_sampled_ones(
    hosts: dict[str, Host], model: str, sampled_calls: list[int]
) -> None:
    """Four streams at once: two greedy (chosen in the graph), one greedy with log-probabilities and one seeded
    draw (both read their logits rows, so llama.cpp must still copy them). Then the same four again, each on a
    sequence slot another kind of stream just held (samplers detached and attached between them)."""
    jobs = [(PROMPTS[0], GREEDY), (PROMPTS[1], LOGPROBS), (PROMPTS[2], SEEDED), (PROMPTS[3], GREEDY)]
    expected = [run(hosts["host"], model, prompt, params) for prompt, params in jobs]
    for order in (jobs, jobs[::-1]):
        results: dict[int, tuple[tuple[int, ...], tuple[Any, ...]]] = {}

        def go(out: dict[int, Any], i: int, prompt: str, params: InferencingParams) -> None:
            out[i] = run(hosts["backend"], model, prompt, params)

        threads = [threading.Thread(target=go, args=(results, jobs.index(job), *job)) for job in order]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [results[i] for i in range(len(jobs))] == expected
    assert sampled_calls and expected[1][1]  # the graph chose tokens; the log-probabilities were there


@pytest.mark.parametrize("model", MODELS)
def test_an_offloaded_model_without_the_key_decodes_without_a_sampler_chain(
    real_config: HostConfig,
    hosts: dict[str, Host],
    model: str,
    sampled_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`n-gpu-layers = -1` and no `backend-sampling`, on a build that reports GPU offload (this CPU build says no,
    so llama.cpp's answer is replaced; it ignores the offload): no chain is attached and no token is read from the
    graph, the greedy tokens are the host's argmax, as on the CPU."""
    asked: list[bool] = []
    attached: list[int] = []

    def supports_gpu_offload() -> bool:
        asked.append(True)
        return True

    def set_sampler(ctx: Any, seq: int, sampler: Any) -> bool:
        attached.append(seq)
        return False

    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", supports_gpu_offload)
    monkeypatch.setattr(llama_cpp, "llama_set_sampler", set_sampler)
    gpu = ModelConfig(n_gpu_layers=-1, slots=4, context_length=512, deterministic=True)
    assert gpu.backend_sampling is None
    with Host(real_config.model_copy(update={"models": {model: gpu}})) as host:
        found = [run(host, model, prompt, GREEDY) for prompt in PROMPTS[:2]]
        assert asked  # the decoder saw an offloaded model on a GPU build
        assert host.engine.model(model).decoder.greedy_chains is None  # type: ignore[attr-defined]
    assert attached == [] and sampled_calls == []
    assert found == [run(hosts["host"], model, prompt, GREEDY) for prompt in PROMPTS[:2]]
