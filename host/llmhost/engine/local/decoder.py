"""The decoder protocol: what the engine needs from a model runtime, and nothing more.

Token rows in, logits rows out, KV-cache operations per sequence slot, and a vocabulary. The scheduler, the slot
pool, sequences and generations are written against it, so they run the same on llama.cpp (`LlamaDecoder`) and
on a deterministic fake (`FakeDecoder`) that makes fast unit tests of scheduling, swapping, prefix reuse and
exact rewind possible without a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from llmhost.domain.types import InferencingParams

if TYPE_CHECKING:
    from llmhost.engine.chat_template import TemplateInfo

# One row of a batch: (slot, position of the first token, tokens).
BatchRow = tuple[int, int, Sequence[int]]


class Sampler(Protocol):
    """A sampler chain for one generation (penalties, top-k/top-p, temperature, a seeded draw, or greedy)."""

    def accept(self, token: int) -> None:
        """Feed a token to the penalty window (the prompt's, then every sampled one)."""
        ...

    # `sample(row)` is the raw row's first highest logit and `accept` changes nothing (greedy without bias or
    # penalties): the scheduler may then take the token from `Decoder.argmax_rows` with the step's other rows.
    plain_greedy: bool

    def sample(self, row: int) -> int:
        """Sample from the logits of output `row` of the last decode (after any in-place changes to them)."""
        ...

    def close(self) -> None: ...


class Decoder(Protocol):
    n_vocab: int
    n_ctx: int  # the window of one sequence
    n_batch: int  # rows per decode
    n_slots: int
    # The most tokens one decode call may hold for its kernels to compute every row exactly as they would the row
    # alone (deterministic mode groups one-token rows in calls of at most this many; 1: every row alone).
    invariant_rows: int

    # -- vocabulary -------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool) -> list[int]: ...

    def piece(self, token: int) -> bytes: ...

    def max_token_bytes(self) -> int:
        """The most bytes of text one token stands for: texts longer than `room` × this are refused untokenized."""
        ...

    def is_eog(self, token: int) -> bool: ...

    def eos(self) -> int: ...

    def chat_template(self) -> TemplateInfo:
        """The model file's chat template (`source` empty when it has none) and the token texts templates need
        (`bos_token`, `eos_token`, whether tokenizing adds BOS, the end-of-turn token's text)."""
        ...

    # -- decoding ---------------------------------------------------------------------------------------
    def decode(self, rows: Sequence[BatchRow], logits_at: set[int]) -> int:
        """Evaluate the rows in one batch; `logits_at`: batch indices whose logits are kept (readable with
        `logits`). Returns 0, or 1 when the KV cache has no room for the batch (nothing was evaluated)."""
        ...

    def logits(self, index: int) -> Any:
        """The logits of batch index `index` of the last decode: a writable float32 numpy array."""
        ...

    def argmax_rows(self, rows: Sequence[int]) -> list[int]:
        """The first highest logit's token of each listed output row of the last decode (a step's greedy rows,
        in one pass)."""
        ...

    def new_sampler(self, params: InferencingParams) -> Sampler: ...

    # -- the KV cache, per slot -------------------------------------------------------------------------
    def seq_rm(self, slot: int, start: int) -> None:
        """Drop the slot's cells from position `start` on."""
        ...

    def seq_cp(self, source: int, target: int, end: int) -> None:
        """Make `target` hold `source`'s cells [0, end) (shared, no copy, in a unified cache)."""
        ...

    def save(self, slot: int) -> bytes | None:
        """The slot's KV state as bytes (to swap it out to host memory); None if it cannot be saved."""
        ...

    def restore(self, slot: int, data: bytes) -> bool:
        """Load saved KV state into `slot`; False if that failed (the tokens are then evaluated again)."""
        ...

    def close(self) -> None: ...
