"""A slot freed inside a burst goes to the work queued for it at once (issue 68: `llmhost serve` at twice the slots
lost 5-10% to llama-server): a generation that takes its last token is reported and finished in that step, so the
next queued generation is admitted before another decode, and its reader is woken then, not at the burst's end."""

from __future__ import annotations

import threading
import time
from typing import Any

from llmhost.domain.types import StreamChunk, StreamDone
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


def _mark_last_token(stream: Any, decoder: Any, marks: dict[str, int], key: str) -> None:
    """Record in `marks[key]` the decodes run when `stream`'s generation takes its last token."""
    take = stream.take

    def last_taken(*args: Any) -> bool:
        is_last: bool = take(*args)
        if is_last:
            marks.setdefault(key, decoder.decodes)
        return is_last

    stream.take = last_taken


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
        _mark_last_token(first, decoder, marks, "short's last token")
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


class _Watched:
    """A reader's condition that records, at each wake-up, the decodes so far and whether its job was finished."""

    def __init__(self, condition: threading.Condition, decoder: Any, job: Any, wakes: list[tuple[int, bool]]) -> None:
        self._condition, self._decoder, self._job, self._wakes = condition, decoder, job, wakes

    def notify(self) -> None:
        self._wakes.append((self._decoder.decodes, self._job.ended))
        self._condition.notify()

    def wait(self, timeout: float | None = None) -> bool:
        return self._condition.wait(timeout)


def test_the_reader_of_a_generation_that_ends_inside_a_burst_is_woken_then_after_its_finish() -> None:
    """A stream that takes its last token inside a burst wakes its reader in that step, not at the burst's end (its
    client's next request comes sooner), and only once the generation is finished (a reader that goes on with the
    sequence finds it rewound and the slot handed on)."""
    eng, decoder = engine(slots=3, n_ctx=240, n_batch=16)
    decoder.step_s = 0.002
    short, long, other = _prompts_without_early_end(decoder, 3, 60)
    for short_tokens in (9, 14, 23):
        marks: dict[str, int] = {}
        first = eng.stream(MODEL, short, GREEDY.model_copy(update={"max_tokens": short_tokens}))
        longer = [eng.stream(MODEL, p, GREEDY.model_copy(update={"max_tokens": 60})) for p in (long, other)]
        _mark_last_token(first, decoder, marks, "last token")
        wakes: list[tuple[int, bool]] = []
        first._ready = _Watched(first._ready, decoder, first, wakes)  # type: ignore[attr-defined]
        events: list[Any] = []
        readers = [_read(stream, []) for stream in longer]
        readers.append(threading.Thread(target=lambda first=first, events=events: events.extend(first)))
        readers[-1].start()
        for reader in readers:
            reader.join(timeout=WAIT_S)
        assert isinstance(events[-1], StreamDone)
        after_last = [wake for wake in wakes if wake[0] >= marks["last token"]]
        # Woken in the very step that took its last token, and never before its finish from then on.
        assert after_last and after_last[0] == (marks["last token"], True), (short_tokens, marks, wakes)
    eng.close()
