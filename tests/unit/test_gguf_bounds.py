"""Hostile GGUF headers (engine/local/gguf.py, gguf_meta.py): deep nesting, huge strings and counts are one-line
`GgufError`s, read without recursion and without allocating what the header announces; `llmhost models` and a load
report them in one line. (`pull` removing such a file: tests/integration/test_pull_hostile.py.)"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmhost.cli import cli
from llmhost.engine.local import gguf as gguf_module
from llmhost.engine.local.gguf import GgufError, matrix_types
from llmhost.engine.local.gguf_meta import read_metadata

NESTED = 5_000


def text(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def header(*metadata: tuple[str, int, bytes]) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata))
    for key, kind, value in metadata:
        out += text(key) + struct.pack("<I", kind) + value
    return out + b"\0" * 32


def nested_arrays(depth: int) -> bytes:
    """An array of an array of ... of an empty u32 array: 12 bytes a level (5,000 levels: 60 KB)."""
    return struct.pack("<IQ", 9, 1) * (depth - 1) + struct.pack("<IQ", 4, 0)


def deep_gguf(path: Path, depth: int = NESTED) -> Path:
    path.write_bytes(header(("general.architecture", 8, text("llama")), ("deep", 9, nested_arrays(depth))))
    return path


@pytest.mark.parametrize("read", [read_metadata, matrix_types])
def test_5000_nested_arrays_are_a_one_line_error_not_a_recursion_error(tmp_path: Path, read: object) -> None:
    path = deep_gguf(tmp_path / "deep.gguf")
    assert 55_000 < path.stat().st_size < 65_000
    with pytest.raises(GgufError, match=f"nested deeper than {gguf_module.MAX_ARRAY_DEPTH}") as caught:
        read(path)  # type: ignore[operator]
    assert "\n" not in str(caught.value)


def test_nesting_within_the_bound_is_read(tmp_path: Path) -> None:
    path = deep_gguf(tmp_path / "ok.gguf", depth=gguf_module.MAX_ARRAY_DEPTH)
    assert read_metadata(path) == {"general.architecture": "llama"} and matrix_types(path) == set()


def test_a_512_mb_string_is_refused_without_being_read(tmp_path: Path) -> None:
    """The file really holds the 512 MB (sparse: no disk used); the reader refuses it from its length alone."""
    size = 512 << 20
    path = tmp_path / "big-string.gguf"
    with path.open("wb") as file:
        file.write(header(("tokenizer.chat_template", 8, struct.pack("<Q", size)))[:-32])
        file.truncate(file.tell() + size + 32)
    tracemalloc.start()
    try:
        with pytest.raises(GgufError, match=f"string of {size} bytes"):
            read_metadata(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (struct.pack("<IQ", 8, 1 << 40), "array of 1099511627776 items"),  # strings: would loop to the end
        (struct.pack("<IQ", 4, 1 << 60), "array of"),  # u32s: past any file
    ],
    ids=["strings", "u32s"],
)
def test_huge_counts_are_refused_by_name(tmp_path: Path, value: bytes, says: str) -> None:
    path = tmp_path / "count.gguf"
    path.write_bytes(header(("tokenizer.ggml.tokens", 9, value)))
    for read in (read_metadata, matrix_types):
        with pytest.raises(GgufError, match=says):
            read(path)


def test_huge_key_and_tensor_counts_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 62) + b"\0" * 64)
    with pytest.raises(GgufError, match="metadata keys"):
        read_metadata(path)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 62, 0) + b"\0" * 64)
    with pytest.raises(GgufError, match="tensors"):
        matrix_types(path)


def test_models_lists_a_hostile_gguf_without_a_traceback(tmp_path: Path) -> None:
    model = deep_gguf(tmp_path / "deep.gguf")
    config = tmp_path / "llmhost.toml"
    config.write_text(f'[models.deep]\npath = "{model}"\n')
    result = CliRunner().invoke(cli, ["-c", str(config), "models"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [row] = [line for line in result.stdout.splitlines() if line.startswith("deep ")]
    assert str(model) in row and "Traceback" not in result.output


def test_loading_a_hostile_gguf_is_a_one_line_error(tmp_path: Path) -> None:
    model = deep_gguf(tmp_path / "deep.gguf")
    config = tmp_path / "llmhost.toml"
    config.write_text(f'[models.deep]\npath = "{model}"\n')
    result = CliRunner().invoke(cli, ["-c", str(config), "infer", "deep", "hi"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "llmhost: error:" in result.stderr and "deep.gguf" in result.stderr and "Traceback" not in result.output
