"""A guest's read of the next-token distribution at a sequence's end (`sequence.next-token-logprobs`), as a job
of the model's scheduler: its pending tokens are decoded in the shared batch with every other generation's step,
so many guests' sampling loops decode together, and reading right after `append-tokens` costs no second decode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmhost.domain.types import FinishReason, InferencingParams, StreamDone, TopLogprob
from llmhost.engine.local.job import LlamaGeneration, LlamaModel
from llmhost.engine.local.sequence_state import SeqState

_ONE_STEP = InferencingParams(max_tokens=1)


class NextTokenRead(LlamaGeneration):
    """Decode `state`'s pending tokens (its last token again when all are cached: its logits are gone) and read
    the `top` most likely next tokens from the raw distribution. The sequence is left unchanged."""

    reports_usage = False  # nothing is generated: no tokens to count

    def __init__(self, model: LlamaModel, state: SeqState, top: int, on_end: Callable[[SeqState], None]) -> None:
        super().__init__(model, state, _ONE_STEP, on_end=on_end)
        self.top = top
        self.result: tuple[TopLogprob, ...] = ()
        self.follow_up = True  # the guest's loop comes back with the next read on this sequence
        self.defers = False  # it reads the row itself, at once

    def start(self) -> None:  # no sampler: nothing is sampled here
        self.model.unevaluate_last(self.state)

    def window_full(self) -> bool:  # a full window still has a next-token distribution
        return False

    def on_logits(self, row: int, mask: Any) -> bool:
        _, self.result = self.model.top_logprobs(self.model.decoder.logits(row), self.top)
        if self.push(StreamDone(finish_reason=FinishReason.STOP, usage=self.text.usage)):
            self.model.scheduler.readers.append(self)
        return True

    def read(self) -> list[TopLogprob]:
        """Run it (on this thread when it is the one waiting) and return the candidates, best first."""
        for _ in self:
            pass
        return list(self.result)
