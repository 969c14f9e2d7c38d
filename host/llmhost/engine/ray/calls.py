"""Calls from the host to a model's replicas: bounded waits, Ray's failures as `LlmError`s, and streams.

Every wait looks at the run (`check()`: cancelled, past its deadline) at least every `POLL_S`; a replica that is lost
(its node gone) ends the call with a `runtime-error` naming it. A stream that loses its replica before any token
reached the caller starts again on another one, transparently."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ray.exceptions import RayError
from ray.serve.exceptions import RayServeException

from llmhost.domain.errors import EngineError, LlmError
from llmhost.domain.types import StreamDone, StreamEvent
from llmhost.engine.ray.protocol import LOST, Outcome

POLL_S = 0.25
# Attempts to start a stream, or make a call, when its replica is lost before answering.
START_ATTEMPTS = 3
RAY_FAILURES: tuple[type[BaseException], ...] = (RayError, RayServeException)


def never() -> None:
    return None


class ReplicaLost(EngineError):
    """The replica serving a call is gone (its node lost, its actor killed): the call may go to another one. A
    `runtime-error` to guests, as any `EngineError`."""


def lost(model: str, replica: str, error: BaseException) -> ReplicaLost:
    who = f"Ray replica {replica}" if replica else "its Ray replica"
    return ReplicaLost(
        f"model {model!r}: {who} was lost ({type(error).__name__}); the next call goes to another replica"
    )


def wait(response: Any, model: str, check: Callable[[], None] = never, replica: str = "") -> Outcome:
    """A `DeploymentResponse`'s outcome, looking at the run while waiting; cancelled when the run ends."""
    while True:
        try:
            check()
        except LlmError:
            response.cancel()
            raise
        try:
            outcome: Outcome = response.result(timeout_s=POLL_S)
            return outcome
        except TimeoutError:
            continue
        except RAY_FAILURES as e:
            raise lost(model, replica, e) from None


def call(start: Callable[[], Any], model: str, check: Callable[[], None] = never) -> Outcome:
    """`start()` sends the call; a replica lost before it answered is replaced by another (Ray routes the retry)."""
    for attempt in range(START_ATTEMPTS):
        try:
            return wait(start(), model, check)
        except ReplicaLost:  # not the run's own end (cancelled, past its deadline): that is raised as it is
            if attempt == START_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def value(outcome: Outcome) -> Any:
    if outcome.error is not None:
        raise outcome.error
    return outcome.value


class RayGeneration:
    """A generation on a replica: `StreamChunk`s then one `StreamDone`, as a local generation's.

    `start(rebuild)` sends the stream request (`rebuild`: with the sequence's tokens, for a replica that answered
    `LOST`); its first item says whether the replica accepted it (invalid input raises here, before any token).
    `on_tokens(tokens, replica)` gets a sequence's token ids with the done event, and the replica that holds it."""

    def __init__(
        self,
        model: str,
        start: Callable[[bool], Any],
        on_tokens: Callable[[list[int], str], None] | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self._model = model
        self._start = start
        self._on_tokens = on_tokens
        self._on_end = on_end
        self._events: deque[StreamEvent] = deque()
        self._stream: Any = None
        self._iterator: Iterator[Outcome] | None = None
        self.replica = ""
        self._delivered = False  # a token reached the caller: the stream can no longer start again
        self._ended = False
        self._lock = threading.Lock()
        self._open()

    def _open(self) -> None:
        rebuild = False
        for attempt in range(START_ATTEMPTS):
            self._stream = self._start(rebuild)
            self._iterator = iter(self._stream)
            try:
                first = next(self._iterator)
            except RAY_FAILURES as e:
                if attempt == START_ATTEMPTS - 1:
                    self._end()
                    raise lost(self._model, self.replica, e) from None
                continue
            except StopIteration:
                self._end()
                raise EngineError(f"model {self._model!r}: its Ray replica ended a stream before it began") from None
            self.replica = first.replica
            if first.error is not None:
                self._end()
                raise first.error
            if first.value == LOST:  # the sequence's replica is gone: this one rebuilds it from its tokens
                rebuild = True
                continue
            return
        self._end()
        raise EngineError(f"model {self._model!r}: no Ray replica could take the stream")

    def __iter__(self) -> RayGeneration:
        return self

    def __next__(self) -> StreamEvent:
        if self._events:
            return self._take()
        if self._ended:
            raise StopIteration
        assert self._iterator is not None
        try:
            outcome = next(self._iterator)
        except StopIteration:
            self._end()
            raise EngineError(f"model {self._model!r}: Ray replica {self.replica} ended a stream early") from None
        except RAY_FAILURES as e:
            if self._delivered or self._ended:
                self._end()
                raise lost(self._model, self.replica, e) from None
            self._open()  # nothing reached the caller yet: the same request again, on a replica that lives
            return next(self)
        if outcome.error is not None:
            self._end()
            raise outcome.error
        self._events.extend(outcome.value)
        if outcome.tokens is not None and self._on_tokens is not None:
            self._on_tokens(outcome.tokens, outcome.replica)
        return self._take()

    def _take(self) -> StreamEvent:
        event = self._events.popleft()
        self._delivered = True
        if isinstance(event, StreamDone):
            self._end()
        return event

    def close(self) -> None:
        with self._lock:
            running = not self._ended and self._stream is not None
        if running:
            self._stream.cancel()  # the replica's generation ends at its next token
        self._end()

    def _end(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        if self._on_end is not None:
            self._on_end()
