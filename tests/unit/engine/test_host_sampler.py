"""The host sampler's pure parts against brute force: the top-k search, bias and penalties, top-p, seeds."""

from __future__ import annotations

import collections

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llmhost.domain.types import InferencingParams, LogitBias
from llmhost.engine.local.host_sampler import (
    HOST_DRAW_MIN_VOCAB,
    MAX_HOST_TOP_K,
    HostSampler,
    eligible,
    top_k_indices,
)

# Few distinct values, so ties are common (ties go to the lower index). Up to 5000 entries: the grouped search
# (2048 groups) and its tail are used from 2048 on.
rows = st.integers(1, 5000).flatmap(
    lambda n: st.lists(st.integers(-8, 8), min_size=n, max_size=n).map(lambda v: np.array(v, dtype=np.float32) / 2)
)


@settings(max_examples=100, deadline=None)
@given(rows, st.integers(1, 300), st.sampled_from([0.0, 0.5, 0.999, 1.0]))
def test_top_k_indices_are_the_k_highest_highest_first(row: np.ndarray, k: int, masked: float) -> None:
    """`masked`: the share of entries set to -inf (a constraint's mask); they are left out while others remain."""
    row = row.copy()
    row[np.random.default_rng(len(row)).random(len(row)) < masked] = -np.inf
    allowed = [i for i in range(len(row)) if row[i] > -np.inf] or list(range(len(row)))
    expected = sorted(allowed, key=lambda i: (-row[i], i))[:k]
    assert top_k_indices(row, k).tolist() == expected


def brute_greedy(row: np.ndarray, bias: list[tuple[int, float]], history: list[int], params: InferencingParams) -> int:
    """llama.cpp's chain, written out: bias, penalties over the last N tokens, first highest logit."""
    values = row.astype(np.float32).copy()
    for token, b in bias:
        values[token] += np.float32(b)
    window = history[-params.repeat_penalty_last_n_token_count :] if params.repeat_penalty_last_n_token_count else []
    for token, count in collections.Counter(window).items():
        v = values[token]
        v = v * np.float32(params.repeat_penalty) if v <= 0 else v / np.float32(params.repeat_penalty)
        values[token] = v - (
            np.float32(count) * np.float32(params.frequency_penalty) + np.float32(params.presence_penalty)
        )
    return int(max(range(len(values)), key=lambda i: (values[i], -i)))


@settings(max_examples=100, deadline=None)
@given(
    rows.filter(lambda r: len(r) >= 4),
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from([-100.0, -1.0, 0.5, 3.0])), max_size=3),
    st.lists(st.integers(0, 3), max_size=12),
    st.integers(1, 6),
    st.sampled_from([1.0, 1.1, 1.5]),
    st.sampled_from([0.0, 0.3]),
    st.sampled_from([0.0, 0.7]),
)
def test_greedy_with_bias_and_penalties_matches_the_chain(
    row: np.ndarray,
    bias: list[tuple[int, float]],
    history: list[int],
    window: int,
    repeat: float,
    frequency: float,
    presence: float,
) -> None:
    params = InferencingParams(
        temperature=0.0,
        repeat_penalty=repeat,
        repeat_penalty_last_n_token_count=window,
        frequency_penalty=frequency,
        presence_penalty=presence,
        logit_bias=tuple(LogitBias(token_id=t, bias=b) for t, b in bias),
    )
    raw = row.copy()
    sampler = HostSampler(lambda _: row, params, window, seed=0)
    for token in history:
        sampler.accept(token)
    penalised = repeat != 1.0 or frequency != 0.0 or presence != 0.0
    expected = brute_greedy(raw, bias, history if penalised else [], params)
    assert sampler.sample(0) == expected
    assert np.array_equal(row, raw)  # the logits row is left as it was


def test_a_draw_keeps_to_top_k_and_top_p_and_follows_its_seed() -> None:
    row = np.zeros(5000, dtype=np.float32)
    row[[10, 20, 30, 40]] = [5.0, 4.9, 4.8, -1.0]  # top-p 0.9 keeps the first three of the top four
    params = InferencingParams(temperature=1.0, top_k=4, top_p=0.9, repeat_penalty=1.0)
    draws = [HostSampler(lambda _: row, params, 0, seed=s).sample(0) for s in range(300)]
    assert set(draws) == {10, 20, 30}
    again = [HostSampler(lambda _: row, params, 0, seed=s).sample(0) for s in range(300)]
    assert draws == again
    sampler = HostSampler(lambda _: row, params, 0, seed=7)
    assert len({sampler.sample(0) for _ in range(50)}) == 3  # one sampler's draws go on: not the same draw


def test_eligible_params() -> None:
    big, small = HOST_DRAW_MIN_VOCAB, HOST_DRAW_MIN_VOCAB - 1
    assert eligible(InferencingParams(temperature=0.0, top_k=0), small)
    assert eligible(InferencingParams(temperature=0.8, top_k=40), big)
    assert not eligible(InferencingParams(temperature=0.8, top_k=40), small)
    assert not eligible(InferencingParams(temperature=0.8, top_k=0), big)
    assert not eligible(InferencingParams(temperature=0.8, top_k=MAX_HOST_TOP_K + 1), big)
