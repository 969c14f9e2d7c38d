"""`sequence.score` and beam search (engine/search.py) on the deterministic fake decoder, against brute force:
the fake's logits after a history are a pure function of it, so every score can be recomputed from scratch."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmhost.config import ModelConfig
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import BeamParams, InferencingParams
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import EOG, FakeDecoder
from llmhost.engine.local.model import EngineModel
from llmhost.engine.local.search import _Row

MODEL = "fake"
PROMPT = "Once upon"


def engine(slots: int = 6) -> tuple[LlamaCppEngine, FakeDecoder]:
    decoder = FakeDecoder(n_ctx=64, n_batch=16, n_slots=slots)
    config = ModelConfig(slots=slots, context_length=64, batch_size=16)
    return LlamaCppEngine({MODEL: config}, Path("/nonexistent"), load=lambda n, c: EngineModel(n, c, decoder)), decoder


def logprob_after(decoder: FakeDecoder, history: list[int], token: int) -> float:
    # The same arithmetic as the engine's (float32 exp-sum, float64 result).
    logits = decoder.logits_after(history)
    peak = float(logits.max())
    return float(logits[token]) - (peak + float(np.log(np.exp(logits - peak).sum())))


def brute_score(decoder: FakeDecoder, prefix: list[int], continuation: list[int]) -> float:
    return sum(logprob_after(decoder, prefix + continuation[:i], t) for i, t in enumerate(continuation))


def test_score_equals_the_sum_of_token_logprobs_and_leaves_the_sequence_unchanged() -> None:
    eng, decoder = engine()
    seq = eng.open_sequence(MODEL)
    seq.append(PROMPT)
    before = (seq.token_ids(), seq.text())
    continuations = [" a time", " the hill", "", " x", " a time there was"]
    scores = seq.score(continuations)
    for text, value in zip(continuations, scores, strict=True):
        expected = brute_score(decoder, before[0], decoder.tokenize(text, False))
        assert value == pytest.approx(expected, abs=1e-9)
    assert (seq.token_ids(), seq.text()) == before
    assert eng.model(MODEL).slots.available == 5  # every fork went back; the sequence keeps its own slot
    seq.close()


def test_score_and_beam_search_refuse_an_empty_sequence() -> None:
    eng, _ = engine()
    seq = eng.open_sequence(MODEL)
    with pytest.raises(InvalidInput, match="empty"):
        seq.score([" a"])
    with pytest.raises(InvalidInput, match="empty"):
        seq.beam_search(BeamParams(width=2, max_tokens=3))


def test_beam_width_1_is_greedy_generation() -> None:
    eng, _ = engine()
    seq = eng.open_sequence(MODEL)
    seq.append(PROMPT)
    fork = seq.fork()
    greedy = fork.generate(InferencingParams(max_tokens=8, temperature=0.0, repeat_penalty=1.0))
    [(beam, _)] = seq.beam_search(BeamParams(width=1, max_tokens=8))
    assert beam.text() == PROMPT + greedy.text


def test_beams_are_ranked_by_their_brute_force_joint_logprob() -> None:
    eng, decoder = engine()
    seq = eng.open_sequence(MODEL)
    seq.append(PROMPT)
    base = seq.token_ids()
    beams = seq.beam_search(BeamParams(width=4, max_tokens=5))
    assert 1 <= len(beams) <= 4
    scores = [score for _, score in beams]
    assert scores == sorted(scores, reverse=True)
    for beam, score in beams:
        ids = beam.token_ids()
        assert ids[: len(base)] == base and beam.text().startswith(PROMPT)
        generated = ids[len(base) :]
        # An end-of-generation token is scored but not kept in the sequence (as a generation's rewind).
        candidates = [generated, generated + [EOG]]
        assert any(math.isclose(brute_score(decoder, base, c), score, abs_tol=1e-9) for c in candidates)
        # The beam's model state is its token ids: its next logits are the fake's logits after them.
        assert np.array_equal(np.asarray(beam.next_logits(), dtype=np.float32), decoder.logits_after(ids))
    assert seq.token_ids() == base


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([-np.inf, -30.0, -5.0, 0.0, 0.5, 1.0, 2.0, 13.0]), min_size=1, max_size=40),
    st.integers(1, 8),
)
def test_row_best_is_the_top_k_with_ties_to_the_lower_id(values: list[float], count: int) -> None:
    logits = np.asarray(values, dtype=np.float32)
    model: Any = SimpleNamespace(decoder=SimpleNamespace(logits=lambda _row: logits))
    if not np.isfinite(logits).any():
        return  # a row with no possible token never reaches beam search (the fake and llama.cpp always have one)
    row = _Row(model, 0)
    expected = sorted(range(len(values)), key=lambda t: (-values[t], t))[:count]
    assert row.best(count) == expected
