"""The JavaScript examples written with the JavaScript SDK (guest-examples/rag-js, agent-js), built, served or run,
and exercised through what does not depend on the generated text: rag-js answers from the passages it reports (they
are the nearest by the host's own embeddings, and the answer is the one the Python API gives from those passages);
agent-js calls the API it is granted and answers from the results. `llmhost new --lang js --template chat|rag|agent`
creates directories that build (command and http-app: tests/e2e/test_js_guests.py), and rag-js's README commands
run as written and print what the README shows, in shape. chat-js serves the Python chat's API: its README and that
contract are tested in tests/e2e/test_chat_contract.py."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, Host, InferencingParams, build_component
from llmhost.domain.types import Constraint
from llmhost.toolchains.javascript import detect_world
from serve_driver import Server, serving

from .conftest import MINILM, SMOL
from .test_serve_examples import run_served_readme

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "guest-examples"
SERVED = ("rag-js",)
LLMHOST = str(REPO / ".venv" / "bin" / "llmhost")


@pytest.fixture(scope="module")
def built(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("js-examples")
    names = (*SERVED, "agent-js")
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores
        wasm = pool.map(lambda n: build_component(EXAMPLES / n, out / f"{n}.wasm", cache_dir=llmhost_cache_dir), names)
        return dict(zip(names, wasm, strict=True))


@pytest.fixture(scope="module")
def server(
    built: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server for the rag-js example, with the grant its llmhost.toml gives (the `default` store)."""
    folder = tmp_path_factory.mktemp("js-examples-serve")
    config = folder / "llmhost.toml"
    config.write_text(
        f"""
data-dir = "{folder / "data"}"
[components.rag]
source = "{built["rag-js"]}"
key-value-stores = ["default"]
[routes]
"/rag" = "rag"

# As the test host's (tests/e2e/conftest.py): a reused prompt prefix batches the rest of a prompt differently, which
# can move a greedy reply at a near tie; these tests compare the served replies with the Python API's.
[models.{SMOL}]
prefix-cache = false
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as running:
        yield running
        assert running.stop() == 0


def post(server: Server, path: str, value: Any) -> tuple[int, bytes]:
    return server.request("POST", path, json.dumps(value).encode(), {"content-type": "application/json"})


PASSAGES = [
    "The Eiffel Tower is a wrought-iron tower in Paris, finished in 1889.",
    "Bananas are berries, botanically, while strawberries are not.",
    "The Danube flows through ten countries, more than any other river.",
    "Mount Kilimanjaro in Tanzania is the highest mountain in Africa.",
]
INSTRUCTIONS = "Answer the question using only the numbered passages. Cite them like [1]."


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_rag_js_answers_from_the_passages_it_reports(server: Server, real_host: Host) -> None:
    status, body = post(server, "/rag/ask", {"question": "Where is the Eiffel Tower?"})
    assert status == 409  # nothing indexed yet
    status, body = post(server, "/rag/index", {"passages": PASSAGES})
    assert status == 200 and json.loads(body) == {"indexed": 4, "total": 4}
    question = "Which mountain is the highest in Africa?"
    status, body = post(server, "/rag/ask", {"question": question, "k": 2})
    assert status == 200, body
    value = json.loads(body)
    # The passages it reports are the two nearest to the question by the host's own embeddings, best first.
    vectors = real_host.embeddings(MINILM, [question, *PASSAGES]).embeddings
    ranked = sorted(range(4), key=lambda i: -cosine(vectors[0], vectors[i + 1]))[:2]
    assert [s["text"] for s in value["sources"]] == [PASSAGES[i] for i in ranked]
    assert [s["id"] for s in value["sources"]] == [f"p{i + 1}" for i in ranked]
    for source, i in zip(value["sources"], ranked, strict=True):
        assert source["score"] == pytest.approx(cosine(vectors[0], vectors[i + 1]), abs=1e-4)
    # The answer is generated from exactly those passages: the same messages through the Python API give the same
    # prompt tokens and, greedy, the same answer.
    numbered = "\n".join(f"[{n + 1}] {s['text']}" for n, s in enumerate(value["sources"]))
    messages = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": f"Passages:\n{numbered}\n\nQuestion: {question}"},
    ]
    want = real_host.chat(SMOL, messages, InferencingParams(max_tokens=48, temperature=0.0))
    assert value["usage"]["prompt_tokens"] == want.usage.prompt_token_count
    assert value["answer"] == want.message.content and value["finish_reason"] == want.finish_reason.value


@pytest.fixture(scope="module")
def weather_api() -> Iterator[str]:
    api = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "agent" / "weather_api.py"), "0"], stderr=subprocess.PIPE, text=True
    )
    assert api.stderr is not None
    line = api.stderr.readline()  # weather-api: listening on http://127.0.0.1:PORT
    try:
        yield line.rsplit(" ", 1)[-1].strip()
    finally:
        api.terminate()
        api.wait(timeout=10)


def test_agent_js_calls_the_granted_api_and_answers(built: dict[str, Path], real_host: Host, weather_api: str) -> None:
    app: App = real_host.load(
        built["agent-js"], config={"weather-api": weather_api}, allowed_outbound_hosts=[weather_api]
    )
    done = app.run_captured(["How warm is it in Paris right now?"])
    assert done.exit_code == 0, done.stderr
    *calls, answer = done.stdout.decode().strip().splitlines()
    assert calls and answer.startswith("answer: ")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "How warm is it in Paris right now?"}]
    tool_calls, results = [], []
    for i, line in enumerate(calls):  # call: NAME(ARGS) -> STATUS BODY, the API's own answer
        head, outcome = line.removeprefix("call: ").split(" -> ", 1)
        name, args = head.split("(", 1)
        assert name in ("get_weather", "get_population") and set(json.loads(args[:-1])) == {"city"}
        status, body = outcome.split(" ", 1)
        assert status in ("200", "404") and "city" in json.loads(body) or "error" in json.loads(body)
        tool_calls.append({"id": f"call_{i}", "name": name, "arguments": args[:-1]})
        results.append({"role": "tool", "tool_call_id": f"call_{i}", "content": body})
    # The answer is the model's reply to that conversation (the Python API, greedy, the same constraint).
    messages += [{"role": "assistant", "content": None, "tool_calls": tool_calls}, *results]
    messages.append({"role": "user", "content": "Now answer my question in one sentence."})
    params = InferencingParams(max_tokens=64, temperature=0.0, constraint=Constraint.regex(r"[A-Z][^{}<>\n.!?]*[.!?]"))
    want = real_host.chat(SMOL, messages, params)
    assert answer == f"answer: {(want.message.content or '').strip()}"


@pytest.mark.parametrize("template", ["chat", "rag", "agent"])
def test_new_js_templates_build(template: str, tmp_path: Path, llmhost_cache_dir: Path) -> None:
    env = {**os.environ, "LLMHOST_CACHE_DIR": str(llmhost_cache_dir)}
    done = subprocess.run(
        [LLMHOST, "new", f"my-{template}", "--lang", "js", "--template", template],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    made = tmp_path / f"my-{template}"
    assert {"app.js", "package.json", "README.md", "llmhost.toml"} <= {p.name for p in made.iterdir()}
    assert json.loads((made / "package.json").read_text())["name"] == f"my-{template}"
    assert detect_world(made) == ("command" if template == "agent" else "http-app")
    out = build_component(made, tmp_path / "app.wasm", cache_dir=llmhost_cache_dir)
    assert out.stat().st_size > 1_000_000


def test_rag_js_readme(tmp_path: Path, llmhost_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMHOST_DATA_DIR", str(tmp_path / "data"))
    commands, output, expected = run_served_readme("rag-js", tmp_path, llmhost_cache_dir)
    indexed = json.loads(shlex.split(commands[1])[-1])["passages"]
    for text in (output, expected):
        value = json.loads(text)
        assert set(value) == {"answer", "sources", "finish_reason", "usage"}
        sources = value["sources"]
        assert len(sources) == 2 and all(s["text"] in indexed for s in sources)
        assert sources[0]["score"] >= sources[1]["score"] and value["usage"]["completion_tokens"] <= 48
