"""The pure parts of local embeddings (engine/local/embedding.py) and the `pooling` / `embeddings-only` config keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llmhost.config import ConfigError, load_config
from llmhost.domain.limits import BUILTIN_MODELS, MINILM_MODEL
from llmhost.engine.local.embedding import (
    POOLING_CLS,
    POOLING_LAST,
    POOLING_MEAN,
    choose_pooling,
    combine,
    next_group,
)


def pack(lengths: list[int], n_batch: int, n_seq: int) -> list[list[int]]:
    """Every group `next_group` makes, in order, when each decode call may hold `n_batch` tokens (as
    LlamaDecoder.embed walks the texts)."""
    groups: list[list[int]] = []
    start = 0
    while start < len(lengths):
        end = next_group(lengths, start, n_batch, n_seq)
        groups.append(list(range(start, end)))
        start = end
    return groups


def test_pack_bounds_tokens_and_sequences() -> None:
    assert pack([3, 3, 3], 6, 64) == [[0, 1], [2]]
    assert pack([1] * 5, 100, 2) == [[0, 1], [2, 3], [4]]
    assert pack([2, 10, 2], 6, 64) == [[0], [1], [2]]  # a text over the batch is a group alone
    assert pack([0, 6, 0], 6, 64) == [[0, 1, 2]]  # empty texts take no tokens
    assert pack([], 6, 64) == []
    lengths = [5, 1, 7, 3, 3, 2, 6, 6, 1]
    groups = pack(lengths, 8, 3)
    assert [i for g in groups for i in g] == list(range(len(lengths)))  # every text once, in order
    assert all(sum(lengths[i] for i in g) <= 8 and len(g) <= 3 for g in groups if len(g) > 1)


def test_next_group_takes_a_smaller_budget_while_generations_wait() -> None:
    lengths = [10] * 20
    assert next_group(lengths, 0, 512, 64) == 20  # alone: as many as fit
    assert next_group(lengths, 0, 64, 64) == 6  # shared: short calls
    assert next_group(lengths, 3, 5, 64) == 4  # the first text always goes, whatever the budget


def test_combine_chunks() -> None:
    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    assert combine(POOLING_MEAN, [(a, 3), (b, 1)]).tolist() == [0.75, 0.25]  # token-weighted
    assert combine(POOLING_CLS, [(a, 3), (b, 1)]) is a
    assert combine(POOLING_LAST, [(a, 3), (b, 1)]) is b


def test_choose_pooling() -> None:
    assert choose_pooling("m", None, None) == POOLING_MEAN  # a generative model records none: mean, as before
    assert choose_pooling("m", None, 0) == POOLING_MEAN
    assert choose_pooling("m", None, POOLING_CLS) == POOLING_CLS  # the GGUF's
    assert choose_pooling("m", "last", POOLING_CLS) == POOLING_LAST  # the config wins
    with pytest.raises(ValueError, match=r"`models\.m\.pooling`"):
        choose_pooling("m", None, 4)  # rank: a reranker's score, not an embedding


def test_config_keys(tmp_path: Path) -> None:
    path = tmp_path / "llmhost.toml"
    path.write_text('[models.e]\npath = "e.gguf"\npooling = "cls"\nembeddings-only = true\n')
    model = load_config(path).models["e"]
    assert model.pooling == "cls" and model.embeddings_only
    assert MINILM_MODEL in BUILTIN_MODELS and MINILM_MODEL in load_config(path).models
    path.write_text('[models.e]\npath = "e.gguf"\npooling = "max"\n')
    with pytest.raises(ConfigError, match=r"`models\.e\.pooling`"):
        load_config(path)


def test_bert_vocabulary_follows_llama_cpps_rules() -> None:
    """convert_bert: special tokens kept and typed CONTROL, `##` dropped, a leading U+2581 on every other piece."""
    import gguf

    from llmhost.engine.local.convert_bert import vocabulary

    tokenizer = {
        "model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[CLS]": 1, "hello": 2, "##ing": 3, "[unused0]": 4}},
        "added_tokens": [{"id": 0, "special": True}, {"id": 1, "special": True}],
    }
    tokens, types = vocabulary(tokenizer)
    assert tokens == ["[PAD]", "[CLS]", "\u2581hello", "ing", "\u2581[unused0]"]
    control, normal = int(gguf.TokenType.CONTROL), int(gguf.TokenType.NORMAL)
    assert types == [control, control, normal, normal, normal]
