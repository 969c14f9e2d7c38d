"""Deterministic mode's planning rules (pure, against brute force) and the mode end to end on the fake decoder
with `rounding`, which makes logits depend on row shapes the way llama.cpp's kernels do."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from llmhost.config import ModelConfig
from llmhost.domain.types import InferencingParams, StreamChunk
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import FakeDecoder
from llmhost.engine.local.model import EngineModel
from llmhost.engine.local.planning import (
    Pending,
    aligned_after,
    decode_calls,
    plan_step,
    reusable_prefix,
    row_length,
)

MODEL = "fake"
SEEDED = InferencingParams(max_tokens=12, temperature=1.0, top_k=0, top_p=1.0, seed=7, repeat_penalty=1.0)
PROMPTS = [f"Tell me a story about the number {i} and its friends" for i in range(6)]
OTHERS = ["Other traffic: " + "x" * n for n in (3, 20, 41, 9)]


# -- planning (pure) -------------------------------------------------------------------------------------------


@given(st.integers(0, 200), st.integers(1, 100), st.integers(0, 64), st.sampled_from([1, 4, 8, 32]))
def test_a_deterministic_row_ends_at_the_next_multiple_or_the_end(
    start: int, pending: int, budget: int, chunk: int
) -> None:
    count = row_length(start, pending, budget, chunk)
    boundary = (start // chunk + 1) * chunk
    whole = min(pending, boundary - start)  # brute force: the row up to the boundary or the end
    assert count == (whole if whole <= budget else 0)
    assert row_length(start, pending, budget, None) == min(pending, budget)


@given(
    st.lists(st.tuples(st.integers(0, 70), st.integers(0, 100), st.booleans()), max_size=10),
    st.integers(1, 48),
    st.sampled_from([4, 8, 16]),
)
def test_deterministic_plans_cut_prompts_at_aligned_boundaries_and_never_starve_them(
    jobs: list[tuple[int, int, bool]], budget: int, chunk: int
) -> None:
    pending = [Pending(i, n, stalled, start) for i, (n, start, stalled) in enumerate(jobs)]
    planned = plan_step(pending, budget, chunk)
    by_key = {p.key: p for p in pending}
    prompts = [p for p in planned if by_key[p.key].pending > 1]
    for p in planned:
        job = by_key[p.key]
        assert not job.stalled and p.count == row_length(job.start, job.pending, 10**6, chunk)
        assert p.samples == (p.count == job.pending)
    ready_prompts = [p for p in pending if p.pending > 1 and not p.stalled]
    if ready_prompts:
        # however many rows are decoding, the first prompt in arrival order gets its row
        assert prompts and prompts[0].key == ready_prompts[0].key
    assert sum(p.count for p in prompts[1:]) + sum(p.count for p in planned if by_key[p.key].pending == 1) <= budget


@given(st.lists(st.integers(1, 40), max_size=20), st.randoms(), st.sampled_from([None, 1, 2, 7]))
def test_decode_calls_keep_calls_small_enough_to_round_each_row_as_alone(
    counts: list[int], rng: random.Random, group: int | None
) -> None:
    slots = rng.sample(range(len(counts)), len(counts))  # each row's sequence slot, in any order
    calls = decode_calls(list(zip(slots, counts, strict=True)), group)
    assert sorted(i for call in calls for i in call) == list(range(len(counts)))
    if group is None:
        assert calls == ([list(range(len(counts)))] if counts else [])
        return
    singles = [call for call in calls if all(counts[i] == 1 for i in call)]
    assert all(len(call) == 1 for call in calls if call not in singles)  # a longer row is always alone
    assert all(len(call) <= group for call in singles)
    n = counts.count(1)
    # as few calls as the bound allows, as even as can be (brute force: the ceiling, sizes within one)
    assert len(singles) == -(-n // group)
    if singles:
        assert max(map(len, singles)) - min(map(len, singles)) <= 1
    # by ascending slot, across calls too (llama.cpp puts consecutive slots in one micro-batch)
    assert [slots[i] for call in singles for i in call] == sorted(slots[i] for i, c in enumerate(counts) if c == 1)


@given(st.lists(st.tuples(st.integers(0, 80), st.integers(1, 40)), max_size=15), st.sampled_from([4, 8, 16]))
def test_aligned_prefix_follows_every_rewrite(rows: list[tuple[int, int]], chunk: int) -> None:
    """Brute force: remember, per position, whether its row was a whole aligned chunk; the aligned prefix is the
    longest run of such positions from 0."""
    shapes: list[bool] = []
    aligned = 0
    for start, count in rows:
        start = min(start, len(shapes))  # rows start inside or at the end of what is held
        del shapes[start:]
        whole = start % chunk == 0 and count == chunk
        shapes += [whole] * count
        aligned = aligned_after(aligned, start, count, chunk)
        expected = 0
        while expected < len(shapes) and shapes[expected]:
            expected += 1
        assert aligned == expected - expected % chunk


@given(st.integers(0, 100), st.integers(0, 100), st.integers(1, 100), st.sampled_from([None, 4, 16]))
def test_reuse_stops_at_a_whole_chunk_short_of_the_prompt_end(
    common: int, aligned: int, length: int, chunk: int | None
) -> None:
    reused = reusable_prefix(common, aligned, length, chunk)
    assert 0 <= reused <= common and reused < length
    if chunk is None:
        assert reused == max(0, min(common, length - 1))
    else:
        assert reused % chunk == 0 and reused <= aligned and reused + chunk > min(common, aligned, length - 1)


# -- the mode on the fake decoder ------------------------------------------------------------------------------


def engine(deterministic: bool) -> tuple[LlamaCppEngine, FakeDecoder]:
    decoder = FakeDecoder(n_ctx=128, n_batch=16, n_slots=4, rounding=True)
    config = ModelConfig(slots=4, context_length=128, batch_size=16, deterministic=deterministic)
    return LlamaCppEngine({MODEL: config}, Path("/nonexistent"), load=lambda n, c: EngineModel(n, c, decoder)), decoder


def run(eng: LlamaCppEngine, prompt: str) -> str:
    return eng.infer(MODEL, prompt, SEEDED).text


def concurrently(eng: LlamaCppEngine, prompt: str) -> str:
    """`prompt` started between other requests still in their prompts and others decoding, every stream read
    at once (by threads), so their one-token rows meet in the same steps."""
    streams = [eng.stream(MODEL, other, SEEDED) for other in OTHERS[:2]]
    mine = eng.stream(MODEL, prompt, SEEDED)
    streams.append(eng.stream(MODEL, OTHERS[2], SEEDED))
    readers = [threading.Thread(target=list, args=(s,)) for s in streams]
    for r in readers:
        r.start()
    text = "".join(e.text for e in mine if isinstance(e, StreamChunk))
    for r in readers:
        r.join()
    return text


def conditions(deterministic: bool) -> tuple[list[str], dict[str, list[str]]]:
    cold: list[str] = []
    runs: dict[str, list[str]] = {"warm": [], "partial": [], "concurrent": [], "churn": []}
    for prompt in PROMPTS:
        eng, _ = engine(deterministic)
        cold.append(run(eng, prompt))
        runs["warm"].append(run(eng, prompt))
        run(eng, prompt[:30] + " and nothing else")  # holds part of the prompt
        runs["partial"].append(run(eng, prompt))
        runs["concurrent"].append(concurrently(eng, prompt))
        for other in OTHERS:
            run(eng, other)
        runs["churn"].append(run(eng, prompt))
        eng.close()
    return cold, runs


def test_the_fake_rounds_by_row_shape_so_the_default_mode_differs() -> None:
    """Without the mode, a warm prefix or a shared batch changes some seeded texts (what the e2e test shows on
    llama.cpp): the fake's rounding is strong enough for the next test to mean something."""
    cold, runs = conditions(deterministic=False)
    assert any(runs[k] != cold for k in ("warm", "partial", "concurrent"))


def test_deterministic_mode_gives_the_cold_text_in_every_condition() -> None:
    cold, runs = conditions(deterministic=True)
    for condition, texts in runs.items():
        assert texts == cold, condition


def test_deterministic_mode_reuses_whole_chunks_of_a_cached_prompt() -> None:
    eng, decoder = engine(deterministic=True)
    prompt = PROMPTS[0] + " " + "y" * 40
    run(eng, prompt)
    reused = eng.model(MODEL).slots.reused_prompt_tokens
    run(eng, prompt)
    model = eng.model(MODEL)
    taken, chunk = model.slots.reused_prompt_tokens - reused, model.chunk
    assert chunk is not None
    assert taken > 0 and taken % chunk == 0 and taken > len(decoder.tokenize(prompt, True)) - 1 - chunk
    assert all(len(call) == 1 or max(call) == 1 for call in decoder.calls)  # prompt rows decode alone
    assert decoder.violations == []
    eng.close()


def forked_choices(eng: LlamaCppEngine, busy: bool) -> list[str]:
    """Three seeded choices from forks of one sequence; `busy`: every slot is generating when the prompt is
    appended and forked, so nothing is evaluated until the forks' generations run."""
    streams = [eng.stream(MODEL, other, SEEDED) for other in OTHERS] if busy else []
    for stream in streams:
        next(iter(stream))  # admitted: holds its slot
    readers = [threading.Thread(target=list, args=(s,)) for s in streams]
    seq = eng.open_sequence(MODEL)
    seq.append(PROMPTS[1] + " and then some more words to make it long")
    forks = [seq, seq.fork(), seq.fork()]
    for r in readers:
        r.start()
    texts = [f.generate(SEEDED.model_copy(update={"seed": 7 + k})).text for k, f in enumerate(forks)]
    for r in readers:
        r.join()
    for f in forks:
        f.close()
    return texts


def test_forks_repeat_whether_the_prompt_was_evaluated_at_once_or_by_their_generations() -> None:
    alone, _ = engine(deterministic=True)
    loaded, decoder = engine(deterministic=True)
    assert forked_choices(alone, busy=False) == forked_choices(loaded, busy=True)
    assert decoder.violations == []
    alone.close()
    loaded.close()


def test_the_mode_is_refused_where_it_cannot_hold() -> None:
    remote = {"backend": "openai", "base_urls": ("http://127.0.0.1:1/v1",)}
    with pytest.raises(ValidationError, match="needs backend"):
        ModelConfig(deterministic=True, **remote)
    with pytest.raises(ValidationError, match="exact-batching"):
        ModelConfig(deterministic=True, exact_batching=False)
    assert ModelConfig(**remote).deterministic is False
