"""Which files of a Hub repo `llmhost pull REPO[:QUANT|FILE]` takes (engine/hub.py, engine/hub_pull.py), and a
model's kind from a GGUF's signals (engine/kinds.py)."""

from __future__ import annotations

import pytest

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError
from llmhost.domain.kinds import ModelKind
from llmhost.engine.hub_pull import _choose, config_table, model_name, parse_ref
from llmhost.engine.kinds import kind_from_metadata

NAMES = [
    "README.md",
    "Qwen2.5-0.5B-Instruct-Q4_K_M.gguf",
    "Qwen2.5-0.5B-Instruct-Q4_K_S.gguf",
    "Qwen2.5-0.5B-Instruct-Q8_0.gguf",
    "big/Qwen2.5-0.5B-Instruct-Q6_K-00001-of-00002.gguf",
    "big/Qwen2.5-0.5B-Instruct-Q6_K-00002-of-00002.gguf",
]


def test_a_quantization_picks_its_file_and_a_split_gguf_comes_whole() -> None:
    assert _choose("r/x", NAMES, "q4_k_m") == ["Qwen2.5-0.5B-Instruct-Q4_K_M.gguf"]  # not Q4_K_S: a whole word
    assert _choose("r/x", NAMES, "*Q8_0.gguf") == ["Qwen2.5-0.5B-Instruct-Q8_0.gguf"]
    parts = ["big/Qwen2.5-0.5B-Instruct-Q6_K-00001-of-00002.gguf", "big/Qwen2.5-0.5B-Instruct-Q6_K-00002-of-00002.gguf"]
    assert _choose("r/x", NAMES, "Q6_K") == parts
    assert _choose("r/x", NAMES, "Qwen2.5-0.5B-Instruct-Q6_K-00001-of-00002.gguf") == parts


def test_choosing_errors_list_what_there_is() -> None:
    with pytest.raises(EngineError, match="it has: Q4_K_M, Q4_K_S, Q6_K, Q8_0"):
        _choose("r/x", NAMES, "Q2_K")
    with pytest.raises(EngineError, match="matches several files"):
        _choose("r/x", NAMES, None)
    with pytest.raises(EngineError, match="has no GGUF file"):
        _choose("r/x", ["README.md"], None)


def test_refs_names_and_the_table() -> None:
    repo = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"
    assert parse_ref(f"{repo}:Q4_K_M") == (repo, "Q4_K_M")
    assert parse_ref("a/b") == ("a/b", None)
    assert model_name("bartowski/Qwen2.5-0.5B-Instruct-GGUF") == "qwen2.5-0.5b-instruct"
    with pytest.raises(EngineError):
        parse_ref("no-owner")


def test_hub_config_keys_are_checked() -> None:
    with pytest.raises(ValueError, match="`hf-repo` and `path`"):
        ModelConfig.model_validate({"hf-repo": "a/b", "path": "x.gguf"})
    with pytest.raises(ValueError, match="need `hf-repo`"):
        ModelConfig.model_validate({"hf-file": "*.gguf"})
    assert config_table  # (the table's text is checked end to end in tests/integration/test_pull.py)


def test_kind_config_conflicts_name_both_keys() -> None:
    with pytest.raises(ValueError, match='`kind = "instruct"` and `embeddings-only = true`'):
        ModelConfig.model_validate({"kind": "instruct", "embeddings-only": True})
    assert ModelConfig.model_validate({"kind": "embedding"}).embeddings_only


@pytest.mark.parametrize(
    ("meta", "kind"),
    [
        ({"general.architecture": "llama", "tokenizer.chat_template": "{{ x }}"}, ModelKind.INSTRUCT),
        ({"general.architecture": "gemma3", "general.finetune": "it"}, ModelKind.BASE),  # finetune is no signal
        ({"general.architecture": "bert", "bert.attention.causal": False}, ModelKind.EMBEDDING),
        ({"general.architecture": "qwen3", "qwen3.pooling_type": 3, "tokenizer.chat_template": "x"}, "embedding"),
    ],
)
def test_kind_from_gguf_signals(meta: dict[str, object], kind: ModelKind) -> None:
    assert kind_from_metadata(meta) == kind
