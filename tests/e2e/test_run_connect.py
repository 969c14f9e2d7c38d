"""`llmhost run --connect URL`: a command component run here against the warm models of a running `llmhost serve`
of guest-examples/openai-compat (README, "A warm model for `llmhost run`"), through the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import BeamParams, Constraint, Host, HostConfig, InferenceResult, InferencingParams, InvalidInput, Tool
from llmhost.engine.remote.connect import lent_models
from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm, pytest.mark.slow]

LLMHOST = str(Path(sys.executable).with_name("llmhost"))
MODEL = "gemma-3-270m"  # hello's
SMOL = "smollm2-135m"  # the built-in instruct model (tool calls)
PROMPT = "The capital of France is"
LOADED = f"loaded model {MODEL}"  # the engine's note when it loads the model: `run`'s on a terminal, `serve`'s log


def llmhost_run(args: list[str], cache_dir: Path, terminal: bool = False) -> subprocess.CompletedProcess[str]:
    """`llmhost run ARGS`; `terminal`: its stderr a terminal (a pseudo-terminal read here), where `run` prints its
    progress notes, model loads included, as a developer sees them."""
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_CONNECT")}
    env["LLMHOST_CACHE_DIR"] = str(cache_dir)
    command = [LLMHOST, "run", *args]
    if not terminal:
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    primary, secondary = pty.openpty()
    read: list[bytes] = []

    def drain() -> None:  # on a thread, so that the child never blocks on a full terminal buffer
        with contextlib.suppress(OSError):  # EIO once the child closed its end
            while chunk := os.read(primary, 4096):
                read.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        process = subprocess.run(command, stdout=subprocess.PIPE, stderr=secondary, text=True, env=env, timeout=300)
    finally:
        os.close(secondary)
        reader.join(timeout=10)
        os.close(primary)
    return subprocess.CompletedProcess(command, process.returncode, process.stdout, b"".join(read).decode())


@pytest.fixture(scope="module")
def server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    # Without the prefix cache, as real_host runs these models: a reused prefix batches the rest of a prompt
    # differently, which at near-ties changes greedy output (tests/e2e/conftest.py).
    config = tmp_path_factory.mktemp("connect") / "serve.toml"
    config.write_text("".join(f"[models.{name}]\nprefix-cache = false\n" for name in (MODEL, SMOL)))
    with serving(["-c", str(config), str(http_wasm["openai-compat"])], llmhost_cache_dir) as server:
        yield server


@pytest.fixture(scope="module")
def connected(server: Server, real_config: HostConfig) -> Iterator[Host]:
    """A host as `llmhost run --connect` makes it (engine/remote/connect.py), in this process."""
    with Host(lent_models(real_config, server.url)) as host:
        yield host


def completion_lines(server: Server, start: int, count: int) -> list[str]:
    """The log lines of the next `count` completion requests from line `start` on (each logged once it ends)."""
    found: list[str] = []
    while len(found) < count:
        server.wait_for_line(r"POST /v1/completions \d+", 30, start)
        start = next(i for i in range(start, len(server.lines)) if "POST /v1/completions" in server.lines[i]) + 1
        found.append(server.lines[start - 1])
    return found


def test_connected_runs_equal_a_local_run_and_the_second_loads_no_model(
    server: Server, hello_wasm: Path, llmhost_cache_dir: Path
) -> None:
    local = llmhost_run([str(hello_wasm), "--", PROMPT], llmhost_cache_dir, terminal=True)
    assert local.returncode == 0, local.stderr
    assert LOADED in local.stderr  # a plain run loads the model itself, and says so
    outputs = []
    for expected_loads in (1, 1):  # the server loads the model for the first run, the second finds it warm
        args = ["--connect", server.url, str(hello_wasm), "--", PROMPT]
        connected = llmhost_run(args, llmhost_cache_dir, terminal=True)
        assert connected.returncode == 0, connected.stderr
        assert LOADED not in connected.stderr and "loaded model" not in connected.stderr
        assert sum(LOADED in line for line in server.lines) == expected_loads, server.lines[-20:]
        outputs.append(connected.stdout)
    # The same greedy params (repeat penalty 1.1 included) on the same machine: the same text, reason and usage.
    assert outputs == [local.stdout, local.stdout]
    for endpoint in ("/v1/tokenize", "/v1/completions"):  # the prompt counted there too: no vocabulary loads here
        assert sum(f"POST {endpoint} 200" in line for line in server.lines) == 2, server.lines[-20:]


def test_a_guest_s_logprobs_and_constraints_through_connect_equal_local_ones(
    server: Server, guest_wasm: dict[str, Path], llmhost_cache_dir: Path, real_host: Host
) -> None:
    """The probe guest under `llmhost run --connect`: a sequence's logprobs and a constrained generation (each on
    openai-compat's own fields) equal the same calls on a local model through the Python API; a sequence's
    generated text joins it here."""
    greedy = {"max-tokens": 4, "temperature": 0.0}
    steps_params = {
        "a": {**greedy, "logprobs": 2},
        "b": {**greedy, "max-tokens": 12, "constraint": {"regex": " [A-Z][a-z]+(, [A-Z][a-z]+)?"}},
    }
    script = [step for name, params in steps_params.items() for step in [["open", name], ["append", name, PROMPT],
              ["len", name], ["generate", name, params], ["len", name]]]  # fmt: skip
    probe = llmhost_run(
        ["--connect", server.url, str(guest_wasm["probe"]), "seq", MODEL, json.dumps(script)], llmhost_cache_dir
    )
    assert probe.returncode == 0, probe.stderr  # WIT errors the guest handled, never a trap
    steps = json.loads(probe.stdout.strip().splitlines()[-1])["ok"]
    for k, (name, params) in enumerate(steps_params.items()):
        before, got, after = (step.get("ok", step) for step in steps[5 * k + 2 : 5 * k + 5])
        seq = real_host.open_sequence(MODEL)
        try:
            seq.append(PROMPT)
            expected = seq.generate(probe_params(params))
        finally:
            seq.close()
        wanted = result_json(expected)
        for i, (entry, local) in enumerate(zip(got.get("logprobs", []), wanted.get("logprobs", []), strict=True)):
            assert entry == local, (name, i)
        assert got == wanted, name
        assert got["usage"]["prompt-token-count"] == before > 1
        assert after > before  # the generated text joined the sequence kept here
    assert [len(entry["top"]) for entry in steps[3]["ok"]["logprobs"]] == [2] * 4


def probe_params(params: dict[str, Any]) -> InferencingParams:
    """The probe's PARAMS_JSON as the Python API's params (the WIT defaults for the rest)."""
    constraint = params.get("constraint")
    if constraint is not None:
        [(kind, value)] = constraint.items()
        constraint = Constraint(kind=kind, **({"options": tuple(value)} if kind == "choice" else {"text": value or ""}))
    return InferencingParams(
        max_tokens=params["max-tokens"], temperature=params["temperature"], logprobs=params.get("logprobs"),
        constraint=constraint,
    )  # fmt: skip


def f32(value: float) -> float:
    """As the WIT's `f32` carries a logprob to a guest (the Python API keeps the host's double)."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def result_json(result: InferenceResult) -> dict[str, Any]:
    """An `InferenceResult` as the probe prints one (tests/guests/probe/app.py `result_json`)."""
    value: dict[str, Any] = {
        "text": result.text,
        "finish-reason": str(result.finish_reason),
        "usage": {
            "prompt-token-count": result.usage.prompt_token_count,
            "generated-token-count": result.usage.generated_token_count,
        },
    }
    if result.logprobs:
        value["logprobs"] = [
            {
                "token-id": e.token_id, "bytes": list(e.bytes), "logprob": f32(e.logprob),
                "top": [{"token-id": t.token_id, "bytes": list(t.bytes), "logprob": f32(t.logprob)} for t in e.top],
            }
            for e in result.logprobs
        ]  # fmt: skip
    return value


def in_f32(result: InferenceResult) -> InferenceResult:
    """`result` with its logprobs as the server's guest sends them on (the WIT's `f32`)."""
    entries = tuple(
        e.model_copy(
            update={
                "logprob": f32(e.logprob),
                "top": tuple(t.model_copy(update={"logprob": f32(t.logprob)}) for t in e.top),
            }
        )
        for e in result.logprobs
    )
    return result.model_copy(update={"logprobs": entries})


SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}
CONSTRAINTS = {
    "json-schema": Constraint.json_schema(json.dumps(SCHEMA)),
    "json-object": Constraint.json_object(),
    "regex": Constraint.regex(" [A-Z][a-z]+"),
    "grammar": Constraint.grammar('root ::= " " ("Paris" | "Lyon" | "a city")'),
    "choice": Constraint.choice([" Paris", " London", " nowhere"]),
}


def test_constraints_logprobs_tools_and_score_through_connect_equal_local_ones(
    server: Server, connected: Host, real_host: Host
) -> None:
    """What a local run does, against the server: each constraint kind, logprobs (stops sent and matched there),
    a chat with a required tool call (constrained by an %llguidance grammar), and a sequence's score. Every
    completion request ends as completed in the server's log, never as a client that disconnected."""
    start = len(server.lines)
    requests = 0
    for kind, constraint in CONSTRAINTS.items():
        params = InferencingParams(max_tokens=12, temperature=0.0, constraint=constraint)
        got, expected = connected.infer(MODEL, PROMPT, params), real_host.infer(MODEL, PROMPT, params)
        assert got == expected, kind
        requests += 1
    # Logprobs by token id, with a stop that ends the generation on the server as here.
    params = InferencingParams(max_tokens=16, temperature=0.0, logprobs=3, stop=(".",))
    got, expected = connected.infer(MODEL, PROMPT, params), real_host.infer(MODEL, PROMPT, params)
    assert got == in_f32(expected) and got.logprobs and len(got.logprobs[0].top) == 3
    requests += 1
    # Streamed, the chunks carry the token ids (grouped as each side's reads happen to group them).
    streamed = [
        list(connected.infer_stream(MODEL, PROMPT, params)),
        list(real_host.infer_stream(MODEL, PROMPT, params)),
    ]
    ids = [[t for event in events for t in getattr(event, "token_ids", ())] for events in streamed]
    assert ids[0] == ids[1] == [e.token_id for e in expected.logprobs]
    requests += 1

    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    weather = Tool(name="get_weather", description="The weather in a city",
                   parameters=json.dumps({"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}))  # fmt: skip
    chat_params = InferencingParams(max_tokens=48, temperature=0.0)
    got_chat = connected.chat(SMOL, question, chat_params, tools=[weather], tool_choice="required")
    expected_chat = real_host.chat(SMOL, question, chat_params, tools=[weather], tool_choice="required")
    assert expected_chat.finish_reason == "tool-calls"
    calls = [(c.name, c.arguments) for c in got_chat.message.tool_calls]
    assert calls == [(c.name, c.arguments) for c in expected_chat.message.tool_calls]
    assert (got_chat.finish_reason, got_chat.usage) == (expected_chat.finish_reason, expected_chat.usage)
    requests += 1

    options = [" Paris", " London", " a banana split", ""]
    scores = []
    for host in (connected, real_host):
        seq = host.open_sequence(MODEL)
        try:
            seq.append(PROMPT)
            scores.append(seq.score(options))
            assert len(seq) == len(host.tokenize(MODEL, PROMPT))  # scoring leaves the sequence as it was
        finally:
            seq.close()
    remote, local_scores = scores
    assert remote[-1] == local_scores[-1] == 0.0  # an empty continuation
    # The server scores a prompt echoed with its logprobs, in batches of another shape than a local score's, which
    # llama.cpp's kernels round differently (measured: 1% on a 4-token continuation): the ranking cannot change.
    assert remote == pytest.approx(local_scores, rel=0.05, abs=0.05)
    assert sorted(range(3), key=remote.__getitem__) == sorted(range(3), key=local_scores.__getitem__)
    requests += 1

    lines = completion_lines(server, start, requests)
    assert not [line for line in lines if "disconnected" in line], lines


def test_what_stays_refused_names_running_without_connect(connected: Host) -> None:
    seq = connected.open_sequence(MODEL)
    try:
        seq.append(PROMPT)
        with pytest.raises(InvalidInput, match=r"run without `--connect` / `LLMHOST_CONNECT`"):
            seq.next_token_logprobs(3)
        with pytest.raises(InvalidInput, match=r"run without `--connect` / `LLMHOST_CONNECT`"):
            seq.beam_search(BeamParams(width=2, max_tokens=2))
    finally:
        seq.close()


def test_an_unreachable_server_is_one_line_naming_the_fix(hello_wasm: Path, llmhost_cache_dir: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    refused = llmhost_run(["--connect", f"http://127.0.0.1:{port}", str(hello_wasm)], llmhost_cache_dir)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "llmhost serve" in refused.stderr, refused.stderr
    assert f"cannot reach an llmhost server at http://127.0.0.1:{port}/v1" in refused.stderr
