"""The admission queue (engine/admission.py): one FIFO per model for every kind of work, on its own and through a
model over the fake decoder (generations, score, beam search and next-token reads waiting for the same slots)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError, LlmError
from llmhost.domain.types import BeamParams, InferencingParams
from llmhost.engine.admission import AdmissionQueue, Ticket
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import FakeDecoder
from llmhost.engine.local.model import EngineModel

MODEL = "fake"


class Pool:
    """A capacity of `size` units that tickets take `need` of."""

    def __init__(self, size: int) -> None:
        self.free = size

    def taker(self, need: int, log: list[str], name: str):  # type: ignore[no-untyped-def]
        def take() -> bool:
            if self.free < need:
                return False
            self.free -= need
            log.append(name)
            return True

        return take


@given(st.lists(st.integers(1, 3), min_size=1, max_size=12), st.integers(3, 5))
def test_tickets_are_admitted_in_arrival_order_even_when_a_later_one_would_fit(needs: list[int], size: int) -> None:
    queue = AdmissionQueue(threading.RLock(), "the pool", "pool.size")
    pool = Pool(size)
    admitted: list[str] = []
    tickets = [Ticket("work", pool.taker(need, admitted, str(i))) for i, need in enumerate(needs)]
    for ticket in tickets:
        queue.submit(ticket)
    queue.admit()
    # Exactly the longest prefix that fits is admitted: nobody behind a ticket that does not fit yet overtakes it.
    fitting, total = 0, 0
    for need in needs:
        if total + need > size:
            break
        total, fitting = total + need, fitting + 1
    assert admitted == [str(i) for i in range(fitting)]
    assert len(queue) == len(needs) - fitting
    pool.free = 100  # everything frees up: the rest follow in order
    queue.changed()
    assert admitted == [str(i) for i in range(len(needs))] and len(queue) == 0


def test_a_head_that_waits_past_the_timeout_fails_with_one_message_naming_the_key() -> None:
    queue = AdmissionQueue(threading.RLock(), "all 2 sequence slots of m", "models.m.slots", timeout_s=10)
    failures: list[LlmError] = []
    ticket = Ticket("score", lambda: False, on_fail=failures.append, submitted_at=time.monotonic() - 11)
    queue.submit(ticket)
    queue.admit()
    assert len(failures) == 1 and ticket.error is failures[0] and len(queue) == 0
    assert "all 2 sequence slots of m stayed busy for 10 s" in failures[0].message
    assert "`models.m.slots`" in failures[0].message
    with pytest.raises(EngineError, match="models.m.slots"):
        queue.wait(Ticket("next-logits", lambda: False, submitted_at=time.monotonic() - 11))


def test_a_waiter_whose_run_is_cancelled_leaves_the_queue() -> None:
    queue = AdmissionQueue(threading.RLock(), "the pool", "pool.size")
    cancelled = threading.Event()

    def check() -> None:
        if cancelled.is_set():
            raise EngineError("the request was cancelled")

    errors: list[Exception] = []

    def waiter() -> None:
        try:
            queue.enter("score", lambda: False, check)
        except EngineError as error:
            errors.append(error)

    thread = threading.Thread(target=waiter)
    thread.start()
    while len(queue) == 0:
        time.sleep(0.01)
    cancelled.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and len(queue) == 0
    assert [str(e) for e in errors] == ["the request was cancelled"]


# -- through a model on the fake decoder --------------------------------------------------------------------


def engine(slots: int) -> tuple[LlamaCppEngine, FakeDecoder]:
    decoder = FakeDecoder(n_ctx=64, n_batch=16, n_slots=slots)
    config = ModelConfig(slots=slots, context_length=64, batch_size=16, prefix_cache=False)
    return LlamaCppEngine({MODEL: config}, Path("/nonexistent"), load=lambda n, c: EngineModel(n, c, decoder)), decoder


def wait_until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_every_kind_of_work_waits_in_one_queue_and_is_admitted_in_arrival_order() -> None:
    """With both slots held by generations, a generation, a score, a beam search, a next-token read and another
    generation arrive in that order: they wait in one FIFO and are admitted in arrival order as slots free, so no
    kind of work starves another (and each finishes)."""
    eng, decoder = engine(slots=2)
    model = eng.model(MODEL)
    params = InferencingParams(max_tokens=40, temperature=0.0, repeat_penalty=1.0)
    holders = [eng.stream(MODEL, f"hold {i}", params) for i in range(2)]
    for holder in holders:
        next(holder)  # admitted and generating: both slots busy
    sequences = [eng.open_sequence(MODEL) for _ in range(3)]
    for seq in sequences:
        seq.append("Once upon")
    short = params.model_copy(update={"max_tokens": 2})
    works = [
        ("generation", lambda: eng.infer(MODEL, "first", short)),
        ("score", lambda: sequences[0].score(["a", "b"])),  # one-token continuations: no forks
        ("beam-search", lambda: [b.close() for b, _ in sequences[1].beam_search(BeamParams(width=1, max_tokens=2))]),
        ("next-logits", lambda: sequences[2].next_logits()),  # type: ignore[attr-defined]
        ("generation", lambda: eng.infer(MODEL, "second", short)),
    ]
    done: list[str] = []
    threads = []
    for kind, work in works:
        thread = threading.Thread(target=lambda k=kind, w=work: (w(), done.append(k)))
        thread.start()
        threads.append(thread)
        queued = len(threads)
        wait_until(lambda n=queued: len(model.admission) == n)  # queued, in this order
    assert model.admission.kinds() == [kind for kind, _ in works]
    model.admission.admitted.clear()
    for holder in holders:
        holder.close()  # the slots free up: the queue drains
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert sorted(done) == sorted(kind for kind, _ in works) and len(model.admission) == 0
    # Admitted in arrival order (a beam search's later forks queue again at the tail, after the others).
    first_seen: list[str] = []
    for kind in model.admission.admitted:
        if kind != "direct" and (kind not in first_seen or kind == "generation"):
            first_seen.append(kind)
    assert first_seen[:5] == [kind for kind, _ in works]
    for seq in sequences:
        seq.close()
    wait_until(lambda: model.slots.available == 2)
    assert decoder.violations == []
    eng.close()
