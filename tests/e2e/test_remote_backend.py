"""The remote backend end to end: the probe guest calls a model served by llama-cpp-python's own
OpenAI-compatible server (`python -m llama_cpp.server`, the same GGUF as the local default model), and every path
is checked against the same calls on the local backend. One server for the module.

The server runs llama.cpp through its high-level `Llama` class with its own batching and weight repacking, so
greedy outputs may part from local ones at a near-tie (tests/e2e/greedy.py), never at a clear choice.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import App, Host, HostConfig, InferencingParams
from llmhost.config import ModelConfig
from llmhost.domain.types import StreamChunk
from llmhost.engine.chat_template import GEMMA3_TEMPLATE
from llmhost.engine.local.models import default_model_path
from probe_driver import ProbeOutcome, run_probe

from .conftest import MODEL
from .greedy import assert_same_or_split_at_near_tie

pytestmark = [pytest.mark.model, pytest.mark.wasm]
Probe = Callable[..., ProbeOutcome]

REMOTE = "gemma-remote"
GREEDY = {"temperature": 0.0, "repeat-penalty": 1.0}
PROMPTS = ["The capital of France is", "Once upon a time, there was a dragon who"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_llama_cpp_server(weights: Path, log: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(weights), "--host", "127.0.0.1"]
    command += [
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--n_threads",
        "2",
        "--model_alias",
        "gemma",
        "--interrupt_requests",
        "false",
        *extra,
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url + "/models", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"llama_cpp.server did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.3)


@pytest.fixture(scope="module")
def lcp_url(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("lcp") / "server.log"
    proc, url = start_llama_cpp_server(default_model_path(llmhost_cache_dir), log)
    yield url
    proc.terminate()
    proc.wait(30)


@pytest.fixture(scope="module")
def host(lcp_url: str, llmhost_cache_dir: Path, compile_notes: list[str]) -> Iterator[Host]:
    weights = default_model_path(llmhost_cache_dir)
    # The GGUF given by `path` carries no chat template (the host's built-in one is for the embedded default model
    # only), so this model names it, as a user of a remote model would.
    remote = ModelConfig(
        backend="openai",
        base_urls=(lcp_url,),
        remote_model="gemma",
        server="llama-cpp-python",
        path=weights,
        chat_template=GEMMA3_TEMPLATE,
    )
    config = HostConfig(models={MODEL: ModelConfig(prefix_cache=False), REMOTE: remote}, cache_dir=llmhost_cache_dir)
    with Host(config) as h:
        yield h


@pytest.fixture(scope="module")
def probe_app(host: Host, probe_wasm: Path) -> App:
    return host.load(probe_wasm)


@pytest.fixture
def probe(probe_app: App) -> Probe:
    return lambda *args: run_probe(probe_app, *args)


def ok(outcome: ProbeOutcome) -> Any:
    assert outcome.exit_code == 0, (outcome.error, outcome.stderr[-2000:])
    return outcome.value


def infer(probe: Probe, model: str, prompt: str, **params: Any) -> dict[str, Any]:
    return ok(probe("infer", model, prompt, json.dumps(params)))  # type: ignore[no-any-return]


def generated_ids(host: Host, model: str, prompt: str, max_tokens: int) -> list[int]:
    """The greedy tokens after `prompt`: the local engine's own ids; the remote model's re-tokenized text (the
    ids a sequence keeps)."""
    params = InferencingParams(max_tokens=max_tokens, temperature=0, repeat_penalty=1)
    if model == MODEL:
        gen = host.engine.engine(model).stream(model, prompt, params)
        return [t for e in gen if isinstance(e, StreamChunk) for t in e.token_ids]
    seq = host.open_sequence(model)
    try:
        seq.append(prompt)
        n = len(seq)
        seq.generate(params)
        return seq.token_ids()[n:]
    finally:
        seq.close()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_infer_equals_local_and_usage_matches_tokenize(probe: Probe, host: Host, prompt: str) -> None:
    results = {}
    for model in (MODEL, REMOTE):
        result = infer(probe, model, prompt, **GREEDY, **{"max-tokens": 16})
        tokens = ok(probe("tokenize", model, prompt))
        assert result["usage"] == {"prompt-token-count": len(tokens), "generated-token-count": 16}
        assert result["finish-reason"] == "length"
        results[model] = result
    # The same vocabulary on both sides.
    assert ok(probe("tokenize", REMOTE, prompt)) == ok(probe("tokenize", MODEL, prompt))
    if results[MODEL]["text"] != results[REMOTE]["text"]:
        local, remote = generated_ids(host, MODEL, prompt, 16), generated_ids(host, REMOTE, prompt, 16)
        assert_same_or_split_at_near_tie(host, prompt, local, remote)


def test_stop_sequences_cut_at_the_earliest_match_on_both_backends(probe: Probe) -> None:
    prompt = PROMPTS[1]
    for model in (MODEL, REMOTE):
        full = infer(probe, model, prompt, **GREEDY, **{"max-tokens": 24})["text"]
        # Two stops: the one listed first starts later; the earliest-starting one wins, whatever the order.
        later, earlier = full[12:16], full[6:9]
        assert full.find(earlier) < full.find(later)
        result = infer(probe, model, prompt, **GREEDY, **{"max-tokens": 24, "stop": [later, earlier]})
        assert result["text"] == full[: full.find(earlier)]
        assert result["finish-reason"] == "stop"
        assert result["usage"]["generated-token-count"] < 24


def test_infer_stream_chunks_then_exactly_one_done(probe: Probe) -> None:
    prompt = PROMPTS[0]
    whole = infer(probe, REMOTE, prompt, **GREEDY, **{"max-tokens": 12})
    value = ok(probe("stream", REMOTE, prompt, json.dumps({**GREEDY, "max-tokens": 12})))
    events = value["events"]
    chunks = [e["chunk"] for e in events if "chunk" in e]
    assert len(chunks) > 2  # streamed as the server produced it
    assert "".join(c["text"] for c in chunks) == whole["text"]
    assert [e for e in events if "done" in e] == [events[-1]]
    assert events[-1]["done"] == {"finish-reason": whole["finish-reason"], "usage": whole["usage"]}
    assert value["after-done"] == [None, None]
    counts = [c["usage"]["generated-token-count"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] <= 12


def assert_same_greedy_text(host: Host, prompt: str, a: str, b: str) -> None:
    """Two greedy texts after `prompt` (both starting with it) are equal or part at a near-tie. llama-cpp-python's
    server reuses the previous request's prompt prefix, which changes its batch shapes, hence this tolerance."""
    if a == b:
        return
    n = len(host.tokenize(MODEL, prompt))
    ids_a, ids_b = host.tokenize(MODEL, a)[n:], host.tokenize(MODEL, b)[n:]
    assert_same_or_split_at_near_tie(host, prompt, ids_a, ids_b)


def test_sequences_keep_ids_here_and_generate_through_the_server(probe: Probe, host: Host) -> None:
    prompt = "Once upon a time"
    script = [
        ["open", "a"],
        ["append", "a", prompt],
        ["len", "a"],
        ["generate", "a", {**GREEDY, "max-tokens": 8}],
        ["text", "a"],
        ["tokens", "a"],
        ["len", "a"],
        ["evaluated", "a"],
        ["fork", "a", "b"],
        ["truncate", "a", 0],
        ["append", "a", prompt],
        ["generate", "a", {**GREEDY, "max-tokens": 8}],
        ["text", "a"],
        ["text", "b"],
        ["generate", "b", {**GREEDY, "max-tokens": 4, "stop": ["."]}],
        ["text", "b"],
        ["logprobs", "b"],
    ]
    by_model = {}
    for model in (MODEL, REMOTE):
        results = ok(
            probe(
                "seq", model, json.dumps([[op, name, *(args or [])] for op, name, *args in _with_model(script, model)])
            )
        )
        assert all("ok" in r for r in results), results
        by_model[model] = [r["ok"] for r in results]
    r = by_model[REMOTE]
    n_prompt, first, text, tokens, length, evaluated = r[2], r[3], r[4], r[5], r[6], r[7]
    assert first["usage"]["prompt-token-count"] == n_prompt
    assert text == prompt + first["text"]
    assert len(tokens) == length and tokens[:n_prompt] == by_model[MODEL][5][:n_prompt]
    assert evaluated == n_prompt + first["usage"]["generated-token-count"]  # what was sent (no cached count)
    assert_same_greedy_text(host, prompt, r[12], text)  # truncate to 0, the same prompt again: the same text
    assert r[13] == text  # the fork kept its own state
    assert r[15].startswith(text) and "." not in r[15][len(text) :]
    assert r[16] == [None] * len(r[16])  # no log-probabilities from a remote server (documented)
    assert_same_greedy_text(host, prompt, by_model[MODEL][4], text)  # and the same as local, up to a near-tie


def _with_model(script: list[list[Any]], model: str) -> list[list[Any]]:
    return [[*step, model] if step[0] == "open" else step for step in script]


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_structured_output_json_schema_through_the_server(probe: Probe) -> None:
    import jsonschema

    prompt = "Describe a person as JSON: "
    texts = {}
    for model in (MODEL, REMOTE):
        constraint = {"json-schema": json.dumps(SCHEMA)}
        result = infer(probe, model, prompt, **GREEDY, **{"max-tokens": 60, "constraint": constraint})
        jsonschema.validate(json.loads(result["text"]), SCHEMA)
        texts[model] = result["text"]
    choice = infer(probe, REMOTE, "Is the sky blue? Answer: ", **GREEDY, constraint={"choice": ["yes", "no"]})
    assert choice["text"] in ("yes", "no")


def test_what_the_server_lacks_is_invalid_input_naming_it(probe: Probe) -> None:
    outcome = probe("infer", REMOTE, "Hi", json.dumps({**GREEDY, "constraint": {"regex": "[a-z]+"}}))
    assert outcome.exit_code == 1 and outcome.error is not None
    assert outcome.error["kind"] == "invalid-input"
    assert "llama-cpp-python" in outcome.error["message"] and "regex" in outcome.error["message"]
    outcome = probe("infer", REMOTE, "Hi", json.dumps({**GREEDY, "logprobs": 2}))
    assert outcome.exit_code == 1 and outcome.error is not None and outcome.error["kind"] == "invalid-input"


CHAT = json.dumps([{"role": "user", "content": "What is the capital of France? Answer in one sentence."}])
CHAT_PARAMS = json.dumps({"inferencing": {**GREEDY, "max-tokens": 10}})


def test_chat_is_rendered_here_and_completed_by_the_server(probe: Probe, host: Host) -> None:
    results = {model: ok(probe("chat", model, CHAT, CHAT_PARAMS)) for model in (MODEL, REMOTE)}
    local, remote = results[MODEL], results[REMOTE]
    # The same template (the model file's vocabulary load finds the same facts) and the same prompt tokens.
    rendered = ok(probe("template", REMOTE, CHAT, "[]", "true"))
    assert rendered == ok(probe("template", MODEL, CHAT, "[]", "true"))
    assert remote["usage"]["prompt-token-count"] == local["usage"]["prompt-token-count"]
    assert remote["message"]["role"] == "assistant" and remote["message"]["tool-calls"] == []
    assert remote["finish-reason"] in ("stop", "length")
    assert_same_greedy_text(
        host, rendered, rendered + (local["message"]["content"] or ""), rendered + (remote["message"]["content"] or "")
    )
    # Streamed: content chunks joining to the same reply, then exactly one done event.
    value = ok(probe("chat-stream", REMOTE, CHAT, CHAT_PARAMS))
    events = value["events"]
    assert "".join(e["content"]["text"] for e in events if "content" in e) == (remote["message"]["content"] or "")
    assert [e for e in events if "done" in e] == [events[-1]]
    assert events[-1]["done"]["finish-reason"] == remote["finish-reason"]
    assert value["after-done"] is None


def test_chat_tools_need_a_grammar_the_server_lacks(probe: Probe) -> None:
    tool = {"name": "get_time", "description": "The time in a zone", "parameters": json.dumps({"type": "object"})}
    params = json.dumps({"inferencing": {**GREEDY, "max-tokens": 20}, "tools": [tool], "tool-choice": "required"})
    outcome = probe("chat", REMOTE, CHAT, params)
    assert outcome.exit_code == 1 and outcome.error is not None
    assert outcome.error["kind"] == "invalid-input"
    assert "llama-cpp-python" in outcome.error["message"] and "%llguidance" in outcome.error["message"]


@pytest.fixture(scope="module")
def embedding_host(
    llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory, compile_notes: list[str]
) -> Iterator[Host]:
    """A second llama-cpp-python server, started with embeddings on: for a causal model it answers one vector per
    token (a list of lists)."""
    weights = default_model_path(llmhost_cache_dir)
    log = tmp_path_factory.mktemp("lcp-embed") / "server.log"
    proc, url = start_llama_cpp_server(weights, log, "--embedding", "true")
    remote = ModelConfig(
        backend="openai", base_urls=(url,), remote_model="gemma", server="llama-cpp-python", path=weights
    )
    config = HostConfig(models={MODEL: ModelConfig(prefix_cache=False), REMOTE: remote}, cache_dir=llmhost_cache_dir)
    try:
        with Host(config) as h:
            yield h
    finally:
        proc.terminate()
        proc.wait(30)


def test_remote_per_token_embeddings_are_mean_pooled_like_local_ones(embedding_host: Host, probe_wasm: Path) -> None:
    import numpy as np

    app = embedding_host.load(probe_wasm)
    texts = ["The capital of France is Paris.", "A dragon guarded the gold in the mountain.", "2 + 2 = 4"]
    remote = np.array(ok(run_probe(app, "embed", REMOTE, *texts))["embeddings"])
    local = np.array(ok(run_probe(app, "embed", MODEL, *texts))["embeddings"])
    assert remote.shape == local.shape and remote.shape[0] == len(texts)
    assert np.allclose(np.linalg.norm(remote, axis=1), 1.0, atol=1e-3)  # one pooled, normalized vector per text
    similarity = remote @ local.T  # cosines: each remote vector against each local one
    # Each text's remote vector is nearest its own local vector, and all but equal to it: the server sends each
    # token's raw vector, pooled here as the local engine pools (they differ by the server's own batch shapes).
    assert all(int(np.argmax(row)) == i for i, row in enumerate(similarity))
    assert min(np.diag(similarity)) > 0.99  # measured: 0.9993 to 0.9995
