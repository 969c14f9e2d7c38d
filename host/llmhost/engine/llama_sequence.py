"""Generations and sequences on a `LlamaModel`.

A `LlamaGeneration` extends a `SeqState` token by token: each `next()` runs one step under the model's lock
(evaluate what the state still lacks in the KV cache, sample, account). A one-off `infer` runs on a throw-away
state; a guest's `sequence` keeps its state between calls, and after each generation its state is rewound so
that it holds exactly the returned text (see `sequence_state.plan_rewind`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..types import (
    FinishReason,
    InferenceResult,
    InferencingParams,
    InvalidInput,
    StreamDone,
    StreamEvent,
    Usage,
)
from .base import collect
from .generation import GenerationText, Step
from .sampling import build_sampler
from .sequence_state import SeqState, attribute_text, plan_rewind

if TYPE_CHECKING:
    from .llamacpp import LlamaModel


class LlamaGeneration:
    def __init__(
        self,
        model: LlamaModel,
        state: SeqState,
        params: InferencingParams,
        *,
        on_end: Callable[[SeqState], None],
        rewind: bool = False,
        logprobs: bool = False,
    ) -> None:
        self._model = model
        self._state = state
        self._params = params
        self._on_end = on_end
        self._rewind = rewind
        self._logprobs = logprobs
        self._base = len(state.tokens)
        self._text = GenerationText(params.stop, self._base, params.max_tokens)
        self._sampler: Any = None
        self._started = False
        self._eog = False
        self._done_event: StreamDone | None = None
        self.finished = False

    @property
    def usage(self) -> Usage:
        return self._text.usage

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        while not self.finished:
            if self._done_event is not None:
                event, self._done_event = self._done_event, None
                self.close()
                return event
            if not self._started and len(self._state.tokens) >= self._model.n_ctx:
                # A sequence that already fills its window: nothing can be generated.
                self._done_event = StreamDone(finish_reason=FinishReason.LENGTH, usage=self._text.usage)
                continue
            step = self._step()
            if step.finish is not None:
                self._done_event = StreamDone(finish_reason=step.finish, usage=self._text.usage)
            if step.chunk is not None:
                return step.chunk
        raise StopIteration

    def _step(self) -> Step:
        model, state = self._model, self._state
        with model.lock:
            if not self._started:
                self._started = True
                state.busy = True
                model.attach(state)
                self._sampler = build_sampler(model.lib, model.n_vocab, self._params)
                for tok in state.tokens[-max(1, self._params.repeat_penalty_last_n_token_count) :]:
                    model.lib.llama_sampler_accept(self._sampler, tok)  # the penalty window includes the prompt
                model.logits_ready(state)
            else:
                model.attach(state)
                model.evaluate(state, len(state.tokens))  # the token sampled last step
            token = model.sample(self._sampler)
            logprob = model.logprob(token) if self._logprobs else None
        state.append([token], [""], [logprob])
        self._eog = model.is_eog(token)
        return self._text.on_token(
            token,
            model.piece(token),
            end_of_generation=self._eog,
            context_full=len(state.tokens) >= model.n_ctx,
        )

    def close(self) -> None:
        """End (or cancel) the generation: no further decode steps; rewind the state to the returned text."""
        if self.finished:
            return
        self.finished = True
        model, state = self._model, self._state
        with model.lock:
            if self._sampler is not None:
                model.lib.llama_sampler_free(self._sampler)
                self._sampler = None
            if self._rewind:
                self._rewind_to_returned_text()
            self._on_end(state)

    def _rewind_to_returned_text(self) -> None:
        """After a stop inside a token (or a cancel, or end-of-generation), drop the tokens whose text was not
        returned, and feed the kept part of a cut token's text back as tokens, so state equals text."""
        model, state = self._model, self._state
        plan = plan_rewind(self._text, self._eog and self._text.finish_reason is not None)
        kept = self._base + plan.keep
        model.trim(state, kept)  # kept tokens keep their KV cache
        state.token_texts[self._base : kept] = plan.kept_texts
        if plan.remainder:
            tokens = model.tokenize(plan.remainder, add_special=False)
            state.append(tokens, model.texts_of(tokens, plan.remainder))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown the library may be gone
            self.close()


class LlamaSequence:
    """A guest's `sequence`: token state kept across calls, in a KV slot or swapped out to host memory."""

    def __init__(self, model: LlamaModel, state: SeqState | None = None) -> None:
        self._model = model
        self._state = state if state is not None else SeqState()
        self.closed = False

    # --- reading -----------------------------------------------------------------------------------------
    def text(self) -> str:
        return self._state.text

    def token_ids(self) -> list[int]:
        return list(self._state.tokens)

    def __len__(self) -> int:
        return len(self._state.tokens)

    def logprobs(self) -> list[float | None]:
        return list(self._state.logprobs)

    def log_likelihood(self) -> float:
        return math.fsum(lp for lp in self._state.logprobs if lp is not None)

    def evaluated_token_count(self) -> int:
        return self._state.evaluated

    def next_logits(self) -> list[float]:
        return self._model.next_logits(self._state)

    # --- changing ----------------------------------------------------------------------------------------
    def append(self, text: str) -> None:
        if not text:
            return
        model = self._model
        tokens = model.tokenize(text, add_special=not self._state.tokens)
        self._add(tokens, model.texts_of(tokens, text))

    def append_tokens(self, tokens: list[int]) -> None:
        model = self._model
        for i, tok in enumerate(tokens):
            if not 0 <= tok < model.n_vocab:
                raise InvalidInput(
                    f"tokens[{i}] = {tok} is not a token of {model.name} (ids are 0 to {model.n_vocab - 1})"
                )
        pieces = [model.piece(t) for t in tokens]
        self._add(tokens, attribute_text(pieces, b"".join(pieces).decode("utf-8", "ignore")))

    def _add(self, tokens: list[int], texts: list[str]) -> None:
        self._check_idle()
        model, state = self._model, self._state
        if len(state.tokens) + len(tokens) > model.n_ctx:
            raise InvalidInput(
                f"appending {len(tokens)} tokens to a sequence of {len(state.tokens)} would exceed the context "
                f"window of {model.n_ctx} tokens (raise `models.{model.name}.context-length` or truncate first)"
            )
        with model.lock:
            state.append(tokens, texts)
            # Evaluate now, all but the last token: the next generation evaluates that one to get its logits.
            model.attach(state)
            model.evaluate(state, len(state.tokens) - 1)

    def generate_stream(self, params: InferencingParams) -> LlamaGeneration:
        self._check_idle()
        if not self._state.tokens:
            raise InvalidInput("the sequence is empty: append a prompt before generating")
        self._state.busy = True  # reserved at once, so two generations cannot start on one sequence
        return LlamaGeneration(self._model, self._state, params, on_end=self._model.release, rewind=True, logprobs=True)

    def generate(self, params: InferencingParams) -> InferenceResult:
        return collect(self.generate_stream(params))

    def truncate(self, count: int) -> None:
        self._check_idle()
        if count > len(self._state.tokens):
            raise InvalidInput(f"token-count {count} is longer than the sequence ({len(self._state.tokens)} tokens)")
        self._model.trim(self._state, count)

    def fork(self) -> LlamaSequence:
        self._check_idle()
        return LlamaSequence(self._model, self._model.fork(self._state))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._model.detach(self._state)

    def _check_idle(self) -> None:
        if self.closed:
            raise InvalidInput("the sequence was closed")
        if self._state.busy:
            raise InvalidInput("the sequence is generating: finish or drop its stream first")
