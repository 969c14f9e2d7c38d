"""Which files of a Hub repo `llmhost pull REPO[:QUANT|FILE]` takes (engine/hub.py, engine/hub_pull.py), and a
model's kind from a GGUF's signals (engine/kinds.py)."""

from __future__ import annotations

import pytest

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError
from llmhost.domain.kinds import ModelKind
from llmhost.engine.hub_download import hub_file, plain_path
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


def test_the_config_table_holds_only_names_toml_takes_as_they_are() -> None:
    """(End to end, with `--config` and the config loader: tests/integration/test_pull_hostile.py.)"""
    table = config_table("qwen2.5", "a/b-GGUF", "refs/pr/1", "sub/x-Q4_K_M.gguf")
    assert (
        table == '[models."qwen2.5"]\nhf-repo = "a/b-GGUF"\nhf-file = "sub/x-Q4_K_M.gguf"\nhf-revision = "refs/pr/1"\n'
    )
    for args in [('x"', "a/b", "main", "f.gguf"), ("x", "a/b", "main", 'f".gguf'), ("x", "a/b", "m\n[sandbox]", "f")]:
        with pytest.raises(EngineError, match="config table cannot hold"):
            config_table(*args)


@pytest.mark.parametrize("name", ["../x.gguf", "a/../../x.gguf", "/x.gguf", "a//x.gguf", "a\\x.gguf", "x\n.gguf", ""])
def test_names_that_are_not_plain_are_refused(name: str) -> None:
    with pytest.raises(EngineError, match="not a plain name"):
        plain_path(name, "the file name")
    assert plain_path("sub/x-Q4_K_M.gguf", "the file name") == "sub/x-Q4_K_M.gguf"


def test_what_the_hub_says_of_a_file_is_checked_before_it_names_a_path() -> None:
    sha, commit = "a" * 64, "0" * 40
    assert hub_file("a/b", "x.gguf", commit, sha, 10).sha256 == sha
    for bad, says in [
        (("../b", "x.gguf", commit, sha, 10), "not a Hub repo name"),
        (("a/b", "x.gguf", "../../x", sha, 10), "not a commit hash"),
        (("a/b", "x.gguf", commit, "../../x", 10), "no sha256"),
        (("a/b", "x.gguf", commit, None, 10), "no sha256"),
        (("a/b", "x.gguf", commit, sha, None), "no size"),
        (("a/b", "x.gguf", commit, sha, True), "no size"),
    ]:
        with pytest.raises(EngineError, match=says):
            hub_file(*bad)  # type: ignore[arg-type]


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
