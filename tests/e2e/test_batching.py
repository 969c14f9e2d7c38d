"""Continuous batching end to end: concurrent guests share one model and decode together in each step.

Greedy outputs under batching must equal the same requests run alone, exactly. On CPU they do, with the default
`exact-batching = true`, as long as each step's batch has fewer than 64 rows whenever the request's own rows
had fewer than 64 when run alone: llama.cpp's CPU matrix multiply switches kernels at 64 rows (a row's logits
then differ by up to ~0.8). With CPU weight repacking (`exact-batching = false`) a row's arithmetic also depends
on its place in the batch (4-row tiles vs single rows). Either way near-ties can flip (README, "Continuous
batching"). These tests keep every step under 64 rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from llmhost import App, Host
from probe_driver import ProbeOutcome, run_probe

from .conftest import CACHED, MODEL

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


def test_concurrent_guests_decode_together_and_match_running_alone(real_probe_app: App, real_host: Host) -> None:
    model = real_host.engine.model(MODEL)  # type: ignore[attr-defined]
    calls = [["infer", MODEL, p, json.dumps(GREEDY)] for p in prompts("Batch")]
    alone = [run_probe(real_probe_app, *c).value for c in calls]
    steps_before = model.scheduler.steps
    together = [o.value for o in concurrently(real_probe_app, calls)]
    steps = model.scheduler.steps - steps_before
    assert together == alone
    # Decoded together: far fewer steps than tokens (each step carries one token of every running stream).
    generated = sum(r["usage"]["generated-token-count"] for r in together)
    assert generated == 4 * 24
    # (The guests start a few milliseconds apart, so the first steps may carry fewer rows.)
    assert steps < generated - 24, f"{steps} steps for {generated} tokens: the requests were not batched"


def test_streams_and_stops_under_concurrency(real_probe_app: App) -> None:
    params = {**GREEDY, "stop": [" was", "."]}
    two = prompts("Stops")[:2]  # two streams and two infers: 4 prompts of ~13 tokens stay under 64 rows
    streams = [["stream", MODEL, p, json.dumps(params)] for p in two]
    infers = [["infer", MODEL, p, json.dumps(params)] for p in two]
    outcomes = concurrently(real_probe_app, streams + infers)
    for streamed, inferred in zip(outcomes[:2], outcomes[2:], strict=True):
        *chunks, done = streamed.value["events"]
        result = inferred.value
        assert "".join(c["chunk"]["text"] for c in chunks) == result["text"]
        assert done["done"] == {"finish-reason": result["finish-reason"], "usage": result["usage"]}
        assert result["finish-reason"] == "stop" and " was" not in result["text"] and "." not in result["text"]


def test_more_requests_than_slots_are_all_served_in_turn(real_probe_app: App, real_host: Host) -> None:
    model = real_host.engine.model(MODEL)  # type: ignore[attr-defined]
    count = 3 * model.config.slots
    calls = [
        ["infer", MODEL, f"Queue {i}: the number {i} is", json.dumps({**GREEDY, "max-tokens": 8})] for i in range(count)
    ]
    outcomes = concurrently(real_probe_app, calls)
    assert all(o.exit_code == 0 for o in outcomes), [o.error for o in outcomes]
    assert all(o.value["usage"]["generated-token-count"] == 8 for o in outcomes)
    assert model.free_slots == model.config.slots


def test_a_repeated_prompt_prefix_is_reused_not_evaluated_again(real_probe: Probe, real_host: Host) -> None:
    model = real_host.engine.model(CACHED)  # type: ignore[attr-defined]
    base = "Prefix: a long shared instruction that many requests start with, followed by a question."
    first = real_probe("infer", CACHED, base, json.dumps({**GREEDY, "max-tokens": 4}))
    assert first.exit_code == 0
    reused, evaluated = model.reused_prompt_tokens, model.evaluated_tokens
    second = real_probe("infer", CACHED, base + " What is it?", json.dumps({**GREEDY, "max-tokens": 4}))
    assert second.exit_code == 0
    shared = len(real_host.tokenize(CACHED, base))
    prompt = second.value["usage"]["prompt-token-count"]
    assert model.reused_prompt_tokens - reused >= shared - 1
    # Only the new part of the prompt (and 3 decoded tokens) went through the model.
    assert model.evaluated_tokens - evaluated <= prompt - (shared - 1) + 3
