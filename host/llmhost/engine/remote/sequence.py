"""A remote sequence: token ids kept here, sent as the prompt where the server takes them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.types import (
    BeamParams,
    FinishReason,
    InferenceResult,
    InferencingParams,
    StreamDone,
    StreamEvent,
    TokenLogprob,
    TopLogprob,
    check_continuations,
    check_logprobs_top,
    check_next_token_top,
)
from llmhost.engine.base import UNBOUNDED, Bounds, Generation, collect
from llmhost.engine.generation import GenerationText
from llmhost.engine.remote.client import RemoteModel
from llmhost.engine.remote.generation import RemoteGeneration
from llmhost.engine.text import attribute_text

log = logging.getLogger(__name__)

_SCORE_PROMPTS = 8  # continuations scored per request (openai-compat's most choices a request)


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
        """On an llmhost server (`token_logprobs`): each continuation's tokens after the sequence's, echoed with
        their logprobs (`echo`, `max_tokens` 0, as lm-eval scores), summed in order as the local score sums."""
        check_continuations(continuations)
        model = self._model
        if not model.kind.token_logprobs or not model.token_prompts:
            raise InvalidInput(
                f"sequence.score needs the model's raw distribution at every position; the remote model "
                f'{model.name!r} (backend "openai", a {model.config.server} server) does not expose it '
                f"({model.elsewhere()})"
            )
        self._check_idle()
        if not self._tokens:
            raise InvalidInput("the sequence is empty: append a prompt before scoring continuations")
        room = model.config.context_length - len(self._tokens)
        tokenized = []
        for i, text in enumerate(continuations):
            if text:
                model.check_length(f"continuations[{i}]", text, room)
            tokens = model.tokenize(text, add_special=False) if text else []
            if len(tokens) > room:
                raise InvalidInput(
                    f"continuations[{i}] is {len(tokens)} tokens: with the sequence's {len(self._tokens)} that "
                    f"exceeds the context window of {model.config.context_length} tokens"
                )
            tokenized.append(tokens)
        scores = [0.0] * len(tokenized)
        pending = [i for i, tokens in enumerate(tokenized) if tokens]
        if not pending:
            return scores
        bounds.spend(sum(len(tokens) for tokens in tokenized))
        for start in range(0, len(pending), _SCORE_PROMPTS):
            bounds.check()
            group = pending[start : start + _SCORE_PROMPTS]
            prompts = [self._tokens + tokenized[i] for i in group]
            for i, values in zip(group, self._echoed_logprobs(prompts), strict=True):
                total = 0.0
                for value in values[len(self._tokens) :]:
                    total += value
                scores[i] = total
        return scores

    def _echoed_logprobs(self, prompts: list[list[int]]) -> list[list[float]]:
        """Each prompt's token logprobs (the first token's, which nothing predicts, as 0.0) from one request."""
        model = self._model
        request = {
            "model": model.remote_name, "prompt": prompts, "max_tokens": 0, "echo": True, "logprobs": 0,
            "temperature": 0.0,
        }  # fmt: skip
        model.acquire()
        try:
            url, response = model.call("the score request", lambda client: client.completions.create(**request))
        finally:
            model.release()
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or len(choices) != len(prompts):
            raise EngineError(f"{url} sent a malformed score response: `choices` is not {len(prompts)} choices")
        found: list[list[float]] = []
        for k, (choice, prompt) in enumerate(zip(sorted(choices, key=lambda c: c.index), prompts, strict=True)):
            values = getattr(getattr(choice, "logprobs", None), "token_logprobs", None)
            if not isinstance(values, list) or len(values) != len(prompt):
                raise EngineError(
                    f"{url} sent a malformed score response: `choices[{k}].logprobs.token_logprobs` is not "
                    f"{len(prompt)} numbers"
                )
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values[1:]):
                raise EngineError(f"{url} sent a malformed score response: `choices[{k}].logprobs` holds a non-number")
            found.append([0.0] + [float(v) for v in values[1:]])
        return found

    def beam_search(self, params: BeamParams, bounds: Bounds = UNBOUNDED) -> list[tuple[Any, float]]:
        raise self._local_only("sequence.beam-search decodes forks of one KV cache step by step", "search")

    def next_token_logprobs(self, top: int, bounds: Bounds = UNBOUNDED) -> list[TopLogprob]:
        check_next_token_top(top)
        raise self._local_only("sequence.next-token-logprobs needs the model's raw distribution", "read it")

    def append_tokens_with_logprobs(
        self, tokens: list[int], top: int, bounds: Bounds = UNBOUNDED
    ) -> list[TokenLogprob | None]:
        check_logprobs_top(top)
        raise self._local_only(
            "sequence.append-tokens-with-logprobs needs the model's raw distribution at every position", "score"
        )

    def _local_only(self, why: str, verb: str) -> InvalidInput:
        """What no remote model does: its fix is a local model (for `llmhost run --connect`, a run without it)."""
        model = self._model
        fix = model.elsewhere() if model.config.server == "llmhost" else f"{verb} on a local (llama-cpp) model"
        return InvalidInput(f'{why}; the remote model {model.name!r} (backend "openai") cannot: {fix}')

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
