"""A remote generation: the server's stream through our own stop matcher and usage counting."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from llmhost.domain.errors import EngineError, LlmError
from llmhost.domain.types import FinishReason, StreamChunk, StreamDone, StreamEvent, TokenLogprob, TopLogprob, Usage
from llmhost.engine.generation import GenerationText, merge_chunks
from llmhost.engine.remote.bounds import Alarm, arm, call_ends, shut, socket_of
from llmhost.engine.remote.client import RemoteModel, root_cause

log = logging.getLogger(__name__)

_MAX_TAIL_BYTES = 64 * 1024  # what is read after `[DONE]` to end a body cleanly (its last chunk: a few bytes)
_TAIL_S = 2.0  # the most a result waits for the rest of a stream that ends there (`ends_as_sent`)
_ID_PREFIX = "token_id:"  # a token as `return_tokens_as_token_ids` names it


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
        # The bound on the host call under way (`bounds.call_ends`): at its end the watchdog shuts the socket down.
        self._ends = (0.0, False)
        self._socket: Any = None
        self._alarm: Alarm | None = None
        self._timed_out = False
        self._drained = False  # the body was read on after [DONE] (a time-out there cuts no result)
        # The result is certain and the server ends there too (`ends_as_sent`): what it still sends (its finish,
        # usage, [DONE]) is read by this time at the latest; whatever happens then, the result stands.
        self._tail_ends = math.inf
        # Logprobs asked for: the server names each token by its id, fed here one by one (exact ids and counts).
        self._by_ids = "logprobs" in body

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if self._finished or self._closed:
            raise StopIteration
        try:
            # Each step (a host call on the stream) ends by the run's deadline, else within
            # `read-timeout-s`, whatever the server sends meanwhile (keep-alives, empty chunks, a byte at a time).
            self._ends = call_ends(self._model.config.read_timeout_s)
            if self._chunks is None:
                self._start()
            else:
                self._alarm = arm(min(self._ends[0], self._tail_ends), self._time_up)
            while self._done is None:
                event = self._step()
                if event is not None:
                    return event
        except LlmError:
            self.close()
            raise
        finally:
            # Between host calls nothing waits on the server: no bound runs (the stream's idle limit applies).
            if self._alarm is not None:
                self._alarm.disarm()
        self._finished = True
        self.close()
        return self._done

    def _start(self) -> None:
        self._model.acquire()
        self._holds_slot = True
        body = dict(self._body)
        url, stream = self._model.call(
            "the completion request", lambda client: client.completions.create(**body), self._ends
        )
        with self._lock:
            self._url, self._stream = url, stream
            self._socket = socket_of(getattr(stream, "response", None))
            self._end_body_cleanly(getattr(stream, "response", None))
            if self._closed:  # closed while connecting
                stream.close()
                raise StopIteration
            self._alarm = arm(self._ends[0], self._time_up)
        self._chunks = iter(stream)

    def _end_body_cleanly(self, response: Any) -> None:
        """The official client closes a stream's response at `data: [DONE]`, before the body's last (chunked) piece:
        the server then sees a client that left mid-response (serve logged every completion as "(the client
        disconnected)"). On an llmhost server, once a finish reason came, that close reads the body to its end first
        (a few bytes, within the host call's bound and _MAX_TAIL_BYTES), so a completed request is one for the server
        too."""
        if response is None or not hasattr(response, "iter_bytes") or not self._model.kind.ends_as_sent:
            return  # (another server's body after [DONE] is not awaited: whatever it sends, the result stands)
        iter_bytes, close = response.iter_bytes, response.close
        body: list[Iterator[bytes]] = []
        draining = False

        def kept_iter_bytes(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            body.append(iter_bytes(*args, **kwargs))
            return body[-1]

        def drained_close() -> None:
            nonlocal draining
            if body and not draining and not self._closed and self.state.finish_reason is not None:
                draining = self._drained = True  # (reading to the end calls close again)
                left = _MAX_TAIL_BYTES
                with contextlib.suppress(Exception):  # cut or refused: the close below ends it anyway
                    for piece in body[-1]:
                        left -= len(piece)
                        if left < 0:
                            break
            close()

        response.iter_bytes = kept_iter_bytes
        response.close = drained_close

    def _time_up(self) -> None:
        """The watchdog's: the host call passed its bound; the blocked read returns (cut) at once."""
        if not self.read_to_end:  # (a connection read to its end may serve another request now)
            self._timed_out = True
            shut(self._socket)

    def _step(self) -> StreamEvent | None:
        """Read one chunk; returns the event it makes certain, if any (`_done` is set when it ends)."""
        assert self._chunks is not None
        state = self.state
        try:
            chunk = next(self._chunks)
        except StopIteration:
            tail = self._drained or self._tail_ends < math.inf
            if self._timed_out and not tail:  # the watchdog shut the socket: the stream ends as if cut
                raise self._model.timed_out(self._url, "the completion request", self._ends[1]) from None
            if state.finish_reason is None:
                raise EngineError(
                    f"the stream from {self._url} was cut mid-way: it ended before a finish reason"
                ) from None
            self.read_to_end = not self._timed_out
            self._finish_done()
            return None
        except LlmError:
            raise
        except Exception as e:  # noqa: BLE001 - any transport failure mid-stream ends the generation
            if self._tail_ends < math.inf:  # after the result was certain: it stands, counted here
                self._finish_done()
                return None
            if self._timed_out:
                raise self._model.timed_out(self._url, "the completion request", self._ends[1]) from None
            if self._closed:
                raise StopIteration from None
            why = self._model.scrub(root_cause(e) or type(e).__name__)
            raise EngineError(f"the stream from {self._url} was cut mid-way: {why}") from None
        if self._timed_out:
            if self._tail_ends < math.inf:  # (the result stands)
                self._finish_done()
                return None
            raise self._model.timed_out(self._url, "the completion request", self._ends[1])
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.server_usage = usage
            details = getattr(usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", None) if details is not None else None
            self.cached_tokens = None if cached is None else self._count(cached, "usage.prompt_tokens_details")
        choices = getattr(chunk, "choices", None)
        if state.finish_reason is not None or not choices:
            if self._tail_ends < math.inf and isinstance(choices, list) and choices and _has_text(choices[0]):
                self._finish_done()  # it goes on generating: it did not end as sent, and is closed now
            return None  # the finish came already: only usage may follow
        if not isinstance(choices, list):
            raise self._malformed("choices", choices, "a list")
        choice = choices[0]
        text = getattr(choice, "text", None)
        if text is not None and not isinstance(text, str):
            raise self._malformed("choices[0].text", text, "a string")
        finish_reason = getattr(choice, "finish_reason", None)
        if finish_reason is not None and not isinstance(finish_reason, str):
            raise self._malformed("choices[0].finish_reason", finish_reason, "a string")
        event: StreamEvent | None = None
        if self._by_ids:
            event, finish = self._tokens(choice)
        elif text:
            used = state.prompt_token_count + len(state.token_ids) + 1
            step = state.on_token(
                0, text.encode(), end_of_generation=False, context_full=used >= self._model.config.context_length
            )
            event, finish = _without_ids(step.chunk), step.finish
        else:
            finish = None
        if finish is not None:
            if not self._server_ends_too():
                # Certain now (a stop sequence, or the token budget or the context spent): close the request at
                # once, reading nothing more, not even the server's usage (counted here). A server need not end
                # at the limit it was sent.
                self._finish_done()
            else:  # the server ends here too: the rest (its finish, usage, [DONE]) is read, a completed request
                self._tail_ends = time.monotonic() + _TAIL_S
            return event
        if finish_reason is not None:
            if finish_reason == "length":
                step = state.end(FinishReason.LENGTH)
            else:  # "stop": end-of-generation (we never send stop strings), whose token counts as generated
                step = state.on_token(0, b"", end_of_generation=True, context_full=False)
            late = _without_ids(step.chunk)
            if isinstance(event, StreamChunk) and late is not None:
                event = event.model_copy(update={"text": event.text + late.text, "usage": late.usage})
            else:
                event = event or late
        return event

    def _server_ends_too(self) -> bool:
        """The server ends where `state` just finished: it was sent the same token budget, or the stop that
        matched (`ends_as_sent`)."""
        if not self._model.kind.ends_as_sent:
            return False
        return not self.state.stopped_by_sequence or "stop" in self._body

    def _tokens(self, choice: Any) -> tuple[StreamChunk | None, FinishReason | None]:
        """A chunk's tokens by id (`return_tokens_as_token_ids`), each fed with its logprob entry: the chunk they
        release (one for all) and the finish they reached, if any."""
        logprobs = getattr(choice, "logprobs", None)
        if logprobs is None:
            return None, None
        names = getattr(logprobs, "tokens", None) or []
        values = getattr(logprobs, "token_logprobs", None) or []
        tops = getattr(logprobs, "top_logprobs", None) or [{}] * len(names)
        if not isinstance(names, list) or not isinstance(values, list) or not isinstance(tops, list):
            raise self._malformed("choices[0].logprobs", logprobs, "tokens and their logprobs as lists")
        if not len(names) == len(values) == len(tops):
            raise self._malformed("choices[0].logprobs", logprobs, "lists of one length")
        vocab = self._model.vocab()
        assert vocab is not None  # request_body refused logprobs without one
        state = self.state
        chunks: list[StreamChunk] = []
        finish: FinishReason | None = None
        for i, (name, value, top) in enumerate(zip(names, values, tops, strict=True)):
            token = self._token_id(name, f"choices[0].logprobs.tokens[{i}]")
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise self._malformed(f"choices[0].logprobs.token_logprobs[{i}]", value, "a number")
            if not isinstance(top, dict):
                raise self._malformed(f"choices[0].logprobs.top_logprobs[{i}]", top, "an object")
            alternatives = []
            for key, lp in top.items():
                alt = self._token_id(key, f"choices[0].logprobs.top_logprobs[{i}]")
                if not isinstance(lp, int | float) or isinstance(lp, bool):
                    raise self._malformed(f"choices[0].logprobs.top_logprobs[{i}]", lp, "a number")
                alternatives.append(TopLogprob(token_id=alt, bytes=vocab.piece(alt), logprob=float(lp)))
            piece = vocab.piece(token)
            entry = TokenLogprob(token_id=token, bytes=piece, logprob=float(value), top=tuple(alternatives))
            used = state.prompt_token_count + len(state.token_ids) + 1
            step = state.on_token(
                token, piece, end_of_generation=False, context_full=used >= self._model.config.context_length,
                logprob=entry,
            )  # fmt: skip
            if step.chunk is not None:
                chunks.append(step.chunk)
            if step.finish is not None:
                finish = step.finish
                break
        return (merge_chunks(chunks) if chunks else None), finish

    def _token_id(self, name: Any, field: str) -> int:
        vocab = self._model.vocab()
        number = name[len(_ID_PREFIX) :] if isinstance(name, str) and name.startswith(_ID_PREFIX) else ""
        if not number.isdigit() or vocab is None or int(number) >= vocab.n_vocab:
            raise self._malformed(field, name, f"a token of {self._model.name} named {_ID_PREFIX}N")
        return int(number)

    def _count(self, value: Any, field: str) -> int:
        """A count the server sent, checked: `runtime-error` naming the field for anything but an integer >= 0."""
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self._malformed(field, value, "a count (an integer of 0 or more)")
        return value

    def _malformed(self, field: str, value: Any, wanted: str) -> EngineError:
        shown = self._model.scrub(repr(value)[:60])
        return EngineError(f"{self._url} sent a malformed completion chunk: `{field}` is {shown}, not {wanted}")

    def _finish_done(self) -> None:
        state = self.state
        usage = state.usage
        server = self.server_usage
        if self.read_to_end and server is not None:
            usage = Usage(
                prompt_token_count=self._count(getattr(server, "prompt_tokens", None), "usage.prompt_tokens"),
                generated_token_count=self._count(
                    getattr(server, "completion_tokens", None), "usage.completion_tokens"
                ),
            )
        assert state.finish_reason is not None
        self._done = StreamDone(finish_reason=state.finish_reason, usage=usage)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            stream = self._stream
        if self._alarm is not None:
            self._alarm.disarm()
        if stream is not None and not self.read_to_end:
            shut(self._socket)  # wakes a read blocked in another thread (closing alone does not)
            with contextlib.suppress(Exception):  # already broken: nothing more to release
                stream.close()  # closes the connection: the server cancels the request
        if self._holds_slot:
            self._holds_slot = False
            self._model.release()
        if self._on_end is not None:
            self._on_end(self)

    interrupt = close  # serve's scope calls this to cancel from another thread while a step waits on the network


def _has_text(choice: Any) -> bool:
    logprobs = getattr(choice, "logprobs", None)
    return bool(getattr(choice, "text", None) or (logprobs is not None and getattr(logprobs, "tokens", None)))


def _without_ids(chunk: Any) -> Any:
    """Remote chunks carry no token ids (the completions stream reports text only)."""
    return None if chunk is None else chunk.model_copy(update={"token_ids": ()})
