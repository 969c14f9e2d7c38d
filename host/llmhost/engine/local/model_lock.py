"""The model's lock: a reentrant lock that knows whether another thread waits for it; and `EmbeddingTurns`, the
same lock as an embeddings call takes it for each of its decode calls, in turn with the generations.

The scheduler's bursts (planning.BURST_STEPS decode steps in a row, under this lock) end after the step under way
when anyone else needs the model: a new generation, a cancellation, an append, embeddings. Without this, they would
wait for the whole burst.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from llmhost.engine.local.embedding import TURN_POLL_S, BatchTurn, batch_wait


class ModelLock:
    """`threading.RLock`, plus `contended`: whether some thread is blocked acquiring it. It works with
    `threading.Condition` as an RLock does (its wait releases every level of a nested hold)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # One entry per blocked thread: list appends and pops are atomic under the GIL, where `+= 1` is not.
        self._blocked: list[None] = []

    @property
    def contended(self) -> bool:
        return bool(self._blocked)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(False):
            return True
        if not blocking:
            return False
        self._blocked.append(None)
        try:
            return self._lock.acquire(True, timeout)
        finally:
            self._blocked.pop()

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    # What threading.Condition uses of an RLock (its wait releases all levels, then restores them).
    def _release_save(self) -> Any:
        return self._lock._release_save()  # type: ignore[attr-defined]

    def _acquire_restore(self, state: Any) -> None:
        self._blocked.append(None)
        try:
            self._lock._acquire_restore(state)  # type: ignore[attr-defined]
        finally:
            self._blocked.pop()

    def _is_owned(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined]


class Steps(Protocol):
    """What `EmbeddingTurns` reads of a model's scheduler (scheduler.Scheduler)."""

    attempts: int  # steps tried so far

    def wants_step(self) -> bool: ...


class SharedModel(Protocol):
    """What `EmbeddingTurns` uses of a model (model.EngineModel)."""

    lock: ModelLock
    decoding: bool  # inside a generation's decode now
    decode_seconds: float  # the generations' decode time so far
    embedding_batches: int

    @property
    def scheduler(self) -> Steps: ...


class EmbeddingTurns:
    """The lock an embeddings call holds around each of its decode calls (a batch; LlamaDecoder.embed's `lock`):
    the model's, taken when embedding.batch_wait says it is the batch's turn. The generations sharing the model
    then get their first token after at most the batch under way, and about half of the model while embeddings
    run. Looked at without the lock (a waiting batch never ends a generation's burst), then once more under it:
    a generation submitted in between is seen there. Counts the batches (`EngineModel.embedding_batches`)."""

    def __init__(self, model: SharedModel) -> None:
        self._model = model
        self._ended = time.monotonic()  # when the previous batch ended (the call was admitted, for the first)
        self._held_s = 0.0  # how long the previous batch held the model
        self._attempts = model.scheduler.attempts  # the scheduler's step attempts when the previous batch ended
        self._started = 0.0

    def __enter__(self) -> None:
        model = self._model
        lock = model.lock
        if lock._is_owned():  # taken already by this thread: no turn to give away
            lock.acquire()
            self._started = time.monotonic()
            return
        progress_at, decoded = self._ended, model.decode_seconds
        while True:
            now = time.monotonic()
            if model.decoding or model.decode_seconds != decoded:
                progress_at, decoded = now, model.decode_seconds
            turn = self._turn(now, now - progress_at)
            wait = batch_wait(turn)
            if wait == 0.0:
                lock.acquire()
                if batch_wait(self._turn(now, turn.idle_s)) == 0.0:  # still, after what changed before it was taken
                    break
                lock.release()
                wait = TURN_POLL_S
            time.sleep(wait)
        self._started = time.monotonic()

    def _turn(self, now: float, idle_s: float) -> BatchTurn:
        scheduler = self._model.scheduler
        return BatchTurn(
            waited_s=now - self._ended,
            share_s=self._held_s,
            contended=self._model.lock.contended,
            wants_step=scheduler.wants_step(),
            stepped=scheduler.attempts != self._attempts,
            idle_s=idle_s,
        )

    def __exit__(self, *exc: object) -> None:
        model = self._model
        self._ended = time.monotonic()
        self._held_s = self._ended - self._started
        self._attempts = model.scheduler.attempts
        model.embedding_batches += 1
        model.lock.release()
