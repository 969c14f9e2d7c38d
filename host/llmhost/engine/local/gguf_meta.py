"""A GGUF file's scalar and string metadata, read from its header without loading the model (`llmhost models`
and a model's kind need a few keys; llama.cpp would map the whole file and build its vocabulary)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmhost.engine.local.gguf import HeaderWalk, walk_header

# struct formats of the fixed-size value types (u8 i8 u16 i16 u32 i32 f32 bool, u64 i64 f64).
_FORMAT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING = 8

# `general.file_type` (llama.cpp's `enum llama_ftype`) -> the quantization's usual name.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS",
    20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
}  # fmt: skip


def read_metadata(path: Path) -> dict[str, Any]:
    """Every metadata key whose value is a number, a bool or a string (arrays, e.g. the vocabulary, are skipped).
    Raises `GgufError` for a file that is not GGUF or whose header is damaged or past gguf.py's bounds, `OSError`
    for one that cannot be read."""
    return walk_header(path, _read)


def _read(walk: HeaderWalk) -> dict[str, Any]:
    _n_tensors, n_kv = walk.start()
    found: dict[str, Any] = {}
    for _ in range(n_kv):
        key = walk.string().decode("utf-8")
        (kind,) = walk.unpack("<I")
        if kind in _FORMAT:
            (found[key],) = walk.unpack(_FORMAT[kind])
        elif kind == _STRING:
            found[key] = walk.string().decode("utf-8")  # at most gguf.MAX_STRING_BYTES
        else:
            walk.skip_value(kind)  # arrays; an unknown type is a GgufError
    return found
