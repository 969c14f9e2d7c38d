"""Run scopes: everything one guest run or request opens is owned by its scope and closed with it.

A `RunScope` is the data of the run's wasmtime `Store` (as Spin keeps per-instance state in its store), so
every host function finds it from the store it is called with, and nothing a guest opens outlives its run:
when the run ends — normally, by trap, by deadline or by a disconnected client — `close()` cancels its
streams and closes its sequences (freeing their slots and saved KV state) at once, whatever handles the
guest kept in globals or lost in an exception's reference cycle.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.types import InferencingParams, StreamDone, StreamEvent, TokenLogprob, TopLogprob
from llmhost.engine.base import UNBOUNDED, Bounds
from llmhost.engine.remote.bounds import within_deadline

if TYPE_CHECKING:
    from llmhost.domain.types import BeamParams, InferenceResult
    from llmhost.engine.base import Generation, TokenSequence

T = TypeVar("T")


class HandleTable(Generic[T]):
    """Objects a guest holds, by the integer handle (`rep`) the guest sees. One type for streams, sequences
    and writers. `limit`/`limit_key`: how many may be open at once, and the config key that raises it."""

    def __init__(self, what: str, limit: int | None = None, limit_key: str = "") -> None:
        self._what = what
        self._limit = limit
        self._limit_key = limit_key
        self._items: dict[int, T] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def check_room(self) -> None:
        """Raise `InvalidInput` naming the quota key when no further handle may be opened."""
        with self._lock:
            full = self._limit is not None and len(self._items) >= self._limit
        if full:
            raise InvalidInput(
                f"this run already holds {self._limit} open {self._what}s, its limit (drop some first, or raise "
                f"`{self._limit_key}` in the config)"
            )

    def add(self, item: T) -> int:
        with self._lock:
            rep = next(self._ids)
            self._items[rep] = item
            return rep

    def get(self, rep: int) -> T:
        item = self.find(rep)
        if item is None:
            raise EngineError(f"this {self._what} was already dropped")
        return item

    def find(self, rep: int) -> T | None:
        with self._lock:
            return self._items.get(rep)

    def pop(self, rep: int) -> T | None:
        with self._lock:
            return self._items.pop(rep, None)

    def drain(self) -> list[T]:
        """Remove and return every item (the owner then closes them)."""
        with self._lock:
            items, self._items = list(self._items.values()), {}
        return items

    def values(self) -> list[T]:
        with self._lock:
            return list(self._items.values())


@dataclass(frozen=True)
class TokenBudget:
    """The most tokens all of a run's generations may produce together, and the config key that sets it."""

    limit: int
    key: str


class RunScope:
    """One run's or request's open handles, its cancellation and its token budget.

    The interfaces create the streams and sequences tables they use (`table`), so this module knows nothing
    about what they hold; `close()` closes each table once, idempotently. `cancel(reason)` stops every
    generation the run has running (a disconnected client, a passed deadline, a stopping server): each stops
    before its next decode step, and later calls fail with `reason`.
    """

    def __init__(self, name: str = "run", budget: TokenBudget | None = None) -> None:
        self.name = name
        self.budget = budget
        self._tables: dict[str, Any] = {}
        self._closers: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._generations: set[Any] = set()  # objects with cancel(reason): the run's running generations
        self._cancelled: str | None = None
        self._tokens = 0
        self.closed = False
        self._time_left: Callable[[], float | None] = lambda: None
        self._timers: list[threading.Timer] = []

    # -- deadline: host calls that wait on the outside world (outbound HTTP, a store) never wait past it ----------
    def set_time_left(self, time_left: Callable[[], float | None]) -> None:
        """How the run's owner tells its remaining time: seconds before the run is stopped (None: no deadline)."""
        self._time_left = time_left

    def set_deadline(self, ends: float, reason: str | None = None) -> None:
        """A fixed deadline, as `time.monotonic()` reads it (a run's `timeout-s`, a tool call's `deadline-s`).
        `reason`: the scope is cancelled with it at the deadline, as serve's scope is, so that a host call waiting
        then (a generation, a remote request) ends with it rather than outliving the run."""
        self.set_time_left(lambda: max(0.0, ends - time.monotonic()))
        if reason is not None:
            timer = threading.Timer(max(0.0, ends - time.monotonic()), self.cancel, args=(reason,))
            timer.daemon = True
            timer.start()
            with self._lock:
                self._timers.append(timer)

    def time_left(self) -> float | None:
        return self._time_left()

    def waiting(self) -> contextlib.AbstractContextManager[None]:
        """Around a host call that may wait on a server: its remote requests end by the run's deadline."""
        return within_deadline(self._time_left)

    # -- cancellation and budget ------------------------------------------------------------------------
    @property
    def cancelled(self) -> str | None:
        with self._lock:
            return self._cancelled

    @property
    def tokens(self) -> int:
        with self._lock:
            return self._tokens

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self._cancelled is not None:
                return
            self._cancelled = reason
            generations = list(self._generations)
        for generation in generations:
            generation.cancel(reason)

    def check(self) -> None:
        """Raise `EngineError` with the reason once the run was cancelled."""
        reason = self.cancelled
        if reason is not None:
            raise EngineError(reason)

    def clamp(self, params: InferencingParams) -> InferencingParams:
        """`params` with `max-tokens` no larger than what is left of the run's token budget."""
        self.check()
        if self.budget is None:
            return params
        left = self.budget.limit - self.tokens
        if left <= 0:
            raise InvalidInput(
                f"this request has generated its limit of {self.budget.limit} tokens ({self.budget.key})"
            )
        if params.max_tokens is not None and params.max_tokens <= left:
            return params
        return params.model_copy(update={"max_tokens": left})

    def add_tokens(self, count: int) -> None:
        with self._lock:
            self._tokens += count

    def spend(self, count: int) -> None:
        """Count `count` evaluated tokens (a score's continuations, a beam step) into the budget, once the run is
        not cancelled; `InvalidInput` naming the budget's key when they do not fit (nothing is counted then)."""
        self.check()
        with self._lock:
            if self.budget is not None and self._tokens + count > self.budget.limit:
                left = max(0, self.budget.limit - self._tokens)
                raise InvalidInput(
                    f"this needs {count} more tokens but the request has {left} of its {self.budget.limit} left "
                    f"({self.budget.key})"
                )
            self._tokens += count

    def bounds(self) -> Bounds:
        """What bounds this run's searches (cancellation, deadline, token budget)."""
        return Bounds(self.check, self.spend)

    def attach(self, generation: Any) -> None:
        with self._lock:
            cancelled = self._cancelled
            if cancelled is None:
                self._generations.add(generation)
        if cancelled is not None:
            generation.cancel(cancelled)

    def detach(self, generation: Any) -> None:
        with self._lock:
            self._generations.discard(generation)

    # -- handles --------------------------------------------------------------------------------------
    def table(self, key: str, create: Callable[[], Any], close: Callable[[Any], None], *, first: bool = False) -> Any:
        """The scope's table `key`, created on first use; `close(table)` runs when the scope closes, tables
        marked `first` before the others (streams before the sequences they generate on)."""
        with self._lock:
            if self.closed:
                raise EngineError(f"the {self.name} has ended")
            table = self._tables.get(key)
            if table is None:
                table = self._tables[key] = create()
                closer = lambda: close(table)  # noqa: E731
                if first:
                    self._closers.insert(0, closer)
                else:
                    self._closers.append(closer)
            return table

    def close(self) -> None:
        """Close everything the run still holds (idempotent). Never raises."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            closers, self._closers = self._closers, []
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
        for closer in closers:
            try:
                closer()
            except Exception:  # one failing close must not keep the others open
                logging.getLogger(__name__).exception("closing a run's handles failed")


class ScopedGeneration:
    """A generation owned by a run scope: cancellable from any thread (it stops before its next step), and
    counting its tokens into the run's budget."""

    def __init__(self, inner: Generation, scope: RunScope) -> None:
        self._inner = inner
        self._scope = scope
        self._lock = threading.Lock()
        self._busy = False  # a step is running on the reader's thread
        self._closed = False
        self._released = False
        self._cancelled: str | None = None
        self._counted = 0
        scope.attach(self)

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        with self._lock:
            if self._closed:
                if self._cancelled is not None:
                    raise EngineError(self._cancelled)
                raise StopIteration
            self._busy = True
        ended = True  # StopIteration or an error: the generation is over either way
        try:
            try:
                with self._scope.waiting():
                    event = next(self._inner)
            except StopIteration:
                if self._cancelled is not None:  # interrupted mid-step (a remote request): the cancel's error
                    raise EngineError(self._cancelled) from None
                raise
            ended = False
        finally:
            with self._lock:
                self._busy = False
                self._closed = self._closed or ended
                release = self._closed and not self._released
                self._released = self._released or release
            if release:
                self._release()
        generated = event.usage.generated_token_count
        if generated > self._counted:
            self._scope.add_tokens(generated - self._counted)
            self._counted = generated
        if self._cancelled is not None:  # cancelled during the step: its result is not wanted
            raise EngineError(self._cancelled)
        if isinstance(event, StreamDone):
            self.close()
        return event

    def close(self) -> None:
        self._stop(None)

    def cancel(self, reason: str) -> None:
        self._stop(reason)

    def _stop(self, reason: str | None) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cancelled = reason
            # While a step runs, the stepping thread releases right after it (within one decode step).
            release = not self._busy and not self._released
            self._released = self._released or release
            busy = self._busy
        if release:
            self._release()
        elif busy and reason is not None:
            # A remote generation's step waits on the network, not on a decode step: it can be interrupted from
            # this thread (its request is closed at once), and the stepping thread then releases as usual.
            interrupt = getattr(self._inner, "interrupt", None)
            if interrupt is not None:
                interrupt()

    def _release(self) -> None:
        try:
            self._inner.close()
        finally:
            self._scope.detach(self)


class ScopedSequence:
    """A sequence owned by a run scope: its generations are scoped (cancellable, counted, clamped to the
    budget); everything else is the sequence's own."""

    def __init__(self, inner: TokenSequence, scope: RunScope) -> None:
        self._inner = inner
        self._scope = scope

    def generate_stream(self, params: InferencingParams) -> Generation:
        return ScopedGeneration(self._inner.generate_stream(self._scope.clamp(params)), self._scope)

    def append(self, text: str) -> None:
        with self._scope.waiting():  # a remote model's sequence may tokenize on its server
            self._inner.append(text)

    def generate(self, params: InferencingParams) -> InferenceResult:
        from llmhost.engine.base import collect

        return collect(self.generate_stream(params))

    def fork(self) -> TokenSequence:
        self._scope.check()
        return ScopedSequence(self._inner.fork(), self._scope)

    def beam_search(self, params: BeamParams, bounds: Bounds = UNBOUNDED) -> list[tuple[TokenSequence, float]]:
        # No beam may outgrow what is left of the budget, and every token a step evaluates is counted into it.
        budget = self._scope.clamp(InferencingParams(max_tokens=params.max_tokens)).max_tokens or params.max_tokens
        if budget < params.max_tokens:
            params = params.model_copy(update={"max_tokens": budget})
        beams = self._inner.beam_search(params, self._scope.bounds())
        return [(ScopedSequence(beam, self._scope), score) for beam, score in beams]

    def score(self, continuations: list[str], bounds: Bounds = UNBOUNDED) -> list[float]:
        return self._inner.score(continuations, self._scope.bounds())

    def next_token_logprobs(self, top: int, bounds: Bounds = UNBOUNDED) -> list[TopLogprob]:
        return self._inner.next_token_logprobs(top, self._scope.bounds())

    def append_tokens_with_logprobs(
        self, tokens: list[int], top: int, bounds: Bounds = UNBOUNDED
    ) -> list[TokenLogprob | None]:
        return self._inner.append_tokens_with_logprobs(tokens, top, self._scope.bounds())

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:  # text, token_ids, append, truncate, close, ...: unchanged
        return getattr(self._inner, name)
