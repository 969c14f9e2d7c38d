"""A slot freed inside a burst goes to the work queued for it at once (issue 68: `llmhost serve` at twice the slots
lost 5-10% to llama-server): a generation that takes its last token is reported and finished in that step, so the
next queued generation is admitted before another decode, and its reader is woken then, not at the burst's end."""

from __future__ import annotations

import threading
import time
from typing import Any

from llmhost.domain.types import StreamChunk
from llmhost.engine.local.fake_decoder import EOG

from .test_engine_fake import GREEDY, MODEL, engine, greedy_reference

WAIT_S = 5.0


def _prompts_without_early_end(decoder: Any, count: int, tokens: int) -> list[str]:
    """Prompts whose greedy continuation runs `tokens` tokens without end-of-generation (the fake ends sometimes)."""
    found = []
    for i in range(200):
        prompt = f"prompt {i}"
        if EOG not in greedy_reference(decoder, decoder.tokenize(prompt, True), tokens):
            found.append(prompt)
            if len(found) == count:
                return found
    raise AssertionError("no prompts without an early end")


def _read(stream: Any, into: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: into.extend(e.text for e in stream if isinstance(e, StreamChunk)))
    thread.start()
    return thread


def test_a_queued_generation_is_admitted_in_the_step_that_frees_its_slot() -> None:
    """Two slots, three streams: the third waits for a slot. When the short one takes its last token, the third
    is admitted before the next decode (no decode of the long one alone in between), in several runs where the
    short one ends at different points of a burst; every text still equals its stream run alone."""
    eng, decoder = engine(slots=2, n_ctx=160, n_batch=16)
    # Steps of 2 ms, not microseconds: readers keep up on a loaded machine (a reader far behind has its generation
    # skipped for a step, which is another path than the one measured here).
    decoder.step_s = 0.002
    model = eng.model(MODEL)  # type: ignore[attr-defined]
    long_tokens = 60
    short, long, queued = _prompts_without_early_end(decoder, 3, long_tokens)
    for short_tokens in (9, 14, 23):
        marks: dict[str, int] = {}
        params = {
            short: GREEDY.model_copy(update={"max_tokens": short_tokens}),
            long: GREEDY.model_copy(update={"max_tokens": long_tokens}),
            queued: GREEDY.model_copy(update={"max_tokens": 5}),
        }
        first, second = eng.stream(MODEL, short, params[short]), eng.stream(MODEL, long, params[long])
        heads = [next(first), next(second)]  # both admitted, one step each: every slot is busy
        take = first.take

        def last_taken(*args: Any, take: Any = take, marks: dict[str, int] = marks) -> bool:
            is_last: bool = take(*args)
            if is_last:
                marks.setdefault("short's last token", decoder.decodes)
            return is_last

        first.take = last_taken  # type: ignore[method-assign]
        third = eng.stream(MODEL, queued, params[queued])
        start = third.start

        def started(start: Any = start, marks: dict[str, int] = marks) -> None:
            marks["queued admitted"] = decoder.decodes
            start()

        third.start = started  # type: ignore[method-assign]
        texts: dict[str, list[str]] = {short: [], long: [], queued: []}
        readers = [_read(third, texts[queued])]
        deadline = time.monotonic() + WAIT_S
        while model.admission.waiting < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert model.admission.waiting == 1  # every slot is busy: the third stream waits for one
        readers += [_read(first, texts[short]), _read(second, texts[long])]
        for reader in readers:
            reader.join(timeout=WAIT_S)
        assert marks["queued admitted"] == marks["short's last token"], (short_tokens, marks)
        got = {short: heads[0].text + "".join(texts[short]), long: heads[1].text + "".join(texts[long])}  # type: ignore[union-attr]
        got[queued] = "".join(texts[queued])
        assert got == {p: eng.infer(MODEL, p, params[p]).text for p in got}
    assert decoder.violations == []
    eng.close()
