"""A GGUF file's scalar and string metadata, read from its header without loading the model (`llmhost models`
and a model's kind need a few keys; llama.cpp would map the whole file and build its vocabulary)."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

from llmhost.engine.local.gguf import GgufError

# struct formats of the fixed-size value types (u8 i8 u16 i16 u32 i32 f32 bool, u64 i64 f64).
_FORMAT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# `general.file_type` (llama.cpp's `enum llama_ftype`) -> the quantization's usual name.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS",
    20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
}  # fmt: skip


def read_metadata(path: Path) -> dict[str, Any]:
    """Every metadata key whose value is a number, a bool or a string (arrays, e.g. the vocabulary, are skipped).
    Raises `GgufError` for a file that is not GGUF, `OSError` for one that cannot be read."""
    if path.stat().st_size < 24:
        raise GgufError("truncated GGUF header (shorter than 24 bytes)")
    with (
        path.open("rb") as file,
        mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        memoryview(mapped) as data,
    ):
        try:
            return _read(data)
        except (struct.error, UnicodeDecodeError) as error:
            raise GgufError(f"truncated or damaged GGUF header ({error})") from None


def _read(data: memoryview) -> dict[str, Any]:
    if bytes(data[:4]) != b"GGUF":
        raise GgufError("not a GGUF file (no GGUF magic)")
    version, _n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    if version < 2:
        raise GgufError(f"GGUF version {version} is not supported (2 or later)")
    found: dict[str, Any] = {}
    at = 24
    for _ in range(n_kv):
        key, at = _string(data, at)
        (kind,) = struct.unpack_from("<I", data, at)
        value, at = _value(data, at + 4, kind)
        if value is not _SKIPPED:
            found[key] = value
    return found


_SKIPPED = object()


def _string(data: memoryview, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", data, at)
    end = at + 8 + length
    if end > len(data):
        raise GgufError("truncated GGUF header (a string runs past the end)")
    return bytes(data[at + 8 : end]).decode("utf-8"), end


def _value(data: memoryview, at: int, kind: int) -> tuple[Any, int]:
    if kind in _FORMAT:
        (value,) = struct.unpack_from(_FORMAT[kind], data, at)
        return value, at + struct.calcsize(_FORMAT[kind])
    if kind == _STRING:
        return _string(data, at)
    if kind == _ARRAY:
        item, count = struct.unpack_from("<IQ", data, at)
        at += 12
        if item in _FORMAT:
            return _SKIPPED, at + struct.calcsize(_FORMAT[item]) * count
        for _ in range(count):
            _, at = _value(data, at, item)
        return _SKIPPED, at
    raise GgufError(f"unknown GGUF metadata value type {kind}")
