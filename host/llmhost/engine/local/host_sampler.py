"""Sampling on the host, in numpy, from a logits row: what llama.cpp's sampler chain does, without its cost.

Why: `llama_sampler_sample` first copies the whole row into a 262,144-entry candidate array (Gemma's vocabulary),
then runs the chain over it: 0.5 ms per token even for greedy, most of the host's time per token and more than a
GPU decode step's share. Here greedy is one `argmax` (~20 µs), and top-k sampling finds its candidates from
column maxima (~75 µs for top-k 40). Pure logic over a float32 row, so it is tested against brute force
(tests/unit/engine/test_host_sampler.py) and, on the real model, against llama.cpp's own chain.

Semantics, in llama.cpp's chain order: logit bias → repeat/frequency/presence penalties over the last N accepted
tokens (the prompt's included) → greedy (the first highest logit, as llama.cpp's greedy sampler) or top-k →
top-p → temperature → a seeded draw. Greedy gives llama.cpp's tokens exactly. A seeded draw uses numpy's PCG64,
not llama.cpp's mt19937: the same seed gives the same tokens run to run, not the tokens it gave before.
Parameters this does not cover (temperature > 0 with top-k off or above `MAX_HOST_TOP_K`), and draws from small
vocabularies, keep llama.cpp's chain (`eligible`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

from llmhost.domain.types import InferencingParams

# The largest top-k sampled here; above it (or with top-k off) a draw needs a sort of most of the vocabulary,
# which llama.cpp's bucket sort does better.
MAX_HOST_TOP_K = 256
# Draws (temperature > 0) are made here from vocabularies at least this large. Below, llama.cpp's candidate copy is
# cheap and its chain was as fast as numpy's dozen small-array calls: SmolLM2 (49,152 tokens) measured 0.44 ms of
# host time per token with llama.cpp's chain, 0.52 ms with this one; Gemma (262,144) 1.39 ms against 0.71 ms.
HOST_DRAW_MIN_VOCAB = 131_072
# Groups when looking for the top k: the k-th largest of the groups' maxima bounds the k-th largest logit from
# below, so only logits at or above it can be among the top k. Group j holds logits j, j + G, j + 2G, ...: the
# maxima are then one element-wise maximum over the rows of a (n / G, G) view, as fast as a plain `max` (a
# maximum per contiguous block reduces along the short axis, ten times slower).
_GROUPS = 2048


def eligible(params: InferencingParams, n_vocab: int) -> bool:
    """Whether `HostSampler` samples with these params from a vocabulary of `n_vocab` tokens (else llama.cpp's
    chain does): greedy always, a draw where it is faster (`MAX_HOST_TOP_K`, `HOST_DRAW_MIN_VOCAB`)."""
    return params.temperature == 0 or (0 < params.top_k <= MAX_HOST_TOP_K and n_vocab >= HOST_DRAW_MIN_VOCAB)


def top_k_indices(logits: Any, k: int) -> Any:
    """The indices of the k highest logits, highest first (ties: lower index first). Tokens at -inf (a
    constraint's mask) are left out while any other remains: they cannot be drawn."""
    n = len(logits)
    k = min(k, n)
    rows = n // _GROUPS
    if rows and k <= _GROUPS:
        grid = logits[: rows * _GROUPS].reshape(rows, _GROUPS)
        maxima = grid.max(axis=0)
        floor = np.partition(maxima, _GROUPS - k)[_GROUPS - k]
        # Only the groups whose maximum reaches the floor can hold candidates: look in those columns alone. At a
        # floor of -inf (fewer than k groups hold an allowed token) every allowed token is one.
        cut = (lambda v: v >= floor) if floor > -np.inf else (lambda v: v > -np.inf)
        columns = np.flatnonzero(cut(maxima))
        r, c = np.nonzero(cut(grid[:, columns]))
        tail = logits[rows * _GROUPS :]
        candidates = np.concatenate((r * _GROUPS + columns[c], rows * _GROUPS + np.flatnonzero(cut(tail))))
    else:
        candidates = np.flatnonzero(logits > -np.inf)
    if not len(candidates):
        candidates = np.arange(n)
    order = np.lexsort((candidates, -logits[candidates]))[:k]
    return candidates[order]


class HostSampler:
    """One generation's sampler. `logits(row)`: the writable float32 logits row `row` of the last decode. Its
    entries for biased and penalised tokens are changed during `sample` and restored before it returns."""

    def __init__(self, logits: Callable[[int], Any], params: InferencingParams, window: int, seed: int) -> None:
        self._logits = logits
        self._greedy = params.temperature == 0
        self._top_k = params.top_k
        self._top_p = params.top_p
        self._temperature = params.temperature
        # Greedy never draws: no generator (creating one costs ~30 µs a request, at GPU speed a step's worth).
        self._rng = None if self._greedy else np.random.default_rng(seed)
        self._bias_ids = np.array([b.token_id for b in params.logit_bias], dtype=np.int64)
        self._bias = np.array([b.bias for b in params.logit_bias], dtype=np.float32)
        penalised = params.repeat_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0
        self._window = window if penalised else 0
        self._repeat = np.float32(params.repeat_penalty)
        self._frequency = np.float32(params.frequency_penalty)
        self._presence = np.float32(params.presence_penalty)
        self._recent: collections.deque[int] = collections.deque()
        self.plain_greedy = self._greedy and not len(self._bias_ids) and not self._window
        self._counts: dict[int, int] = {}

    def accept(self, token: int) -> None:
        if self._window <= 0:
            return
        counts = self._counts
        counts[token] = counts.get(token, 0) + 1
        if len(self._recent) >= self._window:
            old = self._recent.popleft()
            counts[old] -= 1
            if not counts[old]:
                del counts[old]
        self._recent.append(token)

    def sample(self, row: int) -> int:
        logits = self._logits(row)
        changed, saved = self._adjust(logits)
        try:
            token = int(logits.argmax()) if self._greedy else self._draw(logits)
        finally:
            if changed is not None:
                logits[changed] = saved
        self.accept(token)
        return token

    def _adjust(self, logits: Any) -> tuple[Any, Any]:
        """Apply logit bias, then penalties, in place; returns (changed indices, their raw values) to restore."""
        if not len(self._bias_ids) and not self._counts:
            return None, None
        ids = np.fromiter(self._counts, dtype=np.int64, count=len(self._counts))
        changed = np.union1d(self._bias_ids, ids)
        saved = logits[changed].copy()
        if len(self._bias_ids):
            np.add.at(logits, self._bias_ids, self._bias)  # a token listed twice gets both biases, as in llama.cpp
        if len(ids):
            values = logits[ids]
            values = np.where(values <= 0, values * self._repeat, values / self._repeat)
            counts = np.array([self._counts[t] for t in ids.tolist()], dtype=np.float32)
            values -= counts * self._frequency + self._presence  # every counted token is present
            logits[ids] = values
        return changed, saved

    def _draw(self, logits: Any) -> int:
        top = top_k_indices(logits, self._top_k)
        values = logits[top].astype(np.float64)
        if self._top_p < 1.0:
            probs = np.exp(values - values[0])
            cumulative = np.cumsum(probs / probs.sum())
            keep = int(np.searchsorted(cumulative, self._top_p)) + 1  # the first prefix reaching top-p
            top, values = top[:keep], values[:keep]
        weights = np.exp((values - values[0]) / self._temperature)
        cumulative = np.cumsum(weights)
        assert self._rng is not None  # only a non-greedy sampler draws
        pick = int(np.searchsorted(cumulative, self._rng.random() * cumulative[-1], side="right"))
        return int(top[min(pick, len(top) - 1)])

    def close(self) -> None:
        pass
