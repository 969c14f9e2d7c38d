"""Continuous batching end to end: concurrent guests share one model and decode together in each step (on both
built-in models).

Greedy outputs under batching equal the same requests run alone, except at near-ties: llama.cpp's CPU kernels
compute a row's logits slightly differently depending on the shape of the batch it is in and on where its KV
cells lie (README, "Continuous batching", says exactly when), so where the top two candidates are within that
noise two runs may part. The tests check exactly that: equal, or parted at a near-tie (tests/e2e/greedy.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from llmhost import App, Host
from probe_driver import ProbeOutcome, run_probe

from .conftest import CACHED, MODELS
from .greedy import assert_same_or_split_at_near_tie

pytestmark = [pytest.mark.model, pytest.mark.wasm]
Probe = Callable[..., ProbeOutcome]
GREEDY = {"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 24}
OPENINGS = ["Once upon a time, there was a {} who", "My favourite {} is the one that", "In the year 3000, every {}"]


def prompts(tag: str) -> list[str]:
    # No two prompts share a prefix (nor with other tests'): the prompt-prefix cache would change how their
    # prompts are batched, which is a different comparison.
    return [f"{tag} {animal}. " + OPENINGS[i % 3].format(animal) for i, animal in enumerate(ANIMALS)]


ANIMALS = ["Dragons", "Cats", "Kings", "Robots"]


def concurrently(app: App, calls: list[list[str]]) -> list[ProbeOutcome]:
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda args: run_probe(app, *args), calls))


def tokens_of(stream: ProbeOutcome) -> list[int]:
    return [t for e in stream.value["events"] if "chunk" in e for t in e["chunk"]["token-ids"]]


@pytest.mark.parametrize("model", MODELS)
def test_concurrent_guests_decode_together_and_match_running_alone(
    real_probe_app: App, real_host: Host, model: str
) -> None:
    loaded = real_host.engine.model(model)  # type: ignore[attr-defined]
    texts = prompts("Batch")
    calls = [["stream", model, p, json.dumps(GREEDY)] for p in texts]
    alone = [run_probe(real_probe_app, *c) for c in calls]
    steps_before = loaded.scheduler.steps
    together = concurrently(real_probe_app, calls)
    steps = loaded.scheduler.steps - steps_before
    for prompt, one, batched in zip(texts, alone, together, strict=True):
        assert batched.value["events"][-1] == one.value["events"][-1]  # the same done event: reason and usage
        assert_same_or_split_at_near_tie(real_host, prompt, tokens_of(one), tokens_of(batched), model)
    # Decoded together: far fewer steps than tokens (each step carries one token of every running stream).
    generated = sum(len(tokens_of(o)) for o in together)
    assert generated == 4 * 24
    # (The guests start a few milliseconds apart, so the first steps may carry fewer rows.)
    assert steps < generated - 24, f"{steps} steps for {generated} tokens: the requests were not batched"


@pytest.mark.parametrize("model", MODELS)
def test_streams_and_stops_under_concurrency(real_probe_app: App, real_host: Host, model: str) -> None:
    params = {**GREEDY, "stop": [" was", "."]}
    two = prompts("Stops")[:2]
    streams = [["stream", model, p, json.dumps(params)] for p in two]
    infers = [["infer", model, p, json.dumps(params)] for p in two]
    outcomes = concurrently(real_probe_app, streams + infers)
    for prompt, streamed, inferred in zip(two, outcomes[:2], outcomes[2:], strict=True):
        *chunks, done = streamed.value["events"]
        result = inferred.value
        text = "".join(c["chunk"]["text"] for c in chunks)
        assert result["finish-reason"] == done["done"]["finish-reason"] == "stop"
        for got in (text, result["text"]):
            assert " was" not in got and "." not in got
        assert done["done"]["usage"]["generated-token-count"] >= len(tokens_of(streamed))
        if text == result["text"]:
            assert done["done"] == {"finish-reason": result["finish-reason"], "usage": result["usage"]}
        else:  # the infer's tokens are not reported: its text must part from the stream's at a near-tie
            pairs = enumerate(zip(text, result["text"], strict=False))
            same = next((i for i, (x, y) in pairs if x != y), min(len(text), len(result["text"])))
            shown, split = "", 0
            for chunk in chunks:
                if len(shown) + len(chunk["chunk"]["text"]) > same:
                    break
                shown += chunk["chunk"]["text"]
                split += len(chunk["chunk"]["token-ids"])
            assert_same_or_split_at_near_tie(real_host, prompt, tokens_of(streamed), tokens_of(streamed)[:split], model)


@pytest.mark.parametrize("model", MODELS)
def test_more_requests_than_slots_are_all_served_in_turn(real_probe_app: App, real_host: Host, model: str) -> None:
    loaded = real_host.engine.model(model)  # type: ignore[attr-defined]
    count = 3 * loaded.config.slots
    # Counting goes on: on both models the end of generation stays far (> 5 logits) below the greedy choice for all
    # 8 tokens, so every request runs its full budget (SmolLM2 came within 0.9 of ending "the number 6 is").
    prompt = "Queue {0}: count on from {0}: {0}, {1},"
    calls = [["infer", model, prompt.format(i, i + 1), json.dumps({**GREEDY, "max-tokens": 8})] for i in range(count)]
    outcomes = concurrently(real_probe_app, calls)
    assert all(o.exit_code == 0 for o in outcomes), [o.error for o in outcomes]
    assert all(o.value["usage"]["generated-token-count"] == 8 for o in outcomes)
    assert loaded.slots.available == loaded.config.slots


def test_a_repeated_prompt_prefix_is_reused_not_evaluated_again(real_probe: Probe, real_host: Host) -> None:
    model = real_host.engine.model(CACHED)  # type: ignore[attr-defined]
    base = "Prefix: a long shared instruction that many requests start with, followed by a question."
    first = real_probe("infer", CACHED, base, json.dumps({**GREEDY, "max-tokens": 4}))
    assert first.exit_code == 0
    reused, evaluated = model.slots.reused_prompt_tokens, model.evaluated_tokens
    second = real_probe("infer", CACHED, base + " What is it?", json.dumps({**GREEDY, "max-tokens": 4}))
    assert second.exit_code == 0
    shared = len(real_host.tokenize(CACHED, base))
    prompt = second.value["usage"]["prompt-token-count"]
    assert model.slots.reused_prompt_tokens - reused >= shared - 1
    # Only the new part of the prompt (and 3 decoded tokens) went through the model.
    assert model.evaluated_tokens - evaluated <= prompt - (shared - 1) + 3
