"""Per-request control of LLM calls: allowed models, a token budget, fair admission, and cancellation.

`llmhost serve` gives its Host a `ScopedEngine` wrapping the real one. Each request runs its guest with its
`RequestScope` active (a context variable, set on the request's worker thread, where every host function the
guest calls runs), so every generation the guest starts — `infer`, `infer-stream`, a sequence's generation — is
registered with the request. Cancelling the scope (client disconnected, deadline passed, server stopping) cancels
them all: a generation between steps stops at once, one in the middle of a decode step stops right after it
(so within one decode step), and a generation waiting for admission stops waiting.

Admission: a generation takes one of its model's `slots` places before its first step, in arrival order
(`FairQueue`), so requests are served first come, first served and none starves; steps of admitted generations
interleave token by token under the engine's model lock. This queue is where continuous batching plugs in.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..engine.base import Engine, Generation, TokenSequence, collect
from ..types import (
    EmbeddingsResult,
    EngineError,
    InferenceResult,
    InferencingParams,
    InvalidInput,
    ModelInfo,
    StreamDone,
    StreamEvent,
)
from . import policy
from .config import ComponentSettings

_current: ContextVar[RequestScope | None] = ContextVar("llmhost_serve_request", default=None)


class RequestScope:
    """One request's LLM calls: its component's allowed models and token budget, the generations it has open,
    the tokens generated so far, and whether it was cancelled (and why)."""

    def __init__(self, component: ComponentSettings) -> None:
        self.component = component
        self._lock = threading.Lock()
        self._generations: set[ScopedGeneration] = set()
        self._wakers: set[threading.Event] = set()
        self._cancelled: str | None = None
        self._tokens = 0

    @contextmanager
    def active(self) -> Iterator[None]:
        """Make this the scope of the LLM calls made on this thread (the request's worker thread)."""
        token = _current.set(self)
        try:
            yield
        finally:
            _current.reset(token)

    @property
    def tokens(self) -> int:
        with self._lock:
            return self._tokens

    @property
    def cancelled(self) -> str | None:
        with self._lock:
            return self._cancelled

    def cancel(self, reason: str) -> None:
        """Cancel every generation of this request, now and from now on; `reason` is what the guest is told."""
        with self._lock:
            if self._cancelled is not None:
                return
            self._cancelled = reason
            generations, wakers = list(self._generations), list(self._wakers)
        for event in wakers:
            event.set()
        for generation in generations:
            generation.cancel(reason)

    def check(self) -> None:
        reason = self.cancelled
        if reason is not None:
            raise EngineError(reason)

    def check_model(self, model: str) -> None:
        allowed = self.component.allowed_models
        if allowed is not None and model not in allowed:
            key = self.component.key(f"components.{self.component.name}.{policy.ALLOWED_MODELS_KEY}")
            raise InvalidInput(
                f"model {model!r} is not allowed for component {self.component.name!r} "
                f"(allowed: {', '.join(sorted(allowed)) or 'none'}); add it to {key}"
            )

    def clamp(self, params: InferencingParams) -> InferencingParams:
        """`params` with `max-tokens` no larger than what is left of the request's token budget."""
        limit = self.component.limits.max_tokens
        left = limit - self.tokens
        if left <= 0:
            raise InvalidInput(
                f"this request has generated its limit of {limit} tokens ({self.component.limit_key('max_tokens')})"
            )
        if params.max_tokens is not None and params.max_tokens <= left:
            return params
        return params.model_copy(update={"max_tokens": left})

    def add_tokens(self, count: int) -> None:
        with self._lock:
            self._tokens += count

    def attach(self, generation: ScopedGeneration) -> None:
        with self._lock:
            cancelled = self._cancelled
            if cancelled is None:
                self._generations.add(generation)
        if cancelled is not None:
            generation.cancel(cancelled)

    def detach(self, generation: ScopedGeneration) -> None:
        with self._lock:
            self._generations.discard(generation)

    def wait(self, event: threading.Event) -> None:
        """Wait for `event`, or until this scope is cancelled (then return early; the caller checks)."""
        with self._lock:
            if self._cancelled is not None:
                return
            self._wakers.add(event)
        try:
            event.wait()
        finally:
            with self._lock:
                self._wakers.discard(event)


def current_scope() -> RequestScope | None:
    return _current.get()


class _Waiter:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.granted = False


class FairQueue:
    """`capacity` places, handed out strictly in arrival order: a newcomer never overtakes a waiter."""

    def __init__(self, capacity: int) -> None:
        self._free = capacity
        self._waiters: deque[_Waiter] = deque()
        self._lock = threading.Lock()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiters)

    def acquire(self, scope: RequestScope | None) -> None:
        """Take a place, waiting in line. Raises `EngineError` if `scope` is cancelled while waiting."""
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            waiter = _Waiter()
            self._waiters.append(waiter)
        if scope is None:
            waiter.event.wait()
        else:
            scope.wait(waiter.event)
        with self._lock:
            if not waiter.granted:
                self._waiters.remove(waiter)
        if not waiter.granted:
            assert scope is not None
            scope.check()
            raise EngineError("cancelled while waiting for a sequence slot")

    def release(self) -> None:
        with self._lock:
            if self._waiters:
                waiter = self._waiters.popleft()
                waiter.granted = True
                waiter.event.set()
            else:
                self._free += 1


class ScopedGeneration:
    """A generation registered with its request: admitted in turn before its first step, cancellable from any
    thread, counting its tokens into the request's total."""

    def __init__(self, inner: Generation, admission: FairQueue | None, scope: RequestScope | None) -> None:
        self._inner = inner
        self._admission = admission
        self._scope = scope
        self._lock = threading.Lock()
        self._admitted = False
        self._busy = False  # a step is running on the request's thread
        self._closed = False
        self._released = False
        self._cancelled: str | None = None
        self._counted = 0
        if scope is not None:
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
            if self._admission is not None and not self._admitted:
                self._admission.acquire(self._scope)
                self._admitted = True
            try:
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
        self._count(event)
        if self._cancelled is not None:  # cancelled during the step: the step's result is not wanted
            raise EngineError(self._cancelled)
        if isinstance(event, StreamDone):
            self.close()
        return event

    def _count(self, event: StreamEvent) -> None:
        generated = event.usage.generated_token_count
        if self._scope is not None and generated > self._counted:
            self._scope.add_tokens(generated - self._counted)
        self._counted = max(self._counted, generated)

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
            if self._admitted and self._admission is not None:
                self._admitted = False
                self._admission.release()
            if self._scope is not None:
                self._scope.detach(self)


class ScopedSequence:
    """A guest's token sequence whose generations belong to the request (cancellable, counted). Sequences
    manage their own slots (swapping idle ones out), so their generations skip the admission queue."""

    def __init__(self, inner: TokenSequence, scope: RequestScope | None) -> None:
        self._inner = inner
        self._scope = scope

    def generate_stream(self, params: InferencingParams) -> Generation:
        if self._scope is not None:
            self._scope.check()
            params = self._scope.clamp(params)
        return ScopedGeneration(self._inner.generate_stream(params), None, self._scope)

    def generate(self, params: InferencingParams) -> InferenceResult:
        return collect(self.generate_stream(params))

    def fork(self) -> TokenSequence:
        return ScopedSequence(self._inner.fork(), self._scope)

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:  # text, token_ids, append, truncate, close, ...: unchanged
        return getattr(self._inner, name)


class ScopedEngine:
    """The serve engine: the real engine behind the current request's scope (see the module doc)."""

    def __init__(self, inner: Engine, slots: Mapping[str, int]) -> None:
        self._inner = inner
        self._admission = {model: FairQueue(count) for model, count in slots.items()}

    def _scope(self, model: str) -> RequestScope | None:
        scope = current_scope()
        if scope is not None:
            scope.check()
            scope.check_model(model)
        return scope

    def admission(self, model: str) -> FairQueue | None:
        return self._admission.get(model)

    def model_names(self) -> list[str]:
        return self._inner.model_names()

    def list_models(self) -> list[ModelInfo]:
        return self._inner.list_models()

    def model_info(self, model: str) -> ModelInfo:
        self._scope(model)
        return self._inner.model_info(model)

    def tokenize(self, model: str, text: str) -> list[int]:
        self._scope(model)
        return self._inner.tokenize(model, text)

    def stream(self, model: str, prompt: str, params: InferencingParams) -> Generation:
        scope = self._scope(model)
        if scope is not None:
            params = scope.clamp(params)
        return ScopedGeneration(self._inner.stream(model, prompt, params), self._admission.get(model), scope)

    def infer(self, model: str, prompt: str, params: InferencingParams) -> InferenceResult:
        return collect(self.stream(model, prompt, params))

    def embeddings(self, model: str, texts: list[str], check: Callable[[], None] | None = None) -> EmbeddingsResult:
        scope = self._scope(model)
        # Between chunks the call stops when the request is cancelled (disconnect, deadline, shutdown).
        return self._inner.embeddings(model, texts, scope.check if scope is not None else check)

    def open_sequence(self, model: str) -> TokenSequence:
        scope = self._scope(model)
        return ScopedSequence(self._inner.open_sequence(model), scope)

    def close(self) -> None:
        self._inner.close()
