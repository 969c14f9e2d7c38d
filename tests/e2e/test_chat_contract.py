"""One chat contract (issue 67): the Python `chat` template (guest-examples/chat) and the JavaScript one
(guest-examples/chat-js) serve one HTTP API. Each example's README commands run as written, from a copy of it in a
temporary "repository root" (`llmhost serve -c guest-examples/NAME/llmhost.toml --watch`, then curl), each server on
a fresh data directory; then one client, `session`, talks to both: the page, two turns of a conversation the server
names, the conversation read back, forgotten, gone, and the mistakes a client makes.

Nothing here asserts generated text. Both apps answer the same conversations greedily, on the same model, on this
machine, so what they send must be the same bytes (status, content type, body; a random id, and where the host cut
the streamed text into chunks, aside), what they store too (the same keys, `chat/<id>`, and values: no system prompt
in either), and each turn's prompt is the whole conversation as stored, token for token as the Python API counts
it. Served without the grant of the store, both answer the same 503 naming the fix."""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import readme_output as readme
from llmhost import Host
from serve_driver import LISTENING, LLMHOST, Server

from .test_app_templates import chat_turn, prompt_tokens
from .test_grants_examples import environment, mirror
from .test_serve_examples import free_port

pytestmark = [pytest.mark.model, pytest.mark.wasm]
EXAMPLES = ("chat", "chat-js")
README_PORT = "127.0.0.1:8080"
Seen = list[tuple[str, int, str, bytes]]  # (what was asked, status, content type, body)
NO_STORE = (("GET", "/"), ("POST", "/chat", b'{"message": "x"}'), ("GET", "/conversations/demo"))


def fetch(server: Server, method: str, path: str, body: bytes | None = None) -> tuple[int, str, bytes]:
    connection = server.connection(timeout=120)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        connection.close()


def canonical(stream: bytes) -> bytes:
    """A reply's stream with its text chunks joined into one event: where the host cuts the text into chunks depends
    on timing. Each chunk is written as Python's json.dumps writes it (as are the named events, compared as sent)."""
    blocks = stream.decode().split("\n\n")
    texts = [json.loads(b.removeprefix("data: "))["text"] for b in blocks if b.startswith("data: ")]
    assert [b for b in blocks if b.startswith("data: ")] == ["data: " + json.dumps({"text": t}) for t in texts]
    named = [b for b in blocks if not b.startswith("data: ")]
    return "\n\n".join([named[0], "data: " + json.dumps({"text": "".join(texts)}), *named[1:]]).encode()


def session(server: Server, host: Host) -> Seen:
    """One client's session with a chat app, checked as it goes; returns what it saw, the conversation's id
    replaced by ID (the only thing the two apps may answer differently)."""
    seen: Seen = []

    def ask(method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        status, kind, answer = fetch(server, method, path, data)
        shown = canonical(answer) if kind == "text/event-stream" else answer
        seen.append((f"{method} {path} {data!r}", status, kind, shown))
        return status, answer

    status, page = ask("GET", "/")
    assert status == 200 and page.startswith(b"<!doctype html>") and b"<title>llmhost chat</title>" in page
    # A conversation without an id: the server names it (64 random bits), and the turn is streamed.
    status, first = ask("POST", "/chat", {"message": "My name is Ada.", "max_tokens": 4})
    assert status == 200 and seen[-1][2] == "text/event-stream", first
    start1, text1, done1 = chat_turn(first.decode())
    conversation = start1["id"]
    assert re.fullmatch(r"[0-9a-f]{16}", conversation) and start1["history"] == 0
    status, second = ask(
        "POST", "/chat", {"message": "What is my name?", "conversation": conversation, "max_tokens": 4}
    )
    assert status == 200
    start2, text2, done2 = chat_turn(second.decode())
    assert start2 == {"id": conversation, "history": 2}
    # The conversation as kept: both turns as they were streamed, and nothing else (no system prompt).
    status, kept = ask("GET", f"/conversations/{conversation}")
    messages = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": text1},
        {"role": "user", "content": "What is my name?"},
        {"role": "assistant", "content": text2},
    ]
    assert status == 200 and json.loads(kept) == {"id": conversation, "messages": messages}
    # Each turn was prompted with the conversation so far.
    for done, sent in ((done1, messages[:1]), (done2, messages[:3])):
        assert done["usage"]["prompt_tokens"] == prompt_tokens(host, sent)
        assert 1 <= done["usage"]["completion_tokens"] <= 4 and done["finish_reason"] in ("stop", "length")
    assert ask("DELETE", f"/conversations/{conversation}") == (204, b"")
    assert ask("GET", f"/conversations/{conversation}")[0] == 404
    assert ask("DELETE", f"/conversations/{conversation}")[0] == 404
    # A client's mistakes: each refused with the same status and error in both.
    mistakes = (b"not json", b"[1]", b'{"message": "\xff"}', {"message": 5}, {"message": "x", "max_tokens": 0})
    for body in mistakes:
        assert ask("POST", "/chat", body)[0] == 400
    assert ask("POST", "/chat", {"message": "x", "conversation": "no/slash"})[0] == 400
    assert ask("GET", "/conversations/no%2Fslash")[0] == 404
    assert ask("GET", "/nope")[0] == 404
    return [
        (asked.replace(conversation, "ID"), s, k, b.replace(conversation.encode(), b"ID")) for asked, s, k, b in seen
    ]


def stored(data_dir: Path) -> dict[str, bytes]:
    """What the app keeps: every key and value of its `default` store (SQLite in the data directory)."""
    with sqlite3.connect(data_dir / "kv" / "default.db") as db:
        return {key: bytes(value) for key, value in db.execute("SELECT key, value FROM kv ORDER BY key")}


def start(argv: list[str], root: Path, env: dict[str, str], stack: ExitStack) -> Server:
    """`llmhost ARGV` in the background (stopped when `stack` closes); `listening` waits for it."""
    server = Server(subprocess.Popen([LLMHOST, *argv], cwd=root, env=env, stderr=subprocess.PIPE, text=True))
    stack.callback(server.stop)
    return server


def listening(server: Server) -> Server:
    match = server.wait_for_line(LISTENING.pattern, 240)
    server.host, server.port = match.group(1), int(match.group(2))
    return server


def test_the_python_and_javascript_chats_serve_one_contract(
    tmp_path: Path, llmhost_cache_dir: Path, real_host: Host
) -> None:
    root = tmp_path / "root"
    blocks = {name: readme.readme_blocks(mirror(name, root) / "README.md") for name in EXAMPLES}
    with ExitStack() as stack:
        # All four servers start at once (a build each, cached): each README's, on its own fresh data directory,
        # and each directory served without its config (so without the grant of the store).
        servers: dict[str, Server] = {}
        bare: dict[str, Server] = {}
        for name, (commands, _) in blocks.items():
            serve = f".venv/bin/llmhost serve -c guest-examples/{name}/llmhost.toml --watch --listen {README_PORT} &"
            assert commands[0] == serve
            argv = shlex.split(serve.removesuffix("&").replace(README_PORT, f"127.0.0.1:{free_port()}"))[1:]
            env = {**environment(llmhost_cache_dir), "LLMHOST_DATA_DIR": str(tmp_path / f"data-{name}")}
            servers[name] = start(argv, root, env, stack)
            bare[name] = start(["serve", f"guest-examples/{name}", "--listen", "127.0.0.1:0"], root, env, stack)
        outputs = {}
        for name, (commands, _) in blocks.items():
            server = listening(servers[name])
            # The README's curls, as written, against this server.
            curls = [shlex.split(c.replace(README_PORT, f"{server.host}:{server.port}")) for c in commands[1:]]
            done = [subprocess.run(c, capture_output=True, text=True, timeout=300, check=True) for c in curls]
            outputs[name] = [d.stdout for d in done]
        # The READMEs: the same commands but the directory, and the same sample output, of the README's shape.
        (py_commands, py_expected), (js_commands, js_expected) = blocks.values()
        assert [c.replace("chat-js", "chat") for c in js_commands] == py_commands and js_expected == py_expected
        shown = py_expected.split("event: conversation\n")
        assert len(shown) == 3 and shown[0] == ""
        for part in shown[1:]:
            chat_turn("event: conversation\n" + part.rsplit("\n\n", 1)[0] + "\n\n")
        first, second, kept = outputs["chat"]
        (start1, text1, _), (start2, text2, _) = chat_turn(first), chat_turn(second)
        assert (start1, start2) == ({"id": "demo", "history": 0}, {"id": "demo", "history": 2})
        assert json.loads(kept)["messages"][1::2] == [
            {"role": "assistant", "content": text1},
            {"role": "assistant", "content": text2},
        ]
        canonicals = {name: [*map(canonical, (o.encode() for o in out[:2])), out[2]] for name, out in outputs.items()}
        assert canonicals["chat-js"] == canonicals["chat"]
        # One client against both: the same answers, byte for byte.
        seen = {name: session(servers[name], real_host) for name in EXAMPLES}
        assert seen["chat-js"] == seen["chat"]
        # Without the grant: the page, and a 503 naming the fix, the same in both.
        refused = {name: [fetch(listening(bare[name]), *ask) for ask in NO_STORE] for name in EXAMPLES}
        assert refused["chat-js"] == refused["chat"]
        [page, turn, read] = refused["chat"]
        assert page[0] == 200 and (turn[0], read[0]) == (503, 503)
        assert 'key-value-stores = ["default"]' in json.loads(turn[2])["error"], turn
    # The same store contents: the README's conversation under `chat/demo`, as JSON of the same bytes.
    kept_py, kept_js = (stored(tmp_path / f"data-{name}") for name in EXAMPLES)
    assert list(kept_py) == ["chat/demo"] and kept_js == kept_py
    assert json.loads(kept_py["chat/demo"]) == json.loads(kept)["messages"]
