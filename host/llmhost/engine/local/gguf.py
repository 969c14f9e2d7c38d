"""A GGUF file's header, walked without loading any data: the weight types of its matrices (llama.cpp's API does not
list tensors), and the walker gguf_meta reads metadata with.

Deterministic mode needs the weight types: which kernels llama.cpp's CPU backend takes for a matrix product depends
on the weight type and the number of rows (llama_decoder.rows_alike).

The header comes from anywhere (a Hub download, a file named in a config), so it is walked iteratively and within
bounds: a damaged or hostile header is a `GgufError` (one line), never a RecursionError or a huge allocation.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

# Sizes of the fixed-size GGUF metadata value types (u8 i8 u16 i16 u32 i32 f32 bool, u64 i64 f64).
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9

# Bounds of what a header may hold. Real files stay far below them: llama.cpp reads no nested arrays at all, a
# vocabulary holds ~260k tokens, a chat template ~10 KB, a model ~50 keys and a few thousand tensors.
MAX_ARRAY_DEPTH = 8  # arrays of arrays, nested
MAX_ARRAY_COUNT = 1 << 24  # items in one array
MAX_STRING_BYTES = 1 << 22  # one string (a key or a value): 4 MiB
MAX_METADATA_KEYS = 1 << 16
MAX_TENSORS = 1 << 20
MAX_HEADER_ITEMS = 1 << 25  # strings and arrays visited in one header: bounded work on a large hostile file


T = TypeVar("T")


class GgufError(ValueError):
    pass


class HeaderWalk:
    """A cursor over a GGUF header (`data` is the whole file, mapped): reads and skips values within the bounds."""

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.at = 0
        self._items = 0

    def start(self) -> tuple[int, int]:
        """Checks the magic and version; (tensor count, metadata key count)."""
        if bytes(self.data[:4]) != b"GGUF":
            raise GgufError("not a GGUF file (no GGUF magic)")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", self.data, 4)
        if version < 2:
            raise GgufError(f"GGUF version {version} is not supported (2 or later)")
        if n_kv > MAX_METADATA_KEYS:
            raise GgufError(f"the GGUF header announces {n_kv} metadata keys (at most {MAX_METADATA_KEYS})")
        if n_tensors > MAX_TENSORS:
            raise GgufError(f"the GGUF header announces {n_tensors} tensors (at most {MAX_TENSORS})")
        self.at = 24
        return n_tensors, n_kv

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def string(self) -> bytes:
        """The next string's bytes, its length checked against `MAX_STRING_BYTES` before anything is copied."""
        start = self.at + 8
        self.skip_string()
        return bytes(self.data[start : self.at])

    def skip_string(self) -> None:
        (length,) = self.unpack("<Q")
        if length > MAX_STRING_BYTES:
            raise GgufError(f"a GGUF header string of {length} bytes (at most {MAX_STRING_BYTES})")
        if self.at + length > len(self.data):
            raise GgufError("truncated GGUF header (a string runs past the end)")
        self.at += length
        self._count()

    def skip_value(self, kind: int) -> None:
        """Skips one value of type `kind`: arrays (of arrays) with a stack of the open ones, not recursion."""
        open_arrays: list[list[int]] = []  # [item type, items left] of each array being skipped, innermost last
        while True:
            if kind in _SCALAR:
                self.at += _SCALAR[kind]
            elif kind == _STRING:
                self.skip_string()
            elif kind == _ARRAY:
                item, count = self.unpack("<IQ")
                self._count()
                if count > MAX_ARRAY_COUNT:
                    raise GgufError(f"a GGUF header array of {count} items (at most {MAX_ARRAY_COUNT})")
                if item in _SCALAR:
                    self.at += _SCALAR[item] * count
                elif count:
                    if len(open_arrays) >= MAX_ARRAY_DEPTH:
                        raise GgufError(f"GGUF header arrays nested deeper than {MAX_ARRAY_DEPTH}")
                    open_arrays.append([item, count])
            else:
                raise GgufError(f"unknown GGUF metadata value type {kind}")
            if self.at > len(self.data):
                raise GgufError("truncated GGUF header (a value runs past the end)")
            while open_arrays and open_arrays[-1][1] == 0:
                open_arrays.pop()
            if not open_arrays:
                return
            open_arrays[-1][1] -= 1
            kind = open_arrays[-1][0]

    def _count(self) -> None:
        self._items += 1
        if self._items > MAX_HEADER_ITEMS:
            raise GgufError(f"the GGUF header holds more than {MAX_HEADER_ITEMS} strings and arrays")


def walk_header(path: Path, read: Callable[[HeaderWalk], T]) -> T:
    """`read(walk)` over the file's header, mapped (nothing is loaded). Raises `GgufError` for a file that is not
    GGUF or whose header is damaged or past the bounds, `OSError` for one that cannot be read."""
    if path.stat().st_size < 24:
        raise GgufError("truncated GGUF header (shorter than 24 bytes)")
    with (
        path.open("rb") as file,
        mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        memoryview(mapped) as data,  # released before the map closes, on errors too
    ):
        try:
            return read(HeaderWalk(data))
        except (struct.error, UnicodeDecodeError) as error:
            raise GgufError(f"truncated or damaged GGUF header ({error})") from None


def matrix_types(path: Path) -> set[int]:
    """The ggml types (`enum ggml_type`) of the file's tensors of two or more dimensions: the weights of matrix
    products (one-dimensional tensors are norms and biases). Raises `GgufError` for a file that is not GGUF."""
    return walk_header(path, _matrix_types)


def _matrix_types(walk: HeaderWalk) -> set[int]:
    n_tensors, n_kv = walk.start()
    for _ in range(n_kv):
        walk.skip_string()  # the key
        (kind,) = walk.unpack("<I")
        walk.skip_value(kind)
    types: set[int] = set()
    for _ in range(n_tensors):
        walk.skip_string()  # the name
        (n_dims,) = walk.unpack("<I")
        walk.at += 8 * n_dims
        (kind,) = walk.unpack("<I")
        walk.at += 8  # the data offset
        if n_dims >= 2:
            types.add(kind)
    return types
