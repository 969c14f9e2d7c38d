"""A guest's own WIT world (`wit/` beside `app.py`): its world name, and the doc comments of the functions it exports,
which the build stores in the component for `llmhost mcp` (tool descriptions).

A compiled component keeps the types of its exports but not their doc comments, so the build appends them as a
custom section (`DOCS_SECTION`: JSON, `{"summarize": "...", "text#summarize": "..."}`; an interface's functions are
keyed `INTERFACE#FUNCTION`, with the interface's own name, without package or version). Custom sections are
ignored by runtimes, so the component stays the same component.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

DOCS_SECTION = "llmhost:export-docs"
WIT_DIR = "wit"  # a guest's own WIT package, beside app.py

_WORLD = re.compile(r"^\s*world\s+([a-z][a-z0-9-]*)\s*\{")
_INTERFACE = re.compile(r"^\s*interface\s+([a-z][a-z0-9-]*)\s*\{")
_EXPORT_INLINE = re.compile(r"^\s*export\s+([a-z][a-z0-9-]*)\s*:\s*interface\s*\{")
_EXPORT_FUNC = re.compile(r"^\s*export\s+%?([a-z][a-z0-9-]*)\s*:\s*(?:async\s+)?func\b")
_FUNC = re.compile(r"^\s*%?([a-z][a-z0-9-]*)\s*:\s*(?:async\s+)?func\b")


def wit_files(app_dir: Path) -> list[Path]:
    """The guest's own WIT files (`wit/*.wit`, not its `deps/`); empty for a guest of llmhost's worlds."""
    folder = app_dir / WIT_DIR
    return sorted(folder.glob("*.wit")) if folder.is_dir() else []


def world_names(texts: list[str]) -> list[str]:
    return [m.group(1) for text in texts for line in text.splitlines() if (m := _WORLD.match(line))]


def export_docs(texts: list[str]) -> dict[str, str]:
    """Doc comments (`///`) of functions: world-level exports by name, interface functions as `IFACE#NAME`."""
    docs: dict[str, str] = {}
    for text in texts:
        pending: list[str] = []
        scopes: list[str | None] = []  # the interface each open brace belongs to (None: a world or a type)
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("///"):
                pending.append(line[3:].removeprefix(" "))
                continue
            interface = next((s for s in reversed(scopes) if s is not None), None)
            doc = "\n".join(pending).strip()
            if match := _EXPORT_FUNC.match(line):
                if doc:
                    docs[match.group(1)] = doc
            elif (match := _FUNC.match(line)) and interface is not None and doc:
                docs[f"{interface}#{match.group(1)}"] = doc
            opened = _INTERFACE.match(line) or _EXPORT_INLINE.match(line)
            for char in _code(line):
                if char == "{":
                    scopes.append(opened.group(1) if opened is not None else None)
                    opened = None
                elif char == "}" and scopes:
                    scopes.pop()
            if line and not line.startswith("//"):
                pending = []
    return docs


def _code(line: str) -> str:
    return line.split("//", 1)[0]


def docs_of(app_dir: Path) -> dict[str, str]:
    return export_docs([path.read_text(encoding="utf-8") for path in wit_files(app_dir)])


# --- the custom section ----------------------------------------------------------------------------------------


def _leb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_leb(data: bytes, offset: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, offset


def with_docs(wasm: bytes, docs: dict[str, str]) -> bytes:
    """`wasm` with `docs` appended as the custom section DOCS_SECTION."""
    name = DOCS_SECTION.encode()
    payload = _leb(len(name)) + name + json.dumps(docs, sort_keys=True).encode()
    return wasm + b"\x00" + _leb(len(payload)) + payload


def read_docs(wasm: bytes) -> dict[str, str]:
    """The DOCS_SECTION of a component's top level (empty when it has none or the bytes are not a component)."""
    offset = 8  # magic and version/layer
    try:
        while offset < len(wasm):
            section, offset = wasm[offset], offset + 1
            size, offset = _read_leb(wasm, offset)
            end = offset + size
            if section == 0:
                length, start = _read_leb(wasm, offset)
                if wasm[start : start + length] == DOCS_SECTION.encode():
                    found = json.loads(wasm[start + length : end])
                    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
            offset = end
    except (IndexError, ValueError):
        pass
    return {}
