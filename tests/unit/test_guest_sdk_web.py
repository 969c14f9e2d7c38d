"""The guest SDK's `web` module without wasm: `sse` through a stand-in writer, and the chat page. The page of a
chat with conversations must be chat-js's page byte for byte (the Python and JavaScript chats serve one contract,
tests/e2e/test_chat_contract.py, which needs models; this catches a drift in a second). The pages in a browser:
tests/e2e/test_serve_examples.py::test_chat_page_in_headless_chromium."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from llmhost.toolchains.python import guest_sdk_dir

CHAT_JS = Path(__file__).resolve().parents[2] / "guest-examples" / "chat-js" / "app.js"


@pytest.fixture(scope="module")
def web() -> ModuleType:
    # Loaded on its own: web.py needs nothing of the package (nor the generated bindings).
    spec = importlib.util.spec_from_file_location("llmhost_guest_web", guest_sdk_dir() / "llmhost_guest" / "web.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Writer:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, chunk: bytes) -> None:
        self.chunks.append(chunk)


def test_sse_writes_one_event_per_write(web: ModuleType) -> None:
    writer = Writer()
    web.sse(writer, None, {"text": "é\n"})
    web.sse(writer, "done", {"finish_reason": "stop"})
    assert writer.chunks == [b'data: {"text": "\\u00e9\\n"}\n\n', b'event: done\ndata: {"finish_reason": "stop"}\n\n']


def test_the_conversation_page_is_chat_js_page(web: ModuleType) -> None:
    literal = re.search(r"const PAGE = `((?:\\.|[^\\`])*)`;", CHAT_JS.read_text(), re.S)
    assert literal is not None
    # The template literal's escapes (\`, \$ and \\) as JavaScript reads them.
    js_page = re.sub(r"\\([`$\\])", r"\1", literal.group(1)).encode()
    assert web.chat_page(True) == js_page


def test_the_pages_differ_only_where_they_should(web: ModuleType) -> None:
    remembering, single = web.chat_page(True).decode(), web.chat_page(False).decode()
    for page in (remembering, single):
        assert "@" not in page  # every marker replaced
        for element in ('id="log"', 'id="form"', 'id="message"', 'id="send"', "<title>llmhost chat</title>"):
            assert element in page
    assert 'id="new"' in remembering and "conversation = data.id" in remembering
    assert 'id="new"' not in single and "conversation" not in single
    for timing in ("firstChunkMs", "dataset.chunks", "doneMs"):
        assert timing in single and timing not in remembering
