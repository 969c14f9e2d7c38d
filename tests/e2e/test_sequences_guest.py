"""`sequences` end to end: probe guest → host → llama.cpp, on both built-in models. State must always equal text,
and cost only new tokens.

"State equals text" is checked two ways: the next-token logits of a sequence match those of a fresh sequence
fed the same token ids, and greedy continuation from the sequence equals greedy continuation of a fresh one
given the same `token-ids`. Both hold up to the float noise that different batch shapes cause on CPU (see
shared notes: max |Δlogit| up to ~1.7): logits must agree within that, and each token of a continuation must be
the fresh sequence's argmax, unless the two best candidates are within that noise (a near-tie may flip, and the
two paths legitimately diverge there). A wrong state (an extra or missing token in the KV cache) fails both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from llmhost import Host, InferencingParams
from probe_driver import ProbeOutcome

from .conftest import MODEL, MODELS, SMALL, SMALL_CONTEXT
from .greedy import NOISE, assert_greedy_continuation
from .test_llm_guest import STORY, token_texts

pytestmark = [pytest.mark.model, pytest.mark.wasm]
Probe = Callable[..., ProbeOutcome]
GREEDY = {"temperature": 0.0, "repeat-penalty": 1.0, "max-tokens": 8}
GREEDY_PARAMS = InferencingParams(temperature=0.0, repeat_penalty=1.0, max_tokens=8)


def run_script(probe: Probe, steps: list[list[Any]], model: str = MODEL) -> list[dict[str, Any]]:
    outcome = probe("seq", model, json.dumps(steps))
    assert outcome.exit_code == 0, (outcome.error, outcome.stderr)
    results: list[dict[str, Any]] = outcome.value
    return results


def ok(results: list[dict[str, Any]]) -> list[Any]:
    assert all("ok" in r for r in results), results
    return [r["ok"] for r in results]


def assert_same_logits(a: list[float], b: list[float]) -> None:
    x, y = np.array(a), np.array(b)
    assert float(np.abs(x - y).max()) < 2 * NOISE
    assert float(np.corrcoef(x, y)[0, 1]) > 0.999
    assert float(x.max() - x[int(y.argmax())]) < NOISE


@pytest.mark.parametrize("model", MODELS)
def test_state_equals_text_after_append_generate_truncate_fork(real_probe: Probe, real_host: Host, model: str) -> None:
    stop = {**GREEDY, "max-tokens": 30, "stop": ["."]}
    steps = [
        ["open", "a"],
        ["append", "a", "The capital of France is"],
        ["generate", "a", stop],
        ["append", "a", ". Also,"],
        ["generate", "a", GREEDY],
        ["fork", "a", "b"],
        ["append", "b", " However"],
        ["generate", "b", GREEDY],
        ["truncate", "a", 9],
        ["generate", "a", GREEDY],
        ["text", "a"],
        ["tokens", "a"],
        ["generate", "a", GREEDY],
        ["text", "b"],
        ["tokens", "b"],
        ["generate", "b", GREEDY],
        ["tokens", "a"],
        ["tokens", "b"],
    ]
    r = ok(run_script(real_probe, steps, model))
    first, second, forked = r[2]["text"], r[4]["text"], r[7]["text"]
    assert r[2]["finish-reason"] == "stop" and "." not in first
    text_b = "The capital of France is" + first + ". Also," + second + " However" + forked
    assert r[13] == text_b
    # `text()` of the truncated sequence is exactly the text of its first 9 tokens plus the new generation.
    tokens_a = r[11]
    loaded = real_host.engine.model(model)  # type: ignore[attr-defined]
    prefix = b"".join(loaded.piece(t) for t in tokens_a[:9]).decode()
    assert text_b.startswith(prefix)
    assert r[10] == prefix + r[9]["text"]
    assert_greedy_continuation(real_host, tokens_a, r[16][len(tokens_a) :], model)
    assert_greedy_continuation(real_host, r[14], r[17][len(r[14]) :], model)


@pytest.mark.parametrize("model", MODELS)
def test_exact_rewind_when_a_stop_begins_inside_a_token(real_probe: Probe, real_host: Host, model: str) -> None:
    reference = token_texts(real_host, STORY, 24, model)
    texts = [p.decode() for _, p in reference]
    # A token of 4+ characters; the stop sequence begins at its third character and runs into the next token.
    index = next(i for i, t in enumerate(texts) if len(t) >= 4 and i > 2 and texts[i + 1].strip())
    before = "".join(texts[:index])
    kept_part = texts[index][:2]
    stop = texts[index][2:] + texts[index + 1][:1]
    assert ("".join(texts)).find(stop) == len(before) + 2, "the stop must first occur inside that token"
    steps = [
        ["open", "a"],
        ["append", "a", STORY],
        ["generate", "a", {**GREEDY, "max-tokens": 24, "stop": [stop]}],
        ["text", "a"],
        ["tokens", "a"],
        ["evaluated", "a"],
        ["generate", "a", GREEDY],
        ["tokens", "a"],
    ]
    r = ok(run_script(real_probe, steps, model))
    assert r[2]["text"] == before + kept_part
    assert r[3] == STORY + before + kept_part
    prompt_ids = real_host.tokenize(model, STORY)
    generated_ids = [t for t, _ in reference[:index]]
    kept_ids = real_host.engine.model(model).tokenize(kept_part, add_special=False)  # type: ignore[attr-defined]
    # The cut token is gone; the kept part of its text came back as its own tokens.
    assert r[4] == prompt_ids + generated_ids + kept_ids
    assert reference[index][0] not in r[4][len(prompt_ids) + index :]
    assert_greedy_continuation(real_host, r[4], r[7][len(r[4]) :], model)

    # The same through the Python API, comparing next-token logits with a fresh sequence fed the same ids.
    seq = real_host.open_sequence(model)
    fresh = real_host.open_sequence(model)
    try:
        seq.append(STORY)
        seq.generate(InferencingParams(temperature=0, repeat_penalty=1, max_tokens=24, stop=(stop,)))
        assert seq.token_ids() == r[4]
        fresh.append_tokens(seq.token_ids())
        assert_same_logits(seq.next_logits(), fresh.next_logits())  # type: ignore[attr-defined]
    finally:
        seq.close()
        fresh.close()


@pytest.mark.parametrize("model", MODELS)
def test_cost_is_only_new_tokens_and_fork_evaluates_none(real_probe: Probe, real_host: Host, model: str) -> None:
    steps = [
        ["open", "a"],
        ["append", "a", STORY],
        ["len", "a"],
        ["evaluated", "a"],
        ["generate", "a", GREEDY],
        ["len", "a"],
        ["evaluated", "a"],
        ["fork", "a", "b"],
        ["evaluated", "b"],
        ["append", "b", " Then"],
        ["generate", "b", GREEDY],
        ["len", "b"],
        ["evaluated", "b"],
        ["evaluated", "a"],
    ]
    r = ok(run_script(real_probe, steps, model))
    # The last token of each step waits to be evaluated by the next generation (which needs its logits).
    assert r[3] == r[2] - 1
    assert r[6] == r[5] - 1
    assert r[8] == 0
    assert r[12] == r[11] - r[5]  # the fork paid for its own new tokens only
    assert r[13] == r[6]


@pytest.mark.slow  # soak: many sequences swapped
def test_many_sequences_swap_out_and_back_invisibly(real_probe: Probe, real_host: Host) -> None:
    model = real_host.engine.model(MODEL)  # type: ignore[attr-defined]
    count = 16
    assert model.config.slots < count
    names = [f"s{i}" for i in range(count)]
    prompts = [f"Item {i}: the number {i} is" for i in range(count)]
    steps: list[list[Any]] = [["open", n] for n in names]
    steps += [["append", n, p] for n, p in zip(names, prompts, strict=True)]
    for _ in range(2):  # round-robin: every sequence is swapped out and restored between its own steps
        steps += [["generate", n, {**GREEDY, "max-tokens": 3}] for n in names]
    steps += [["text", n] for n in names]
    swaps_before = model.slots.swaps_out
    r = ok(run_script(real_probe, steps))
    assert model.slots.swaps_out - swaps_before >= count
    for prompt, text in zip(prompts, r[-count:], strict=True):
        alone = real_host.open_sequence(MODEL)
        try:
            alone.append(prompt)
            p = InferencingParams(temperature=0, repeat_penalty=1, max_tokens=3)
            assert text == prompt + alone.generate(p).text + alone.generate(p).text
        finally:
            alone.close()
    assert model.slots.available == model.config.slots  # every dropped sequence gave its slot back


def test_context_window_limits(real_probe: Probe) -> None:
    long_text = "word " * 80
    steps = [
        ["open", "a"],
        ["append", "a", long_text],
        ["len", "a"],
        ["append", "a", "1, 2, 3, 4, 5"],
        ["generate", "a", {**GREEDY, "max-tokens": None}],
        ["len", "a"],
        ["generate", "a", GREEDY],
        ["append-tokens", "a", [10**9]],
    ]
    r = run_script(real_probe, steps, model=SMALL)
    error = r[1]["err"]
    assert error["kind"] == "invalid-input" and str(SMALL_CONTEXT) in error["message"]
    assert r[2] == {"ok": 0}  # nothing was added
    assert r[4]["ok"]["finish-reason"] == "length"
    assert r[5]["ok"] == SMALL_CONTEXT
    assert r[6]["ok"]["finish-reason"] == "length" and r[6]["ok"]["usage"]["generated-token-count"] == 0
    assert r[7]["err"]["kind"] == "invalid-input" and "tokens[0]" in r[7]["err"]["message"]


@pytest.mark.parametrize("model", MODELS)
def test_logprobs_and_log_likelihood(real_probe: Probe, model: str) -> None:
    steps = [
        ["open", "a"],
        ["append", "a", STORY],
        ["generate", "a", GREEDY],
        ["logprobs", "a"],
        ["log-likelihood", "a"],
        ["len", "a"],
    ]
    r = ok(run_script(real_probe, steps, model))
    logprobs, total, length = r[3], r[4], r[5]
    prompt_len = length - r[2]["usage"]["generated-token-count"]
    assert logprobs[:prompt_len] == [None] * prompt_len
    generated = logprobs[prompt_len:]
    assert len(generated) == 8 and all(lp is not None and -30 < lp <= 0 for lp in generated)
    assert total == pytest.approx(sum(generated), rel=1e-5)


@pytest.mark.parametrize("model", MODELS)
def test_generate_stream_appends_what_it_returned(real_probe: Probe, model: str) -> None:
    steps = [
        ["open", "a"],
        ["append", "a", STORY],
        ["fork", "a", "b"],
        ["stream", "a", GREEDY],
        ["generate", "b", GREEDY],
        ["tokens", "a"],
        ["tokens", "b"],
        ["fork", "a", "c"],
        ["stream", "c", GREEDY, 3],  # read three chunks, then drop the stream
        ["text", "c"],
        ["append", "c", "!"],
    ]
    r = ok(run_script(real_probe, steps, model))
    *chunks, done = r[3]
    assert "".join(c["chunk"]["text"] for c in chunks) == r[4]["text"]
    assert done["done"]["usage"] == r[4]["usage"]
    assert r[5] == r[6]
    three = "".join(c["chunk"]["text"] for c in r[8] if "chunk" in c)  # a chunk may hold the rest: then done
    assert r[9] == STORY + r[4]["text"] + three
