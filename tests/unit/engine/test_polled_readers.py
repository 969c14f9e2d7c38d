"""Readers that poll (the asyncio API, issue 58): a generation read with `watch` + `poll` gives what next() gives, is
stepped by the model's background thread (poll itself never steps nor waits), wakes its reader through `notify`,
and, closed while running, stops at once and frees its slot. On the fake decoder."""

from __future__ import annotations

import threading
import time

import pytest

from llmhost.domain.errors import EngineError
from llmhost.domain.types import StreamChunk, StreamDone, StreamEvent

from .test_engine_fake import GREEDY, MODEL, engine


def read_polled(generation: object, timeout_s: float = 10.0) -> tuple[list[StreamEvent], int]:
    """Every event, polling whenever `notify` fires; returns them and how many notices came."""
    woken = threading.Event()
    notices = 0

    def notify() -> None:
        nonlocal notices
        notices += 1
        woken.set()

    generation.watch(notify)  # type: ignore[attr-defined]
    events: list[StreamEvent] = []
    deadline = time.monotonic() + timeout_s
    while not events or not isinstance(events[-1], StreamDone):
        woken.clear()
        event = generation.poll()  # type: ignore[attr-defined]
        if event is None:
            assert woken.wait(max(0.0, deadline - time.monotonic())), "no notice came"
        else:
            events.append(event)
    return events, notices


@pytest.mark.parametrize("overlap", [False, True])
def test_a_polled_generation_gives_what_next_gives(overlap: bool) -> None:
    eng, _ = engine(n_ctx=96, overlap=overlap)
    params = GREEDY.model_copy(update={"max_tokens": 20})
    expected = list(eng.stream(MODEL, "Hello", params))
    events, notices = read_polled(eng.stream(MODEL, "Hello", params))
    text = lambda evs: "".join(e.text for e in evs if isinstance(e, StreamChunk))  # noqa: E731
    assert text(events) == text(expected)
    assert events[-1] == expected[-1]
    assert notices >= 1
    eng.close()


def test_polled_and_blocking_readers_share_steps() -> None:
    eng, _ = engine(slots=4, n_ctx=96)
    params = GREEDY.model_copy(update={"max_tokens": 16})
    alone = list(eng.stream(MODEL, "Hi", params))
    results: list[list[StreamEvent]] = []
    blocking = threading.Thread(target=lambda: results.append(list(eng.stream(MODEL, "Hi", params))))
    blocking.start()
    polled, _ = read_polled(eng.stream(MODEL, "Hi", params))
    blocking.join(10)
    assert polled[-1] == alone[-1] and results[0][-1] == alone[-1]
    eng.close()


def test_closing_a_polled_generation_stops_it_and_frees_its_slot() -> None:
    eng, _ = engine(slots=1, n_ctx=96)
    model = eng.model(MODEL)
    generation = eng.stream(MODEL, "Hello", GREEDY.model_copy(update={"max_tokens": 80}))
    woken = threading.Event()
    generation.watch(woken.set)
    while generation.poll() is None:
        assert woken.wait(10)
        woken.clear()
    generation.close()
    assert not model.scheduler._active and model.slots.busy == 0
    with pytest.raises(StopIteration):
        generation.poll()
    # The slot is free for the next generation.
    assert isinstance(list(eng.stream(MODEL, "Hi", GREEDY))[-1], StreamDone)
    eng.close()


def test_a_closed_model_ends_a_polled_reader() -> None:
    eng, _ = engine(n_ctx=96)
    generation = eng.stream(MODEL, "Hello", GREEDY.model_copy(update={"max_tokens": 80}))
    woken = threading.Event()
    generation.watch(woken.set)
    eng.model(MODEL).scheduler.stop()
    with pytest.raises(EngineError):
        while True:
            if generation.poll() is None:
                assert woken.wait(10)
                woken.clear()
