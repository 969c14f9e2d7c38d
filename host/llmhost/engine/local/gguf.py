"""The weight types of a GGUF file's matrices, read from its header (llama.cpp's API does not list tensors).

Deterministic mode needs them: which kernels llama.cpp's CPU backend takes for a matrix product depends on the
weight type and the number of rows (llama_decoder.rows_alike). The header is read without loading any data.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

# Sizes of the fixed-size GGUF metadata value types (u8 i8 u16 i16 u32 i32 f32 bool, u64 i64 f64).
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class GgufError(ValueError):
    pass


def matrix_types(path: Path) -> set[int]:
    """The ggml types (`enum ggml_type`) of the file's tensors of two or more dimensions: the weights of matrix
    products (one-dimensional tensors are norms and biases). Raises `GgufError` for a file that is not GGUF."""
    if path.stat().st_size < 24:
        raise GgufError("truncated GGUF header (shorter than 24 bytes)")
    with (
        path.open("rb") as file,
        mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        memoryview(mapped) as data,  # released before the map closes, on errors too
    ):
        return _matrix_types(data)


def _matrix_types(data: memoryview) -> set[int]:
    try:
        if bytes(data[:4]) != b"GGUF":
            raise GgufError("not a GGUF file (no GGUF magic)")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
        if version < 2:
            raise GgufError(f"GGUF version {version} is not supported (2 or later)")
        at = 24
        for _ in range(n_kv):
            at = _skip_string(data, at)  # the key
            (kind,) = struct.unpack_from("<I", data, at)
            at = _skip_value(data, at + 4, kind)
        types: set[int] = set()
        for _ in range(n_tensors):
            at = _skip_string(data, at)  # the name
            (n_dims,) = struct.unpack_from("<I", data, at)
            at += 4 + 8 * n_dims
            (kind,) = struct.unpack_from("<I", data, at)
            at += 4 + 8  # the type, then the data offset
            if n_dims >= 2:
                types.add(kind)
        return types
    except struct.error as error:
        raise GgufError(f"truncated GGUF header ({error})") from None


def _skip_string(data: memoryview, at: int) -> int:
    (length,) = struct.unpack_from("<Q", data, at)
    if at + 8 + length > len(data):
        raise GgufError("truncated GGUF header (a string runs past the end)")
    return at + 8 + length


def _skip_value(data: memoryview, at: int, kind: int) -> int:
    if kind in _SCALAR:
        return at + _SCALAR[kind]
    if kind == _STRING:
        return _skip_string(data, at)
    if kind == _ARRAY:
        item, count = struct.unpack_from("<IQ", data, at)
        at += 12
        if item in _SCALAR:
            return at + _SCALAR[item] * count
        for _ in range(count):  # strings (a vocabulary) or nested arrays
            at = _skip_value(data, at, item)
        return at
    raise GgufError(f"unknown GGUF metadata value type {kind}")
