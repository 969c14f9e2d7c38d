"""`AsyncHost`: the Python API for asyncio apps, over a `Host`, with the same typed results.

A local model's tokens reach a waiting task with no thread held for it: its generation is polled, and the model's
stepping thread wakes the event loop (`loop.call_soon_threadsafe`) when a step delivered events. What must hold a
thread (starting a generation: a model load, tokenizing, the model lock; a remote model's sync client; embeddings;
a guest's run; a compile) runs in one bounded pool of `max_threads` threads, never on the loop; closes run on
one more thread of their own, so that a cancellation never waits behind busy workers. Cancelling the awaiting task
cancels the generation: it runs no further decode step once the step under way ends, and its slot frees.

    async with AsyncHost(load_config("llmhost.toml")) as host:
        reply = await host.chat("gemma-3-270m", [{"role": "user", "content": "Hi!"}])
        async for chunk in await host.infer_stream("gemma-3-270m", "Once upon a time"):
            print(chunk)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

from llmhost.api import App, Host
from llmhost.chat.service import ChatStream, gather_chat
from llmhost.config import HostConfig
from llmhost.domain import types as dt
from llmhost.domain.errors import EngineError
from llmhost.domain.signatures import arguments_of
from llmhost.engine.base import Generation, TokenSequence
from llmhost.run.scope import RunScope
from llmhost.runtime.sandbox import OutputSink

# Threads for the work that must hold one (see the module's docstring), per AsyncHost.
DEFAULT_MAX_THREADS = 8
T = TypeVar("T")


class _Waker:
    """Wakes one task from any thread; notices coalesce until the task looks again."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.event = asyncio.Event()
        self.pending = False

    def notify(self) -> None:  # on the scheduler's thread, under its mutex: never raises
        if not self.pending:
            self.pending = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self._loop.call_soon_threadsafe(self.event.set)

    def rearm(self) -> None:
        self.pending = False
        self.event.clear()


class _AsyncClosing:
    """`async with` closes it: `__aexit__` awaits `aclose()` (each wrapper's own)."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncGeneration(_AsyncClosing):
    """A generation read with `async for` (`StreamChunk`s, then one `StreamDone`); `aclose()` or `async with`
    cancels it. Cancelling the task that awaits it cancels it too."""

    def __init__(self, generation: Generation, host: AsyncHost, waker: _Waker | None) -> None:
        self._generation = generation
        self._host = host
        self._waker = waker  # set: the generation is polled (a local model); None: read on a pool thread
        self._done = False

    def __aiter__(self) -> AsyncGeneration:
        return self

    async def __anext__(self) -> dt.StreamEvent:
        if self._done:
            raise StopAsyncIteration
        try:
            event = await (self._polled() if self._waker is not None else self._pooled())
        except asyncio.CancelledError:
            self._cancel()
            raise
        except BaseException:
            self._done = True
            raise
        if event is None:
            self._done = True
            raise StopAsyncIteration
        if isinstance(event, dt.StreamDone):
            self._done = True
        return event

    async def _polled(self) -> dt.StreamEvent | None:
        waker, poll = self._waker, self._generation.poll  # type: ignore[attr-defined]
        assert waker is not None
        while True:
            waker.rearm()
            try:
                event: dt.StreamEvent | None = poll()
            except StopIteration:
                return None
            if event is not None:
                return event
            await waker.event.wait()

    async def _pooled(self) -> dt.StreamEvent | None:
        return await self._host.in_pool(next, self._generation, None)

    def _cancel(self) -> None:
        if not self._done:
            self._done = True
            self._host.close_soon(self._generation.close)

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            await self._host.in_closer(self._generation.close)


class AsyncChatStream(_AsyncClosing):
    """A chat read with `async for`: `StreamChunk`s (text), `ToolCallDelta`s, then one `StreamDone`."""

    def __init__(self, chat: ChatStream, events: AsyncGeneration) -> None:
        self.chat = chat  # the sync stream the events are fed to
        self._events = events
        self._queue: list[dt.ChatEvent] = []

    def __aiter__(self) -> AsyncChatStream:
        return self

    async def __anext__(self) -> dt.ChatEvent:
        while not self._queue:
            if self.chat.done:
                raise StopAsyncIteration
            self.chat.feed(await self._events.__anext__())
            self._queue.extend(self.chat.take())
        return self._queue.pop(0)

    @property
    def logprobs(self) -> list[dt.TokenLogprob]:
        return self.chat.logprobs

    async def aclose(self) -> None:
        await self._events.aclose()


class AsyncSequence(_AsyncClosing):
    """A `TokenSequence` for asyncio: each call runs on the pool; `generate_stream` streams as `infer_stream`."""

    def __init__(self, sequence: TokenSequence, host: AsyncHost) -> None:
        self.sequence = sequence  # the sync one, for what is not wrapped here
        self._host = host

    async def append(self, text: str) -> None:
        await self._host.in_pool(self.sequence.append, text)

    async def append_tokens(self, tokens: list[int]) -> None:
        await self._host.in_pool(self.sequence.append_tokens, tokens)

    async def generate(self, params: dt.InferencingParams) -> dt.InferenceResult:
        return await collect(await self.generate_stream(params))

    async def generate_stream(self, params: dt.InferencingParams) -> AsyncGeneration:
        return await self._host.started(lambda: self.sequence.generate_stream(params))

    async def truncate(self, count: int) -> None:
        await self._host.in_pool(self.sequence.truncate, count)

    async def fork(self) -> AsyncSequence:
        return AsyncSequence(await self._host.in_pool(self.sequence.fork), self._host)

    async def score(self, continuations: list[str]) -> list[float]:
        return await self._host.in_pool(self.sequence.score, continuations)

    async def text(self) -> str:
        return await self._host.in_pool(self.sequence.text)

    async def token_ids(self) -> list[int]:
        return await self._host.in_pool(self.sequence.token_ids)

    async def aclose(self) -> None:
        await self._host.in_closer(self.sequence.close)


class AsyncApp:
    """A loaded command component; `await app.run(args)` runs it on the pool (a guest holds a thread while it
    runs). Cancelling the awaiting task cancels the run's scope: its generations end and its further model calls
    fail, so a guest that waits on the model ends soon; one computing without host calls ends at
    `sandbox.timeout-s`."""

    def __init__(self, app: App, host: AsyncHost) -> None:
        self.app = app
        self._host = host

    async def run(
        self, args: Sequence[str], *, stdout: OutputSink | None = None, stderr: OutputSink | None = None
    ) -> int:
        scope = RunScope(f"run of {self.app.name}")
        call = functools.partial(self.app.run, list(args), stdout=stdout, stderr=stderr, scope=scope)
        future = asyncio.get_running_loop().run_in_executor(self._host._pool, call)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            scope.cancel("the task awaiting the run was cancelled")
            raise


class AsyncHost(_AsyncClosing):
    """A `Host` for asyncio apps (see the module's docstring). `host`: a `Host` (stays the caller's to close), or
    the config of one this creates and closes. `max_threads`: the pool's size."""

    def __init__(self, host: Host | HostConfig | None = None, *, max_threads: int = DEFAULT_MAX_THREADS) -> None:
        self._owns_host = not isinstance(host, Host)
        self.host = host if isinstance(host, Host) else Host(host)
        self.max_threads = max_threads
        self._pool = concurrent.futures.ThreadPoolExecutor(max_threads, thread_name_prefix="llmhost-async")
        self._closer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llmhost-async-close")

    # -- plumbing ----------------------------------------------------------------------------------------------
    async def in_pool(self, call: Callable[..., T], *args: Any) -> T:
        """Run a blocking `call` on the pool."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    async def in_closer(self, call: Callable[[], None]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._closer, call)

    def close_soon(self, call: Callable[[], None]) -> None:
        """Run `call` (a close: it waits at most for the decode step under way) without awaiting it."""
        with contextlib.suppress(RuntimeError):  # shut down: the host's close ends every generation anyway
            self._closer.submit(call)

    async def started(self, start: Callable[[], Generation]) -> AsyncGeneration:
        """Start a generation on the pool (input errors raise here) and read it without holding a thread when it
        can be polled (a local model's)."""
        waker = _Waker(asyncio.get_running_loop())

        def begin() -> tuple[Generation, bool]:
            generation = start()
            watch = getattr(generation, "watch", None)
            if watch is not None:
                watch(waker.notify)
            return generation, watch is not None

        future = asyncio.get_running_loop().run_in_executor(self._pool, begin)
        try:
            generation, polled = await asyncio.shield(future)
        except asyncio.CancelledError:  # cancelled while it started: close it once it has
            future.add_done_callback(self._close_started)
            raise
        return AsyncGeneration(generation, self, waker if polled else None)

    def _close_started(self, future: asyncio.Future[tuple[Generation, bool]]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.close_soon(future.result()[0].close)

    # -- the model API (as `Host`'s) ---------------------------------------------------------------------------
    async def infer(self, model: str, prompt: str, params: dt.InferencingParams | None = None) -> dt.InferenceResult:
        return await collect(await self.infer_stream(model, prompt, params))

    async def infer_stream(
        self, model: str, prompt: str, params: dt.InferencingParams | None = None
    ) -> AsyncGeneration:
        """`Host.infer_stream`, read with `async for`. Input errors are raised by the await."""
        return await self.started(lambda: self.host.infer_stream(model, prompt, params))

    @arguments_of(Host.chat)
    async def chat(self, *args: Any, **kwargs: Any) -> dt.ChatResult:
        return await collect_chat(await self.chat_stream(*args, **kwargs))

    @arguments_of(Host.chat_stream)
    async def chat_stream(self, *args: Any, **kwargs: Any) -> AsyncChatStream:
        """`Host.chat_stream`, read with `async for`. Input errors are raised by the await."""
        chats: list[ChatStream] = []

        def start() -> Generation:
            chat = self.host.chat_stream(*args, **kwargs)
            assert isinstance(chat, ChatStream)  # the service's, for host-side callers
            chats.append(chat)
            return chat.generation

        events = await self.started(start)
        return AsyncChatStream(chats[0], events)

    @arguments_of(Host.apply_chat_template)
    async def apply_chat_template(self, *args: Any, **kwargs: Any) -> str:
        return await self.in_pool(functools.partial(self.host.apply_chat_template, *args, **kwargs))

    async def tokenize(self, model: str, text: str) -> list[int]:
        return await self.in_pool(self.host.tokenize, model, text)

    async def model_info(self, model: str) -> dt.ModelInfo:
        return await self.in_pool(self.host.model_info, model)

    async def embeddings(self, model: str, texts: Sequence[dt.EmbeddingInput]) -> dt.EmbeddingsResult:
        return await self.in_pool(self.host.embeddings, model, texts)

    async def open_sequence(self, model: str) -> AsyncSequence:
        return AsyncSequence(await self.in_pool(self.host.open_sequence, model), self)

    async def load(self, path: str | Path, **grants: Any) -> AsyncApp:
        """`Host.load` (compiling on first use, on the pool)."""
        return AsyncApp(await self.in_pool(functools.partial(self.host.load, path, **grants)), self)

    # -- lifetime ----------------------------------------------------------------------------------------------
    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        if self._owns_host:
            await loop.run_in_executor(self._closer, self.host.close)
        self._pool.shutdown(wait=False)
        self._closer.shutdown(wait=False)


async def collect(stream: AsyncIterator[dt.StreamEvent] | AsyncGeneration) -> dt.InferenceResult:
    """An async generation run to its end, as one result (what `infer` returns)."""
    parts: list[str] = []
    logprobs: list[dt.TokenLogprob] = []
    try:
        async for event in stream:
            if isinstance(event, dt.StreamChunk):
                parts.append(event.text)
                logprobs.extend(event.logprobs)
            else:
                return dt.InferenceResult(
                    finish_reason=event.finish_reason, text="".join(parts), usage=event.usage, logprobs=tuple(logprobs)
                )
    finally:
        if isinstance(stream, AsyncGeneration):
            await stream.aclose()
    raise EngineError("generation ended without a done event")


async def collect_chat(stream: AsyncChatStream) -> dt.ChatResult:
    """An async chat run to its end, as one result (what `chat` returns; gathered as the sync one is)."""
    events: list[dt.ChatEvent] = []
    try:
        async for event in stream:
            events.append(event)
            if isinstance(event, dt.StreamDone):
                break
    finally:
        await stream.aclose()
    return gather_chat(events, stream.chat)
