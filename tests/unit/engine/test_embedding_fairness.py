"""Fair sharing of a model between embeddings and generations: the admission queue keeps each capacity's own
order (a generation never queues behind embeddings calls waiting for the embedding context), the pure rule for an
embeddings batch's turn (embedding.batch_wait), and both through a model on the fake decoder with 4 embeddings
clients looping while a stream runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from llmhost.config import ModelConfig
from llmhost.domain.limits import EMBEDDING_YIELD_S
from llmhost.domain.types import EmbeddingInput, EmbeddingsResult, InferencingParams, StreamChunk, StreamDone
from llmhost.engine.admission import SLOTS, AdmissionQueue, Ticket
from llmhost.engine.local.embedding import GENERATIONS_IDLE_S, TURN_POLL_S, BatchTurn, batch_wait
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import FakeDecoder
from llmhost.engine.local.model import EMBEDDING_CONTEXT, EngineModel

MODEL = "fake"

# -- the admission queue: each capacity in its own arrival order ----------------------------------------------


@given(st.lists(st.sampled_from([SLOTS, EMBEDDING_CONTEXT]), min_size=1, max_size=12), st.integers(0, 3))
def test_each_capacity_is_admitted_in_its_own_arrival_order(needs: list[str], slots: int) -> None:
    """Slots for `slots` tickets, and an embedding context that is busy: every slot ticket that fits is admitted,
    whatever embeddings tickets wait before it, in arrival order; no embeddings ticket is."""
    queue = AdmissionQueue(threading.RLock(), "the slots", "m.slots")
    free = {SLOTS: slots, EMBEDDING_CONTEXT: 0}
    admitted: list[int] = []

    def taker(index: int, need: str) -> Callable[[], bool]:
        def take() -> bool:
            if free[need] == 0:
                return False
            free[need] -= 1
            admitted.append(index)
            return True

        return take

    for index, need in enumerate(needs):
        queue.submit(Ticket("work", taker(index, need), needs=need))
    queue.admit()
    slot_tickets = [i for i, need in enumerate(needs) if need == SLOTS]
    assert admitted == slot_tickets[:slots]
    free[EMBEDDING_CONTEXT] = 1  # the context frees up: the first embeddings ticket takes it, and only that one
    queue.changed()
    embedding_tickets = [i for i, need in enumerate(needs) if need == EMBEDDING_CONTEXT]
    assert admitted == slot_tickets[:slots] + embedding_tickets[:1]
    # Nobody may enter directly past a ticket waiting for the same capacity; past one for another, it may.
    assert not queue.try_enter(lambda: True, SLOTS) or len(slot_tickets) <= slots
    assert not queue.try_enter(lambda: True, EMBEDDING_CONTEXT) or len(embedding_tickets) <= 1


# -- an embeddings batch's turn (pure) --------------------------------------------------------------------------


def turn(**changes: float | bool) -> BatchTurn:
    """A batch that would start 0.1 s after its previous one, which held the model 0.4 s, on a model alone."""
    fields: dict[str, float | bool] = {
        "waited_s": 0.1,
        "share_s": 0.4,
        "contended": False,
        "wants_step": False,
        "stepped": False,
        "idle_s": 0.0,
    }
    fields.update(changes)
    return BatchTurn(**fields)  # type: ignore[arg-type]


def test_a_batch_alone_starts_at_once() -> None:
    assert batch_wait(turn()) == 0.0
    assert batch_wait(turn(waited_s=0.0, share_s=0.0)) == 0.0


def test_a_thread_waiting_for_the_lock_and_a_generation_waiting_for_its_step_go_first() -> None:
    assert batch_wait(turn(contended=True)) == TURN_POLL_S
    assert batch_wait(turn(wants_step=True)) == TURN_POLL_S  # no step yet since the last batch
    assert batch_wait(turn(wants_step=True, waited_s=0.0, share_s=0.0)) == TURN_POLL_S  # a call's first batch too


def test_generations_then_get_as_long_as_the_last_batch_while_they_decode() -> None:
    waits = batch_wait(turn(wants_step=True, stepped=True))
    assert 0 < waits <= 0.3  # 0.3 s of its 0.4 s share left
    assert batch_wait(turn(wants_step=True, stepped=True, waited_s=0.4)) == 0.0  # share used
    assert batch_wait(turn(wants_step=True, stepped=True, idle_s=GENERATIONS_IDLE_S)) == 0.0  # they stopped decoding
    assert batch_wait(turn(wants_step=False, stepped=True)) == 0.0  # nothing more to decode


def test_a_batch_never_waits_longer_than_its_bound() -> None:
    for waited in (EMBEDDING_YIELD_S, 2.0):
        assert batch_wait(turn(waited_s=waited, contended=True)) == 0.0
        assert batch_wait(turn(waited_s=waited, wants_step=True)) == 0.0
    # A long batch's share bounds the wait instead (the generations get as long as it held the model).
    assert batch_wait(turn(waited_s=1.0, share_s=2.0, wants_step=True, stepped=True)) > 0


@given(
    st.floats(0, 3),
    st.floats(0, 3),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.floats(0, 1),
)
def test_batch_wait_is_bounded(waited: float, share: float, contended: bool, wants: bool, stepped: bool, idle: float):  # type: ignore[no-untyped-def]
    wait = batch_wait(BatchTurn(waited, share, contended, wants, stepped, idle))
    assert wait >= 0.0
    assert wait == 0.0 or waited + wait <= max(share, EMBEDDING_YIELD_S) + TURN_POLL_S


# -- through a model on the fake decoder -------------------------------------------------------------------------

BATCH_S = 0.03  # a fake embeddings decode call: it holds the model this long


class EmbeddingFakeDecoder(FakeDecoder):
    """The fake decoder with embeddings shaped as LlamaDecoder.embed's: `check()` before each decode call (one per
    text: a batch), each call under `lock`. Every batch and generation decode is logged in order."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.log: list[str] = []

    def decode(self, rows, logits_at):  # type: ignore[no-untyped-def]
        self.log.append("decode")
        return super().decode(rows, logits_at)

    def embed(
        self,
        texts: Sequence[EmbeddingInput],
        lock: threading.RLock,
        check: Callable[[], None] | None = None,
        shared: Callable[[], bool] | None = None,
    ) -> EmbeddingsResult:
        for _ in texts:
            if check is not None:
                check()
            with lock:
                self.log.append("batch-start")
                time.sleep(BATCH_S)
                self.log.append("batch-end")
        return EmbeddingsResult(embeddings=[[1.0, 0.0] for _ in texts], prompt_token_count=len(texts))


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_streams_first_token_waits_for_at_most_the_batch_under_way_with_4_embeddings_clients() -> None:
    decoder = EmbeddingFakeDecoder(n_ctx=128, n_batch=16, n_slots=2)
    config = ModelConfig(slots=2, context_length=128, batch_size=16, prefix_cache=False)
    engine = LlamaCppEngine({MODEL: config}, Path("/nonexistent"), load=lambda n, c: EngineModel(n, c, decoder))
    model = engine.model(MODEL)
    stop = threading.Event()
    calls: list[int] = []

    def client() -> None:
        while not stop.is_set():
            calls.append(len(engine.embeddings(MODEL, ["a long text"] * 4).embeddings))

    clients = [threading.Thread(target=client) for _ in range(4)]
    for thread in clients:
        thread.start()
    try:
        # One call runs, 3 wait for the context (read without the model lock, which would wait for a batch's end).
        wait_until(lambda: model.admission.waiting == 3 and len(calls) >= 1)
        time.sleep(BATCH_S / 2)  # into the batch under way
        decoder.log.append("submit")
        params = InferencingParams(max_tokens=32, temperature=0.0, repeat_penalty=1.0)
        stream = engine.stream(MODEL, "Once upon a time", params)
        events = list(stream)
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in clients)
    assert isinstance(events[-1], StreamDone) and any(isinstance(e, StreamChunk) for e in events)
    log = decoder.log[decoder.log.index("submit") :]
    first = log.index("decode")  # the prompt's decode, which samples the first token
    # Before it: at most the end of the batch under way when the stream came, and no other batch at all.
    assert log[:first].count("batch-end") <= 1 and log[:first].count("batch-start") == 0, log[: first + 1]
    # The embeddings clients went on while the stream ran, and after: every call answered.
    assert len(calls) >= 2 and all(n == 4 for n in calls)
    assert decoder.violations == []
    engine.close()
