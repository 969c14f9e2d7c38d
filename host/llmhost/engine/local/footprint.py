"""A local model's memory footprint, estimated from its GGUF header before it is loaded (the memory budget decides
whether it fits before llama.cpp maps a byte of it).

footprint = the file's size (llama.cpp maps the weights whole; on a GPU the offloaded layers' share lives in GPU
memory instead) + the KV cache: `context-length × slots` cells (one window for an embedding-only model), each
holding a key and a value row per layer, `n_head_kv × key_length` and `n_head_kv × value_length` F16 values
(llama.cpp's default cache type). Sliding-window layers (Gemma 3) are counted at the full window: an upper bound.
llama.cpp's compute buffers (a few tens of MB, growing with `batch-size`) are not counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmhost.config import ModelConfig

KV_BYTES_PER_VALUE = 2  # F16, llama.cpp's default `type_k`/`type_v`


def kv_cells(config: ModelConfig, meta: dict[str, Any]) -> int:
    """The KV cells the model's contexts hold, as llama_decoder.py sizes them: `context-length × slots` for
    generation; an embedding-only model's one window, an encoder's cut to its training context."""
    if not config.embeddings_only and meta.get(_key(meta, "attention.causal")) is not False:
        return config.context_length * config.slots
    trained = meta.get(_key(meta, "context_length"))
    causal = meta.get(_key(meta, "attention.causal")) is not False
    return config.context_length if causal or not isinstance(trained, int) else min(config.context_length, trained)


def _key(meta: dict[str, Any], key: str) -> str:
    return f"{meta.get('general.architecture', '')}.{key}"


def kv_bytes_per_cell(meta: dict[str, Any]) -> int:
    """Bytes of K and V one cell takes over every layer, from the GGUF metadata (0 when the header lacks the
    counts: then only the file is counted)."""
    arch = meta.get("general.architecture", "")

    def count(key: str, default: int = 0) -> int:
        value = meta.get(f"{arch}.{key}", default)
        return value if isinstance(value, int) and value > 0 else 0

    layers, heads, width = count("block_count"), count("attention.head_count"), count("embedding_length")
    if not (layers and heads and width):
        return 0
    # A per-layer head_count_kv is an array (read_metadata skips arrays): the query heads' count bounds it.
    kv_heads = count("attention.head_count_kv", heads)
    key = count("attention.key_length", width // heads)
    value = count("attention.value_length", width // heads)
    return layers * kv_heads * (key + value) * KV_BYTES_PER_VALUE


def footprint_bytes(path: Path, config: ModelConfig) -> int:
    """The estimate above for the GGUF at `path` (its file size alone when the header cannot be read)."""
    from llmhost.engine.local.gguf import GgufError
    from llmhost.engine.local.gguf_meta import read_metadata

    size = path.stat().st_size
    try:
        meta = read_metadata(path)
    except (GgufError, OSError):
        return size
    return size + kv_cells(config, meta) * kv_bytes_per_cell(meta)
