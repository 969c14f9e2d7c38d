"""`RaySequence`: a sequence whose KV cache lives on one replica of its model's deployment.

Every call names that replica, and the router sends it there (appends never evaluate earlier tokens again). The
host keeps the sequence's token ids: when the replica is gone, the next call rebuilds the sequence from them on
another replica, transparently."""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import TYPE_CHECKING, Any

from llmhost.domain.errors import EngineError
from llmhost.domain.types import BeamParams, InferenceResult, InferencingParams, TokenLogprob, TopLogprob
from llmhost.engine.base import UNBOUNDED, Bounds, TokenSequence, collect
from llmhost.engine.ray.calls import RayGeneration, call, value
from llmhost.engine.ray.protocol import LOST, Outcome

if TYPE_CHECKING:
    from llmhost.engine.ray.model import RayModel


class RaySequence:
    def __init__(self, model: RayModel, made: dict[str, Any], replica: str) -> None:
        self._model = model
        self._seq: str = made["seq"]
        self._tokens: list[int] = list(made["tokens"])
        self.replica = replica
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def open(cls, model: RayModel) -> RaySequence:
        outcome = call(model.handle.open_sequence.remote, model.name)
        return cls(model, value(outcome), outcome.replica)

    # --- calls ---------------------------------------------------------------------------------------------------
    def _call(self, method: str, *args: Any, bounds: Bounds = UNBOUNDED) -> Any:
        if self._closed:
            raise EngineError("the sequence is closed")
        outcome = self._send(method, args, bounds, rebuild=False)
        if outcome.value == LOST and outcome.error is None:
            outcome = self._send(method, args, bounds, rebuild=True)
        self.replica = outcome.replica or self.replica
        if outcome.tokens is not None:
            self._tokens = outcome.tokens
        return value(outcome)

    def _send(self, method: str, args: tuple[Any, ...], bounds: Bounds, rebuild: bool) -> Outcome:
        start = functools.partial(
            self._model.handle.sequence_call.remote,
            self._seq,
            method,
            args,
            tokens=list(self._tokens) if rebuild else None,
            replica=self.replica,
        )
        return call(start, self._model.name, bounds.check)

    def _made(self, made: dict[str, Any]) -> RaySequence:
        return RaySequence(self._model, made, self.replica)

    # --- reads ---------------------------------------------------------------------------------------------------
    def text(self) -> str:
        text: str = self._call("text")
        return text

    def token_ids(self) -> list[int]:
        return list(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def logprobs(self) -> list[float | None]:
        logprobs: list[float | None] = self._call("logprobs")
        return logprobs

    def log_likelihood(self) -> float:
        return float(self._call("log_likelihood"))

    def evaluated_token_count(self) -> int:
        return int(self._call("evaluated_token_count"))

    def host_bytes(self) -> int:
        return 0  # the KV cache, swapped or not, is the replica's memory

    # --- changes -------------------------------------------------------------------------------------------------
    def append(self, text: str) -> None:
        self._call("append", text)

    def append_tokens(self, tokens: list[int]) -> None:
        self._call("append_tokens", tokens)

    def truncate(self, count: int) -> None:
        self._call("truncate", count)

    def generate(self, params: InferencingParams) -> InferenceResult:
        return collect(self.generate_stream(params))

    def generate_stream(self, params: InferencingParams) -> RayGeneration:
        if self._closed:
            raise EngineError("the sequence is closed")

        def start(rebuild: bool) -> Any:
            tokens = list(self._tokens) if rebuild else None
            return self._model.streaming.sequence_stream.remote(self._seq, params, tokens=tokens, replica=self.replica)

        def ended(tokens: list[int], replica: str) -> None:
            self._tokens, self.replica = tokens, replica

        return RayGeneration(self._model.name, start, on_tokens=ended)

    def fork(self) -> RaySequence:
        return self._made(self._call("fork"))

    # --- search and scores ------------------------------------------------------------------------------------------
    def score(self, continuations: list[str], bounds: Bounds = UNBOUNDED) -> list[float]:
        scores: list[float] = self._call("score", continuations, bounds=bounds)
        return scores

    def beam_search(self, params: BeamParams, bounds: Bounds = UNBOUNDED) -> list[tuple[TokenSequence, float]]:
        found = self._call("beam_search", params, bounds=bounds)
        return [(self._made(made), score) for made, score in found]

    def next_token_logprobs(self, top: int, bounds: Bounds = UNBOUNDED) -> list[TopLogprob]:
        found: list[TopLogprob] = self._call("next_token_logprobs", top, bounds=bounds)
        return found

    def append_tokens_with_logprobs(
        self, tokens: list[int], top: int, bounds: Bounds = UNBOUNDED
    ) -> list[TokenLogprob | None]:
        found: list[TokenLogprob | None] = self._call("append_tokens_with_logprobs", tokens, top, bounds=bounds)
        return found

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        # Best effort: a lost replica took the sequence with it; a forgotten one expires there (SEQUENCE_IDLE_S).
        start = functools.partial(self._model.handle.sequence_call.remote, self._seq, "close", (), replica=self.replica)
        with contextlib.suppress(EngineError):
            call(start, self._model.name)
