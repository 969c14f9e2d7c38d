"""A remote generation: the server's stream through our own stop matcher and usage counting."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from llmhost.domain.errors import EngineError, LlmError
from llmhost.domain.types import FinishReason, StreamChunk, StreamDone, StreamEvent, Usage
from llmhost.engine.generation import GenerationText
from llmhost.engine.remote.client import RemoteModel, _cause

log = logging.getLogger(__name__)


class RemoteGeneration:
    """One streamed completion. The request starts on the first `next()` (so admission bounds it) and is closed
    as soon as the result is certain, on `close()` (from any thread: cancellation, deadline), or on an error."""

    def __init__(
        self,
        model: RemoteModel,
        body: dict[str, Any],
        state: GenerationText,
        on_end: Callable[[RemoteGeneration], None] | None = None,
    ) -> None:
        self._model = model
        self._body = body
        self.state = state
        self._on_end = on_end
        self._lock = threading.Lock()
        self._stream: Any = None
        self._chunks: Iterator[Any] | None = None
        self._url = ""
        self._holds_slot = False
        self._closed = False
        self._finished = False  # the done event was returned
        self._done: StreamDone | None = None
        self.server_usage: Any = None
        self.cached_tokens: int | None = None
        self.read_to_end = False

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if self._finished or self._closed:
            raise StopIteration
        try:
            if self._chunks is None:
                self._start()
            while self._done is None:
                event = self._step()
                if event is not None:
                    return event
        except LlmError:
            self.close()
            raise
        self._finished = True
        self.close()
        return self._done

    def _start(self) -> None:
        self._model.acquire()
        self._holds_slot = True
        body = dict(self._body)
        url, stream = self._model.call("the completion request", lambda client: client.completions.create(**body))
        with self._lock:
            self._url, self._stream = url, stream
            if self._closed:  # closed while connecting
                stream.close()
                raise StopIteration
        self._chunks = iter(stream)

    def _step(self) -> StreamEvent | None:
        """Read one chunk; returns the event it makes certain, if any (`_done` is set when it ends)."""
        assert self._chunks is not None
        state = self.state
        try:
            chunk = next(self._chunks)
        except StopIteration:
            if state.finish_reason is None:
                raise EngineError(
                    f"the stream from {self._url} was cut mid-way: it ended before a finish reason"
                ) from None
            self.read_to_end = True
            self._finish_done()
            return None
        except LlmError:
            raise
        except Exception as e:  # noqa: BLE001 - any transport failure mid-stream ends the generation
            if self._closed:
                raise StopIteration from None
            raise EngineError(f"the stream from {self._url} was cut mid-way: {_cause(e) or type(e).__name__}") from None
        if getattr(chunk, "usage", None) is not None:
            self.server_usage = chunk.usage
            details = getattr(chunk.usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", None) if details is not None else None
            self.cached_tokens = int(cached) if cached is not None else None
        if state.finish_reason is not None or not chunk.choices:
            return None  # the finish came already: only usage may follow
        choice = chunk.choices[0]
        event: StreamEvent | None = None
        if choice.text:
            used = state.prompt_token_count + len(state.token_ids) + 1
            step = state.on_token(
                0, choice.text.encode(), end_of_generation=False, context_full=used >= self._model.config.context_length
            )
            event = _without_ids(step.chunk)
            if step.finish is not None and state.stopped_by_sequence:
                # Certain now, and the server would go on: close the request at once (usage counted here).
                self._finish_done()
                return event
            if step.finish is not None:
                # The token budget (or the context) is spent: the server, given the same limit, ends right
                # after this, so its final chunks are read for its usage.
                return event
        if choice.finish_reason is not None:
            if choice.finish_reason == "length":
                step = state.end(FinishReason.LENGTH)
            else:  # "stop": end-of-generation (we never send stop strings), whose token counts as generated
                step = state.on_token(0, b"", end_of_generation=True, context_full=False)
            late = _without_ids(step.chunk)
            if isinstance(event, StreamChunk) and late is not None:
                event = event.model_copy(update={"text": event.text + late.text, "usage": late.usage})
            else:
                event = event or late
        return event

    def _finish_done(self) -> None:
        state = self.state
        usage = state.usage
        server = self.server_usage
        if self.read_to_end and server is not None:
            usage = Usage(
                prompt_token_count=int(server.prompt_tokens), generated_token_count=int(server.completion_tokens)
            )
        assert state.finish_reason is not None
        self._done = StreamDone(finish_reason=state.finish_reason, usage=usage)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):  # already broken: nothing more to release
                stream.close()  # closes the connection: the server cancels the request
        if self._holds_slot:
            self._holds_slot = False
            self._model.release()
        if self._on_end is not None:
            self._on_end(self)

    interrupt = close  # serve's scope calls this to cancel from another thread while a step waits on the network


def _without_ids(chunk: Any) -> Any:
    """Remote chunks carry no token ids (the completions stream reports text only)."""
    return None if chunk is None else chunk.model_copy(update={"token_ids": ()})
