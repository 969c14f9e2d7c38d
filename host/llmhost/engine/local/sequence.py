"""Guest sequences on a `LlamaModel`: a `SeqState` kept between calls, generated from by the scheduler.

After each generation the state is rewound so that it holds exactly the returned text (see
`sequence_state.plan_rewind`), so the next step continues right after it and pays only for new tokens.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import (
    BeamParams,
    InferenceResult,
    InferencingParams,
    TokenLogprob,
    TopLogprob,
    check_logprobs_top,
    check_next_token_top,
)
from llmhost.engine.base import UNBOUNDED, Bounds, TokenSequence, collect
from llmhost.engine.local import search
from llmhost.engine.local.job import LlamaGeneration
from llmhost.engine.local.next_token import NextTokenRead
from llmhost.engine.local.planning import eager_target
from llmhost.engine.local.sequence_state import SeqState
from llmhost.engine.text import attribute_text

if TYPE_CHECKING:
    from llmhost.engine.local.model import EngineModel as LlamaModel


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

    def host_bytes(self) -> int:
        return len(self._state.saved or b"")

    def evaluated_token_count(self) -> int:
        return self._state.evaluated

    def next_logits(self) -> list[float]:
        return self._model.next_logits(self._state)

    def next_token_logprobs(self, top: int, bounds: Bounds = UNBOUNDED) -> list[TopLogprob]:
        check_next_token_top(top)
        self._check_idle()
        state = self._state
        if not state.tokens:
            raise InvalidInput("the sequence is empty: append a prompt before reading its next token")
        # What it evaluates counts into the run's budget: its pending tokens, or the last one again.
        bounds.spend(max(1, len(state.tokens) - state.n_kv))
        return NextTokenRead(self._model, state, top, on_end=self._model.slots.release).read()

    # --- changing ----------------------------------------------------------------------------------------
    def append(self, text: str) -> None:
        if not text:
            return
        model = self._model
        room = model.n_ctx - len(self._state.tokens)
        tokens = model.tokenize(text, add_special=not self._state.tokens, room=room, what="the appended text")
        self._add(tokens, model.texts_of(tokens, text))

    def append_tokens(self, tokens: list[int]) -> None:
        self._add(tokens, self._texts_of_ids(tokens))

    def append_tokens_with_logprobs(
        self, tokens: list[int], top: int, bounds: Bounds = UNBOUNDED
    ) -> list[TokenLogprob | None]:
        check_logprobs_top(top)
        texts = self._texts_of_ids(tokens)
        self._check_idle()
        self._check_room(len(tokens))
        if not tokens:
            return []
        return search.append_with_logprobs(self._model, self._state, tokens, texts, top, bounds)

    def _texts_of_ids(self, tokens: list[int]) -> list[str]:
        """The text each token id stands for; an id outside the vocabulary is `InvalidInput` naming it."""
        model = self._model
        for i, tok in enumerate(tokens):
            if not 0 <= tok < model.n_vocab:
                raise InvalidInput(
                    f"tokens[{i}] = {tok} is not a token of {model.name} (ids are 0 to {model.n_vocab - 1})"
                )
        pieces = [model.piece(t) for t in tokens]
        return attribute_text(pieces, b"".join(pieces).decode("utf-8", "ignore"))

    def _check_room(self, count: int) -> None:
        model, state = self._model, self._state
        if len(state.tokens) + count > model.n_ctx:
            raise InvalidInput(
                f"appending {count} tokens to a sequence of {len(state.tokens)} would exceed the context "
                f"window of {model.n_ctx} tokens (raise `models.{model.name}.context-length` or truncate first)"
            )

    def _add(self, tokens: list[int], texts: list[str]) -> None:
        self._check_idle()
        self._check_room(len(tokens))
        model, state = self._model, self._state
        with model.lock:
            state.append(tokens, texts)
            # No slot free now (every one busy generating): the tokens are evaluated by the next generation,
            # which the scheduler admits in turn (nor when others wait for one). An append never waits.
            if not model.admission.try_enter(lambda: model.slots.attach(state)):
                return
            state.busy = True  # stays in its slot between chunks
        try:
            # Evaluate now, all but the last token (the next generation evaluates that one to get its logits; in
            # deterministic mode all but the last row),
            # one batch-size chunk per hold of the model lock: other generations' steps run in between, so a
            # long append delays them by one chunk, not by the whole text.
            target = eager_target(len(state.tokens), model.chunk)
            while state.n_kv < target:
                with model.lock:
                    model.evaluate(state, min(target, state.n_kv + model.n_batch))
                time.sleep(0)  # let a waiting step take the lock
        finally:
            model.slots.release(state)

    def generate_stream(self, params: InferencingParams) -> LlamaGeneration:
        self._check_idle()
        if not self._state.tokens:
            raise InvalidInput("the sequence is empty: append a prompt before generating")
        # Everything that can fail runs before the sequence is marked busy: a failed call must leave it usable.
        constraint = self._model.prepare(params)
        self._state.busy = True  # reserved at once, so two generations cannot start on one sequence
        return LlamaGeneration(
            self._model,
            self._state,
            params,
            on_end=self._model.slots.release,
            rewind=True,
            logprobs=True,
            constraint=constraint,
        )

    def generate(self, params: InferencingParams) -> InferenceResult:
        return collect(self.generate_stream(params))

    def truncate(self, count: int) -> None:
        self._check_idle()
        if count > len(self._state.tokens):
            raise InvalidInput(f"token-count {count} is longer than the sequence ({len(self._state.tokens)} tokens)")
        self._model.slots.trim(self._state, count)

    def fork(self) -> LlamaSequence:
        self._check_idle()
        self._model.check_swap_room()
        return LlamaSequence(self._model, self._model.slots.fork(self._state))

    def score(self, continuations: list[str], bounds: Bounds = UNBOUNDED) -> list[float]:
        self._check_idle()
        return search.score(self._model, self._state, continuations, bounds)

    def beam_search(self, params: BeamParams, bounds: Bounds = UNBOUNDED) -> list[tuple[TokenSequence, float]]:
        self._check_idle()
        self._model.check_swap_room()
        return [
            (LlamaSequence(self._model, state), value)
            for state, value in search.beam_search(self._model, self._state, params, bounds)
        ]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._model.slots.detach(self._state)

    def _check_idle(self) -> None:
        if self.closed:
            raise InvalidInput("the sequence was closed")
        if self._state.busy:
            raise InvalidInput("the sequence is generating: finish or drop its stream first")
