"""Checks of greedy outputs that hold despite llama.cpp's batch-shape-dependent CPU arithmetic.

The same tokens can get slightly different logits (measured here: up to ~0.8, usually far less) depending on the
shape of the batch they are computed in and where their KV cells lie (README, "Continuous batching"). Greedy
outputs of two runs can therefore differ, but only where the top two candidates are that close: a near-tie.
At the 18 divergences measured here (4 prompts, 40 staggered concurrent trials) the margin was at most 0.27.
"""

from __future__ import annotations

import numpy as np

from llmhost import Host

from .conftest import MODEL

NOISE = 1.0  # the largest logit difference batch shapes are allowed to cause; a real bug shows far larger ones


def _walk(host: Host, prefix: list[int], continuation: list[int], model: str, stop_at_close_call: bool) -> int | None:
    """Follow `continuation` in a fresh sequence fed `prefix`. Every token must be the fresh argmax, or within
    NOISE of it, which ends the walk (returns its index). With `stop_at_close_call`, the walk also ends at a step
    whose runner-up is within NOISE. None: every step was a clear choice."""
    fresh = host.open_sequence(model)
    try:
        fresh.append_tokens(prefix)
        for step, token in enumerate(continuation):
            logits = np.array(fresh.next_logits())  # type: ignore[attr-defined]
            best = int(logits.argmax())
            if best != token:
                margin = float(logits[best] - logits[token])
                assert margin < NOISE, f"step {step}: {token} generated, a fresh state prefers {best} by {margin:.3f}"
                return step
            if stop_at_close_call and logits[best] - float(np.partition(logits, -2)[-2]) < NOISE:
                return step
            fresh.append_tokens([token])
        return None
    finally:
        fresh.close()


def assert_greedy_continuation(host: Host, prefix: list[int], continuation: list[int], model: str = MODEL) -> None:
    """Every token generated greedily after `prefix` is what a fresh sequence fed `prefix` picks, up to a near-tie."""
    _walk(host, prefix, continuation, model, stop_at_close_call=False)


def assert_same_or_split_at_near_tie(host: Host, prompt: str, a: list[int], b: list[int], model: str = MODEL) -> None:
    """Two greedy runs of `prompt` generated the same tokens, or they part at a near-tie (never at a clear
    choice), each being a greedy continuation up to there."""
    if a == b:
        return
    split = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    prompt_tokens = host.tokenize(model, prompt)
    tie = _walk(host, prompt_tokens, a, model, stop_at_close_call=True)
    assert tie is not None and tie <= split, f"the runs part at token {split}, which is no near-tie ({a} vs {b})"
    _walk(host, prompt_tokens + b[:split], b[split:], model, stop_at_close_call=True)
