"""The prompt-prefix cache of one model's slots (slots.SlotPool._adopt_prefix): a request that shares only the first
words of a cached prompt copies them into a free slot and leaves that prompt's cache whole, so system prompts that
start alike each keep their own (found by bench/ray_scale.py: a replica kept one cached prefix among them)."""

from __future__ import annotations

from .test_engine_fake import GREEDY, MODEL, engine

# Two long system prompts with the same first words, as "You are a helpful ..." prompts have.
FIRST = "You are a careful assistant for sailors. " * 3
SECOND = "You are a cheerful guide for hikers in the hills. " * 3


def test_a_prompt_that_starts_like_a_cached_one_leaves_its_cache_whole_while_a_slot_is_free() -> None:
    eng, _ = engine(slots=4, n_ctx=512, n_batch=64)
    slots = eng.model(MODEL).slots  # type: ignore[attr-defined]
    alone = {p: eng.infer(MODEL, p + "Q1?", GREEDY).text for p in (FIRST, SECOND)}  # each cached, in its own slot
    before = slots.reused_prompt_tokens
    eng.infer(MODEL, FIRST + "Q2?", GREEDY)
    eng.infer(MODEL, SECOND + "Q2?", GREEDY)
    # Each reused its own whole system prompt (all but the question), not just the shared "You are a c".
    assert slots.reused_prompt_tokens - before >= len(FIRST) + len(SECOND)
    # And still the texts of requests run on their own.
    assert {p: eng.infer(MODEL, p + "Q1?", GREEDY).text for p in (FIRST, SECOND)} == alone
    eng.close()


def test_with_no_free_slot_the_cached_prompt_is_taken_over() -> None:
    eng, _ = engine(slots=2, n_ctx=512, n_batch=64)
    slots = eng.model(MODEL).slots  # type: ignore[attr-defined]
    for prompt in (FIRST, SECOND):
        eng.infer(MODEL, prompt + "Q1?", GREEDY)
    before = slots.reused_prompt_tokens
    eng.infer(MODEL, FIRST + "Q2?", GREEDY)  # both slots hold caches: it takes its own over
    assert slots.reused_prompt_tokens - before >= len(FIRST)
    eng.close()
