"""The GGUF header reader (engine/local/gguf.py) against files written here, byte by byte, from the format's
description: metadata of every value kind is skipped, and the matrices' weight types come back."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmhost.engine.local.gguf import GgufError, matrix_types
from llmhost.engine.local.llama_decoder import rows_alike


def text(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


# (kind, encoded value) for each metadata value kind the format has
VALUES = [
    (0, struct.pack("<B", 7)),
    (1, struct.pack("<b", -7)),
    (2, struct.pack("<H", 7)),
    (3, struct.pack("<h", -7)),
    (4, struct.pack("<I", 7)),
    (5, struct.pack("<i", -7)),
    (6, struct.pack("<f", 0.5)),
    (7, struct.pack("<?", True)),
    (8, text("a value")),
    (9, struct.pack("<IQ", 8, 3) + text("tok") + text("") + text("pièce")),  # strings (a vocabulary)
    (9, struct.pack("<IQ", 5, 2) + struct.pack("<ii", 1, 2)),
    (9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 4, 1) + struct.pack("<I", 1) + struct.pack("<IQ", 8, 0)),
    (10, struct.pack("<Q", 7)),
    (11, struct.pack("<q", -7)),
    (12, struct.pack("<d", 0.5)),
]


def gguf(metadata: list[tuple[int, bytes]], tensors: list[tuple[list[int], int]], version: int = 3) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))
    for i, (kind, value) in enumerate(metadata):
        out += text(f"key.{i}") + struct.pack("<I", kind) + value
    for i, (dims, kind) in enumerate(tensors):
        out += text(f"blk.{i}.weight") + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", kind, 32 * i)
    return out + b"\0" * 64  # alignment padding and (no) tensor data


@given(
    st.lists(st.sampled_from(VALUES), max_size=12),
    st.lists(st.tuples(st.lists(st.integers(1, 4096), min_size=1, max_size=4), st.integers(0, 41)), max_size=12),
)
def test_the_matrices_types_are_read_past_any_metadata(
    tmp_path_factory: pytest.TempPathFactory, metadata: list[tuple[int, bytes]], tensors: list[tuple[list[int], int]]
) -> None:
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    path.write_bytes(gguf(metadata, tensors))
    assert matrix_types(path) == {kind for dims, kind in tensors if len(dims) >= 2}


def test_what_is_not_a_readable_gguf_header_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    whole = gguf(VALUES, [([640, 1024], 12)])
    for data, message in [
        (b"GGML" + whole[4:], "no GGUF magic"),
        (gguf([], [], version=1), "version 1"),
        (whole[:40], "truncated"),
        (b"", "truncated"),
        (whole[:24] + text("key") + struct.pack("<I", 13), "value type 13"),
    ]:
        path.write_bytes(data)
        with pytest.raises(GgufError, match=message):
            matrix_types(path)


def test_rows_alike_follows_the_kernels_of_the_weight_types() -> None:
    q4_1, q8_0, q4_k, q6_k, f16 = 3, 8, 12, 14, 1
    assert rows_alike({q4_1, q8_0}, 512, offloaded=False) == 512  # the same bits at any number of rows
    assert rows_alike({q8_0, q4_k, q6_k}, 512, offloaded=False) == 7  # a tiled kernel from 8 rows on
    assert rows_alike({q8_0, f16}, 512, offloaded=False) == 1  # not measured: each row alone
    assert rows_alike({q4_1}, 512, offloaded=True) == 1  # the GPU's kernels: not measured
