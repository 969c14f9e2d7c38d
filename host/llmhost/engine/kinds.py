"""Each configured model's kind and file facts, without loading it (`llmhost models`, WIT `get-model-kind`, the
base-model chat warning). The built-ins' are constants; another GGUF's are read from its header."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmhost.config import ModelConfig
from llmhost.domain.kinds import ModelKind
from llmhost.domain.limits import BUILTIN_FILES, BUILTIN_KINDS


@dataclass(frozen=True)
class FileFacts:
    """What `llmhost models` shows of a model's file (None: unknown, e.g. a remote model or a missing file)."""

    kind: ModelKind
    source: str  # "built-in", the file's path, "hf:REPO", or the remote server
    size: int | None = None
    quantization: str | None = None
    trained_context: int | None = None
    chat_template: bool | None = None
    kind_known: bool = True  # False: no file, config or name says (`kind` is then BASE, `llmhost models` "unknown")


def kind_from_metadata(meta: dict[str, Any]) -> ModelKind:
    """The GGUF's signals: non-causal attention or a pooling type means an embedding model; a chat template of its
    own an instruct one (`general.finetune` is no signal: SmolLM2-Instruct's says `8k-lc100k-mix1-ep2`)."""
    arch = meta.get("general.architecture", "")
    pooling = meta.get(f"{arch}.pooling_type")
    if meta.get(f"{arch}.attention.causal") is False or (isinstance(pooling, int) and pooling > 0):
        return ModelKind.EMBEDDING
    if meta.get("tokenizer.chat_template"):
        return ModelKind.INSTRUCT
    return ModelKind.BASE


# Words of a repo's name that say what the model is for (a model not downloaded yet has no header to read).
_EMBEDDING_WORDS = re.compile(r"embed|minilm|mpnet|(^|[-_.])(bge|gte|e5)([-_.]|$)", re.IGNORECASE)
_INSTRUCT_WORDS = re.compile(r"instruct|chat|(^|[-_.])(it|sft|dpo|rlhf)([-_.]|$)", re.IGNORECASE)
_BASE_WORDS = re.compile(r"(^|[-_.])(base|pretrained?)([-_.]|$)", re.IGNORECASE)


def kind_from_name(repo: str) -> ModelKind | None:
    """The kind a repo's name says (`Qwen2.5-0.5B-Instruct-GGUF`, `gemma-2-2b-it`, `bge-small-en`), else None."""
    name = repo.rsplit("/", 1)[-1]
    if _EMBEDDING_WORDS.search(name):
        return ModelKind.EMBEDDING
    if _INSTRUCT_WORDS.search(name):
        return ModelKind.INSTRUCT
    return ModelKind.BASE if _BASE_WORDS.search(name) else None


def file_facts(name: str, config: ModelConfig, path: Path | None = None) -> FileFacts:
    """`path`: the model's file when known (a configured `path`, a cached Hub download); else the config's."""
    override = ModelKind(config.kind) if config.kind is not None else None
    if config.backend == "openai":
        # A remote server applies its own chat template: served models are taken as chat models unless told.
        kind = override or (ModelKind.EMBEDDING if config.embeddings_only else ModelKind.INSTRUCT)
        return FileFacts(kind, ", ".join(config.base_urls))
    path = path or config.path
    if path is None and name in BUILTIN_KINDS:
        size, quant, context, template = BUILTIN_FILES[name]
        kind = override or _configured(config) or ModelKind(BUILTIN_KINDS[name])
        return FileFacts(kind, "built-in", size, quant, context, template)
    meta = _metadata(path)
    if meta is None:  # no file yet (a Hub model not pulled) or an unreadable one: the config, else the repo's name
        guess = override or _configured(config) or (kind_from_name(config.hf_repo) if config.hf_repo else None)
        return FileFacts(guess or ModelKind.BASE, str(path) if path else "-", kind_known=guess is not None)
    from llmhost.engine.local.gguf_meta import FILE_TYPES

    arch = meta.get("general.architecture", "")
    file_type = meta.get("general.file_type")
    trained = meta.get(f"{arch}.context_length")
    assert path is not None
    return FileFacts(
        override or _configured(config) or kind_from_metadata(meta),
        str(path),
        path.stat().st_size,
        FILE_TYPES.get(file_type, str(file_type)) if isinstance(file_type, int) else None,
        trained if isinstance(trained, int) else None,
        bool(meta.get("tokenizer.chat_template")),
    )


def _configured(config: ModelConfig) -> ModelKind | None:
    return ModelKind.EMBEDDING if config.embeddings_only else None


def _metadata(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from llmhost.engine.local.gguf import GgufError
    from llmhost.engine.local.gguf_meta import read_metadata

    try:
        return read_metadata(path)
    except (OSError, GgufError):
        return None  # a missing or damaged file is reported when the model is loaded
