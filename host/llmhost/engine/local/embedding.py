"""The pure parts of local embeddings: which pooling a model gets, which texts share a decode call, how the
pooled vectors of a text split over several calls are put together, and when an embeddings call's next decode call
(a batch) may take the model from the generations sharing it. llama_decoder.py does the llama.cpp calls;
model_lock.EmbeddingTurns waits for the turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmhost.domain.limits import EMBEDDING_YIELD_S, model_key

# enum llama_pooling_type, as llama.cpp and the GGUF key `<arch>.pooling_type` number them.
POOLING_NONE = 0
POOLING_MEAN = 1
POOLING_CLS = 2
POOLING_LAST = 3
POOLING_BY_NAME = {"mean": POOLING_MEAN, "cls": POOLING_CLS, "last": POOLING_LAST}
POOLING_NAMES = {value: name for name, value in POOLING_BY_NAME.items()}


def choose_pooling(model: str, configured: str | None, from_gguf: int | None) -> int:
    """The config's `pooling` if set, else the GGUF's, else mean (generative models record none). A GGUF pooling
    this host does not compute (rank: a reranker's score) is refused, naming the key that overrides it."""
    if configured is not None:
        return POOLING_BY_NAME[configured]
    if from_gguf is None or from_gguf == POOLING_NONE:
        return POOLING_MEAN
    if from_gguf not in POOLING_NAMES:
        raise ValueError(
            f"model {model!r}: its GGUF's pooling type {from_gguf} is not mean, cls or last (set "
            f"`{model_key(model, 'pooling')}` to one of them, if the model gives embeddings that way)"
        )
    return from_gguf


def next_group(lengths: Sequence[int], start: int, budget: int, n_seq: int) -> int:
    """The end of the group of texts that starts at `start` and goes to one decode call: the first text always,
    then the next ones while the group holds at most `budget` tokens and `n_seq` texts."""
    end, tokens = start + 1, lengths[start]
    while end < len(lengths) and end - start < n_seq and tokens + lengths[end] <= budget:
        tokens += lengths[end]
        end += 1
    return end


def combine(pooling: int, parts: Sequence[tuple[Any, int]]) -> Any:
    """One text's vector from the pooled vectors of its consecutive chunks (vector, token count), each chunk
    attending to the ones before it (a causal model's KV cache): mean is their token-weighted mean, CLS the first
    chunk's, last the last chunk's."""
    if pooling == POOLING_CLS:
        return parts[0][0]
    if pooling == POOLING_LAST:
        return parts[-1][0]
    total = sum(count for _, count in parts)
    return sum(vector * (count / total) for vector, count in parts)


# While generations take their share of the model, they count as still using it until their decodes have stopped
# for this long (a stream's bursts follow each other within a few milliseconds: its readers' turn).
GENERATIONS_IDLE_S = 0.05
# How often a batch waiting for its turn looks again: at once when a thread waits for the lock or a generation for
# its first step (their turn is short), else at most this often while the generations use their share.
TURN_POLL_S = 0.001
SHARE_POLL_S = 0.01


@dataclass(frozen=True)
class BatchTurn:
    """What an embeddings call's next batch sees when it would start, on a model it may share with generations."""

    waited_s: float  # since its previous batch ended (since the call was admitted, for its first)
    share_s: float  # how long its previous batch held the model (0 for its first)
    contended: bool  # another thread waits for the model lock (a generation being submitted, a step, a cancel)
    wants_step: bool  # generations wait for a decode step or are decoding (scheduler.wants_step)
    stepped: bool  # the scheduler began a step since the previous batch ended
    idle_s: float  # since the generations' last decode ended (0 while one runs)


def batch_wait(turn: BatchTurn) -> float:
    """0 when the batch starts now, else how long it waits before looking again. Fair sharing: a thread waiting for
    the model lock takes it first, and generations wanting a step get one before the batch, however many embeddings
    calls are queued (so a generation's first token waits for at most the batch under way when it came); then they
    get the model for as long as the previous batch held it, while they keep decoding (so embeddings and
    generations each have about half of it). Never longer in all than that batch, or EMBEDDING_YIELD_S."""
    if turn.waited_s >= max(turn.share_s, EMBEDDING_YIELD_S):
        return 0.0
    if turn.contended or (turn.wants_step and not turn.stepped):
        return TURN_POLL_S
    if not turn.wants_step or turn.waited_s >= turn.share_s or turn.idle_s >= GENERATIONS_IDLE_S:
        return 0.0
    return min(SHARE_POLL_S, turn.share_s - turn.waited_s, GENERATIONS_IDLE_S - turn.idle_s)
