"""`sequence.append-tokens-with-logprobs` (0.2.2) on the real model, through the Python API (openai-compat's `echo`
exercises it through a guest: test_openai_parity.py). Compared with `score`, the other path to the same numbers,
within the float noise that different batch shapes cause on the CPU."""

from __future__ import annotations

import re

import pytest

from llmhost import Host, InferencingParams, InvalidInput

from .conftest import MODELS, SMALL, SMALL_CONTEXT

pytestmark = pytest.mark.model

# Logprobs of one token read from rows of differently shaped batches agree this closely (see test_guest_sampling).
NOISE = 0.1


@pytest.mark.parametrize("model", MODELS)
def test_each_token_gets_its_logprob_after_the_tokens_before_it(real_host: Host, model: str) -> None:
    context, continuation = "The capital of France is", " Paris, the city of light"
    reference = real_host.open_sequence(model)
    scored = real_host.open_sequence(model)
    try:
        reference.append(context + continuation)
        ids = reference.token_ids()
        entries = scored.append_tokens_with_logprobs(ids, 3)
        assert len(entries) == len(ids) and entries[0] is None  # nothing predicts the first token
        assert scored.token_ids() == ids and scored.text() == reference.text()
        for token, entry in zip(ids[1:], entries[1:], strict=True):
            assert entry is not None and entry.token_id == token and entry.logprob <= 0
            tops = [t.logprob for t in entry.top]
            assert len(tops) == 3 and tops == sorted(tops, reverse=True)
            assert entry.logprob <= tops[0] + 1e-6
            if token in [t.token_id for t in entry.top]:
                assert entry.logprob == pytest.approx(next(t.logprob for t in entry.top if t.token_id == token))
        # Appending to a non-empty sequence: its first token is scored from the sequence's last one, and the sum
        # of the continuation's logprobs is what `score` gives it.
        head = real_host.open_sequence(model)
        try:
            head.append(context)
            tail = ids[len(head.token_ids()) :]
            more = head.append_tokens_with_logprobs(tail, 0)
            assert all(entry is not None and entry.top == () for entry in more)
            total = sum(entry.logprob for entry in more if entry is not None)
            fresh = real_host.open_sequence(model)
            try:
                fresh.append(context)
                (expected,) = fresh.score([continuation])
            finally:
                fresh.close()
            assert total == pytest.approx(expected, abs=NOISE * len(tail))
            # The sequence goes on as if the tokens had been appended: a generation continues after them.
            result = head.generate(InferencingParams(max_tokens=2, temperature=0.0))
            assert result.usage.prompt_token_count == len(ids)
        finally:
            head.close()
    finally:
        reference.close()
        scored.close()


def test_bad_input_is_refused_and_the_sequence_is_unchanged(real_host: Host) -> None:
    seq = real_host.open_sequence(SMALL)
    try:
        seq.append("Hello")
        before = seq.token_ids()
        for tokens, top, needle in (
            ([5, 7], 21, "top must be 0 to 20"),
            ([5, 10**9], 1, "tokens[1] = 1000000000"),
            ([5] * SMALL_CONTEXT, 1, "context window"),
        ):
            with pytest.raises(InvalidInput, match=re.escape(needle)):
                seq.append_tokens_with_logprobs(tokens, top)
            assert seq.token_ids() == before
        assert seq.append_tokens_with_logprobs([], 2) == []
    finally:
        seq.close()
