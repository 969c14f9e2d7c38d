"""The app templates of `llmhost new` that keep state (issue 57): `chat` (the chat API, the conversation kept in
key-value, streamed) and `rag` (embeddings, the index kept in key-value, retrieval, an answer reporting its
passages). Each is created with `llmhost new`, then its README's commands run as written from the directory above
it (`llmhost serve -c NAME/llmhost.toml --watch`, then curl), on a fresh data directory, against the real models.

What is checked does not depend on generated text: the events and their order, the key-value contents (the turns
as streamed), and token counts, which the prompt fixes: a chat's second turn is prompted with the first (its
`prompt_tokens` is the whole conversation's, as the Python API counts it), and a RAG answer is prompted with
exactly the passages it reports (the same count for the chat built from them)."""

from __future__ import annotations

import json
import re
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import readme_output as readme
from llmhost import Host, InferencingParams
from serve_driver import LLMHOST, Server, serving

from .conftest import MINILM, SMOL
from .test_grants_examples import constants, environment, run_commands
from .test_serve_examples import free_port

pytestmark = [pytest.mark.model, pytest.mark.wasm, pytest.mark.slow]
README_PORT = "127.0.0.1:8080"
ONE_TOKEN = InferencingParams(max_tokens=1, temperature=0.0)


def new(template: str, name: str, cwd: Path, cache_dir: Path) -> Path:
    """`llmhost new NAME --template T` (a relative NAME, as a user types it: the README then names NAME/...)."""
    made = subprocess.run(
        [LLMHOST, "new", name, "--template", template],
        cwd=cwd,
        env=environment(cache_dir),
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0 and made.stdout.strip() == name, made.stderr
    guest = cwd / name
    assert {p.name for p in guest.iterdir()} == {"app.py", "README.md", "pyproject.toml", "llmhost.toml"}
    assert (guest / "README.md").read_text().startswith(f"# {name}\n")
    # The app config serves the directory itself, with the one grant the app needs.
    config = (guest / "llmhost.toml").read_text()
    assert re.search(r'source = "\."\nkey-value-stores = \["default"\]\n\n\[routes\]\n"/" = "app"', config), config
    return guest


def run_readme(guest: Path, cache_dir: Path, stack: ExitStack) -> tuple[list[str], str, Server]:
    """The README's commands from the directory above the guest: the server in the background (on a free port),
    then the curls. Returns each curl's output, the README's sample output, and the server."""
    commands, expected = readme.readme_blocks(guest / "README.md")
    assert commands[0] == f"llmhost serve -c {guest.name}/llmhost.toml --watch --listen {README_PORT} &"
    commands = [c.replace("llmhost ", ".venv/bin/llmhost ", 1) if c.startswith("llmhost ") else c for c in commands]
    results, [server] = run_commands(
        commands, guest.parent, cache_dir, {README_PORT: f"127.0.0.1:{free_port()}"}, stack
    )
    return [r.stdout for r in results], expected, server


def sse_events(text: str) -> list[tuple[str, Any]]:
    """(event name, data) of each server-sent event; unnamed ones are "text"."""
    events = []
    for block in filter(None, text.split("\n\n")):
        found = re.fullmatch(r"(?:event: (\w+)\n)?data: (.*)", block)
        assert found, block
        events.append((found.group(1) or "text", json.loads(found.group(2))))
    return events


def chat_turn(output: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """A turn's stream: its `conversation` event, the text of its chunks, its `done` event."""
    events = sse_events(output)
    names = [name for name, _ in events]
    assert names == ["conversation", *["text"] * (len(names) - 2), "done"], names
    return events[0][1], "".join(data["text"] for _, data in events[1:-1]), events[-1][1]


def prompt_tokens(host: Host, messages: list[dict[str, str]]) -> int:
    """How many tokens the chat template makes of `messages` for the instruct model (the Python API's count)."""
    return host.chat(SMOL, messages, ONE_TOKEN).usage.prompt_token_count


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh key-value store for the servers these tests start."""
    monkeypatch.setenv("LLMHOST_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_the_chat_template_keeps_the_conversation(
    tmp_path: Path, llmhost_cache_dir: Path, real_host: Host, data_dir: Path
) -> None:
    guest = new("chat", "mychat", tmp_path, llmhost_cache_dir)
    with ExitStack() as stack:
        (first, second, kept), expected, server = run_readme(guest, llmhost_cache_dir, stack)
        # The README's shape: two turns of one conversation, then the conversation as kept.
        shown_turns = expected.split("event: conversation\n")
        assert len(shown_turns) == 3 and shown_turns[0] == ""
        for shown, got in zip(shown_turns[1:], (first, second), strict=True):
            chat_turn("event: conversation\n" + shown.rsplit("\n\n", 1)[0] + "\n\n")
            chat_turn(got)
        (start1, text1, done1), (start2, text2, done2) = chat_turn(first), chat_turn(second)
        assert (start1, start2) == ({"id": "demo", "history": 0}, {"id": "demo", "history": 2})
        assert json.loads(expected.rsplit("\n\n", 1)[1])["id"] == "demo"
        # The key-value store holds both turns, as they were streamed.
        question1, question2 = (
            json.loads(r.split(" -d ", 1)[1].strip("'"))["message"] for r in readme_curls(guest)[:2]
        )
        conversation = [
            {"role": "user", "content": question1},
            {"role": "assistant", "content": text1},
            {"role": "user", "content": question2},
            {"role": "assistant", "content": text2},
        ]
        assert json.loads(kept) == {"id": "demo", "messages": conversation}
        # The second turn was prompted with the first: its prompt is the whole conversation's, token for token.
        for done, messages in ((done1, conversation[:1]), (done2, conversation[:3])):
            assert done["usage"]["prompt_tokens"] == prompt_tokens(real_host, messages)
            assert 1 <= done["usage"]["completion_tokens"] <= 8 and done["finish_reason"] in ("stop", "length")
        assert done2["usage"]["prompt_tokens"] > done1["usage"]["prompt_tokens"] + done1["usage"]["completion_tokens"]
        # A conversation without an id gets a random one; it can be read and forgotten.
        status, body = server.request("POST", "/chat", json.dumps({"message": "Hi.", "max_tokens": 1}).encode())
        assert status == 200
        start, text, _ = chat_turn(body.decode())
        assert re.fullmatch(r"[0-9a-f]{16}", start["id"]) and start["history"] == 0
        assert server.get_json(f"/conversations/{start['id']}")["messages"][1] == {"role": "assistant", "content": text}
        assert server.request("DELETE", f"/conversations/{start['id']}")[0] == 204
        assert server.request("GET", f"/conversations/{start['id']}")[0] == 404
        assert server.request("POST", "/chat", b'{"conversation": "no/slash", "message": "x"}')[0] == 400
        assert server.request("GET", "/")[0] == 200
    # Served without its config, the store is not granted: the page still loads, a turn is refused naming the fix.
    with serving([str(guest)], llmhost_cache_dir, cwd=tmp_path) as bare:
        assert bare.request("GET", "/")[0] == 200
        status, body = bare.request("POST", "/chat", b'{"message": "x"}')
        assert status == 503 and 'key-value-stores = ["default"]' in json.loads(body)["error"], body


def readme_curls(guest: Path) -> list[str]:
    return [c for c in readme.readme_blocks(guest / "README.md")[0] if c.startswith("curl ")]


def curl_body(command: str) -> Any:
    """The JSON body of a README's `curl ... -d '{...}'`."""
    return json.loads(command.split(" -d ", 1)[1].strip("'"))


def test_the_rag_template_answers_from_the_passages_it_reports(
    tmp_path: Path, llmhost_cache_dir: Path, real_host: Host, data_dir: Path
) -> None:
    guest = new("rag", "myrag", tmp_path, llmhost_cache_dir)
    # The passages the README adds: `curl -s -X PUT http://.../passages/ID --data-binary 'TEXT'`
    added = (
        re.fullmatch(r"curl -s -X PUT \S+/passages/([\w.-]+) --data-binary '(.*)'", c) for c in readme_curls(guest)
    )
    puts = {found.group(1): found.group(2) for found in added if found}
    question = curl_body(readme_curls(guest)[-1])["question"]
    with ExitStack() as stack:
        outputs, expected, server = run_readme(guest, llmhost_cache_dir, stack)
        # The README's lines, one JSON value per command: the same passages, token counts and sources.
        shown = [json.loads(line) for line in expected.rstrip("\n").split("\n")]
        got = [json.loads(output) for output in outputs]
        assert len(shown) == len(got) == len(puts) + 1
        assert got[:-1] == shown[:-1]  # {"id", "tokens"}: what the embedding model counted
        answer, shown_answer = got[-1], shown[-1]
        assert set(answer) == set(shown_answer) == {"answer", "finish_reason", "passages", "usage"}
        assert [p["id"] for p in answer["passages"]] == [p["id"] for p in shown_answer["passages"]]
        assert answer["usage"]["prompt_tokens"] == shown_answer["usage"]["prompt_tokens"]
        # Every passage reported is in the index, with its text as it was added, and its score is the cosine the
        # embedding model gives on this machine.
        assert server.get_json("/passages") == {"passages": sorted(puts)}
        vectors = real_host.embeddings(MINILM, [question, *(p["text"] for p in answer["passages"])]).embeddings
        for passage, vector in zip(answer["passages"], vectors[1:], strict=True):
            assert passage["text"] == puts[passage["id"]]
            assert passage["score"] == pytest.approx(
                sum(a * b for a, b in zip(vectors[0], vector, strict=True)), abs=2e-3
            )
        # The answer was prompted with exactly those passages: the chat the template builds from them has the
        # answer's prompt token count (and without them, far fewer).
        (system,) = constants("rag-http", "SYSTEM")
        context = "\n".join(f"[{p['id']}] {p['text']}" for p in answer["passages"])
        grounded = [
            {"role": "system", "content": system.format(passages=context)},
            {"role": "user", "content": question},
        ]
        assert answer["usage"]["prompt_tokens"] == prompt_tokens(real_host, grounded)
        bare = prompt_tokens(real_host, [grounded[0] | {"content": system.format(passages="")}, grounded[1]])
        assert answer["usage"]["prompt_tokens"] > bare + 2 * 10
        assert answer["finish_reason"] in ("stop", "length") and answer["usage"]["completion_tokens"] <= 24
        # An empty index is refused, naming the fix.
        for passage_id in puts:
            assert server.request("DELETE", f"/passages/{passage_id}")[0] == 204
        status, body = server.request("POST", "/ask", json.dumps({"question": question}).encode())
        assert status == 409 and "PUT /passages/ID" in json.loads(body)["error"]
