"""Backend-neutral bookkeeping of one token sequence: ids, the exact text each token stands for, scores, and
how much of it is in the model's KV cache. The rewind after a generation (exact state after a stop) is pure
and lives here too, so it is testable without a model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from llmhost.engine.generation import GenerationText


@dataclass
class SeqState:
    tokens: list[int] = field(default_factory=list)
    # token_texts[i]: the text token i stands for; "".join(token_texts) is the sequence's text, exactly.
    token_texts: list[str] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    n_kv: int = 0  # tokens[:n_kv] are in the KV cache (resident in `slot`, or saved in `saved`)
    # Deterministic mode: tokens[:aligned] were evaluated in whole position-aligned chunks (planning.aligned_after),
    # the part of this cache another prompt may reuse.
    aligned: int = 0
    slot: int | None = None
    saved: bytes | None = None  # the slot's KV state in host memory while swapped out
    busy: bool = False  # a generation runs on it: never swapped out
    greedy: bool = False  # the generation on it takes plain greedy tokens (backend sampling may choose them)
    cached: bool = False  # the leftover of a finished one-off request: only a prompt-prefix cache
    reused: int = 0  # prompt tokens taken from a cached prefix instead of being evaluated
    evaluated: int = 0  # tokens run through the model for this sequence (prefill and decode)
    submissions: int = 0  # jobs submitted to the scheduler on it so far (a follow-up read shows as one more)
    last_used: float = field(default_factory=time.monotonic)

    @property
    def text(self) -> str:
        return "".join(self.token_texts)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def append(self, tokens: Sequence[int], texts: Sequence[str], logprobs: Sequence[float | None] = ()) -> None:
        self.tokens.extend(tokens)
        self.token_texts.extend(texts)
        self.logprobs.extend(logprobs if logprobs else [None] * len(tokens))

    def truncate(self, count: int) -> None:
        del self.tokens[count:], self.token_texts[count:], self.logprobs[count:]
        self.n_kv = min(self.n_kv, count)


@dataclass(frozen=True)
class Rewind:
    """How a sequence must change after a generation so that its state is exactly its text."""

    keep: int  # generated tokens kept as they are
    kept_texts: list[str]  # their texts
    remainder: str  # returned text not covered by kept tokens: re-tokenized and fed back


def plan_rewind(state: GenerationText, end_of_generation: bool, returned: str | None = None) -> Rewind:
    """Keep the longest run of generated tokens whose text lies wholly inside the returned text; the rest of the
    returned text (the kept part of a token a stop sequence began inside) is re-tokenized by the caller.

    An end-of-generation token is never kept (its text is not returned), and neither are tokens of a character
    the token budget cut off. `returned`: the text the reader received, when a cancelled stream's reader did not
    take every chunk the generation released (default: all of it).
    """
    returned = state.text if returned is None else returned
    cut = len(returned)
    limit = len(state.token_ids) - (1 if end_of_generation else 0)
    keep = 0
    while keep < limit and state.token_complete[keep] and state.token_text_end[keep] <= cut:
        keep += 1
    ends = [0, *state.token_text_end[:keep]]
    kept_texts = [returned[ends[i] : ends[i + 1]] for i in range(keep)]
    return Rewind(keep, kept_texts, returned[ends[keep] :])
