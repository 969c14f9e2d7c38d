"""A remote sequence: token ids kept here, sent as the prompt where the server takes them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import (
    BeamParams,
    FinishReason,
    InferenceResult,
    InferencingParams,
    StreamDone,
    StreamEvent,
    TokenLogprob,
    TopLogprob,
    check_logprobs_top,
    check_next_token_top,
)
from llmhost.engine.base import UNBOUNDED, Bounds, Generation, collect
from llmhost.engine.generation import GenerationText
from llmhost.engine.remote.client import RemoteModel
from llmhost.engine.remote.generation import RemoteGeneration
from llmhost.engine.text import attribute_text

log = logging.getLogger(__name__)


class RemoteSequence:
    """A guest's sequence of a remote model: the ids and texts are kept here; every generation sends the whole
    sequence (as ids with `token-prompts`, else as text), and the server's prefix cache serves the reuse."""

    def __init__(self, model: RemoteModel) -> None:
        self._model = model
        self._tokens: list[int] = []
        self._texts: list[str] = []
        self._logprobs: list[float | None] = []
        self._evaluated = 0
        self._busy = False
        self.closed = False

    def text(self) -> str:
        return "".join(self._texts)

    def token_ids(self) -> list[int]:
        return list(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def logprobs(self) -> list[float | None]:
        return list(self._logprobs)

    def log_likelihood(self) -> float:
        return 0.0  # no generated token has a log-probability (logprobs are not mapped for remote models)

    def evaluated_token_count(self) -> int:
        return self._evaluated

    def append(self, text: str) -> None:
        self._check_idle()
        if not text:
            return
        self._model.check_length("the appended text", text, self._model.config.context_length - len(self._tokens))
        tokens = self._model.tokenize(text, add_special=not self._tokens)
        self._add(tokens, self._model.texts_of(tokens, text))

    def append_tokens(self, tokens: list[int]) -> None:
        self._check_idle()
        vocab = self._model.vocab()
        if vocab is None:
            raise InvalidInput(
                f"append-tokens on model {self._model.name!r} needs its vocabulary here: set "
                f"`models.{self._model.name}.path` to the model's GGUF file"
            )
        for i, tok in enumerate(tokens):
            if not 0 <= tok < vocab.n_vocab:
                raise InvalidInput(f"tokens[{i}] = {tok} is not a token of {self._model.name}")
        pieces = [vocab.piece(t) for t in tokens]
        self._add(tokens, attribute_text(pieces, b"".join(pieces).decode("utf-8", "ignore")))

    def _add(self, tokens: list[int], texts: list[str]) -> None:
        limit = self._model.config.context_length
        if len(self._tokens) + len(tokens) > limit:
            raise InvalidInput(
                f"appending {len(tokens)} tokens to a sequence of {len(self._tokens)} would exceed the context "
                f"window of {limit} tokens (raise `models.{self._model.name}.context-length` or truncate first)"
            )
        self._tokens.extend(tokens)
        self._texts.extend(texts)
        self._logprobs.extend([None] * len(tokens))

    def generate_stream(self, params: InferencingParams) -> Generation:
        self._check_idle()
        if not self._tokens:
            raise InvalidInput("the sequence is empty: append a prompt before generating")
        model = self._model
        count = len(self._tokens)
        prompt: str | list[int] = list(self._tokens) if model.token_prompts else self.text()
        # A full context ends at once with `length` and no tokens, as locally.
        body = None if count >= model.config.context_length else model.request_body(prompt, count, params)
        state = GenerationText(params.stop, count, params.max_tokens)
        self._busy = True
        if body is None:
            return _FullGeneration(state, self._ended)
        return RemoteGeneration(model, body, state, on_end=self._ended)

    def _ended(self, generation: Any) -> None:
        state: GenerationText = generation.state
        try:
            returned = state.text
            if returned:
                tokens = self._model.tokenize(returned, add_special=False)
                texts = self._model.texts_of(tokens, returned)
                self._tokens.extend(tokens)
                self._texts.extend(texts)
                self._logprobs.extend([None] * len(tokens))
            # What the server ran: the prompt less what it said came from its cache, plus the generated tokens.
            sent = state.prompt_token_count
            cached = getattr(generation, "cached_tokens", None) or 0
            self._evaluated += max(0, sent - cached) + len(state.token_ids)
        finally:
            self._busy = False

    def generate(self, params: InferencingParams) -> InferenceResult:
        return collect(self.generate_stream(params))

    def truncate(self, count: int) -> None:
        self._check_idle()
        if count > len(self._tokens):
            raise InvalidInput(f"token-count {count} is longer than the sequence ({len(self._tokens)} tokens)")
        del self._tokens[count:], self._texts[count:], self._logprobs[count:]

    def fork(self) -> RemoteSequence:
        self._check_idle()
        copy = RemoteSequence(self._model)
        copy._tokens, copy._texts, copy._logprobs = list(self._tokens), list(self._texts), list(self._logprobs)
        return copy

    def score(self, continuations: list[str], bounds: Bounds = UNBOUNDED) -> list[float]:
        raise InvalidInput(
            f"sequence.score needs the model's raw distribution at every position; the remote model "
            f'{self._model.name!r} (backend "openai") does not expose it: score on a local (llama-cpp) model'
        )

    def beam_search(self, params: BeamParams, bounds: Bounds = UNBOUNDED) -> list[tuple[Any, float]]:
        raise InvalidInput(
            f"sequence.beam-search decodes forks of one KV cache step by step; the remote model "
            f'{self._model.name!r} (backend "openai") cannot: search on a local (llama-cpp) model'
        )

    def next_token_logprobs(self, top: int, bounds: Bounds = UNBOUNDED) -> list[TopLogprob]:
        check_next_token_top(top)
        raise InvalidInput(
            f"sequence.next-token-logprobs needs the model's raw distribution; the remote model "
            f'{self._model.name!r} (backend "openai") does not expose it: read it on a local (llama-cpp) model'
        )

    def append_tokens_with_logprobs(
        self, tokens: list[int], top: int, bounds: Bounds = UNBOUNDED
    ) -> list[TokenLogprob | None]:
        check_logprobs_top(top)
        raise InvalidInput(
            f"sequence.append-tokens-with-logprobs needs the model's raw distribution at every position; the remote "
            f'model {self._model.name!r} (backend "openai") does not expose it: score on a local (llama-cpp) model'
        )

    def host_bytes(self) -> int:
        """Host memory it holds: no KV state here (that lives on the servers), only its ids and texts."""
        return 8 * len(self._tokens) + sum(len(t) for t in self._texts)

    def close(self) -> None:
        self.closed = True

    def _check_idle(self) -> None:
        if self.closed:
            raise InvalidInput("the sequence was closed")
        if self._busy:
            raise InvalidInput("the sequence is generating: finish or drop its stream first")


class _FullGeneration:
    """A generation on a sequence whose context is already full: `length` with no tokens, no request."""

    def __init__(self, state: GenerationText, on_end: Callable[[Any], None]) -> None:
        self.state = state
        self._on_end = on_end
        self._done = False

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if self._done:
            raise StopIteration
        self.state.end(FinishReason.LENGTH)
        self.close()
        return StreamDone(finish_reason=FinishReason.LENGTH, usage=self.state.usage)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._on_end(self)
