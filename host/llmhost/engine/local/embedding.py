"""The pure parts of local embeddings: which pooling a model gets, which texts share a decode call, and how the
pooled vectors of a text split over several calls are put together. llama_decoder.py does the llama.cpp calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmhost.domain.limits import model_key

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
