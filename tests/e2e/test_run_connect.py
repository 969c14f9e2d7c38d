"""`llmhost run --connect URL`: a command component run here against the warm models of a running `llmhost serve`
of guest-examples/openai-compat (README, "A warm model for `llmhost run`"), through the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm, pytest.mark.slow]

LLMHOST = str(Path(sys.executable).with_name("llmhost"))
MODEL = "gemma-3-270m"  # hello's
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
def server(http_wasm: dict[str, Path], llmhost_cache_dir: Path) -> Iterator[Server]:
    with serving([str(http_wasm["openai-compat"])], llmhost_cache_dir) as server:
        yield server


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


def test_what_a_completions_api_cannot_carry_is_invalid_input_and_sequences_run_there(
    server: Server, guest_wasm: dict[str, Path], llmhost_cache_dir: Path
) -> None:
    greedy = {"max-tokens": 4, "temperature": 0.0}
    script = [
        ["open", "s"],
        ["append", "s", PROMPT],
        ["generate", "s", {**greedy, "logprobs": 2}],
        ["generate", "s", {**greedy, "constraint": {"json-object": None}}],
        ["len", "s"],
        ["generate", "s", greedy],
        ["len", "s"],
    ]
    probe = llmhost_run(
        ["--connect", server.url, str(guest_wasm["probe"]), "seq", MODEL, json.dumps(script)], llmhost_cache_dir
    )
    assert probe.returncode == 0, probe.stderr  # WIT errors the guest handled, never a trap
    steps = json.loads(probe.stdout.strip().splitlines()[-1])["ok"]
    logprobs, constrained = steps[2]["err"], steps[3]["err"]
    assert logprobs["kind"] == "invalid-input" and "logprobs" in logprobs["message"]
    assert constrained["kind"] == "invalid-input" and "json-object" in constrained["message"]
    before, generated, after = steps[4]["ok"], steps[5]["ok"], steps[6]["ok"]
    assert generated["finish-reason"] == "length" and generated["usage"]["generated-token-count"] == 4
    assert generated["usage"]["prompt-token-count"] == before > 1
    assert after > before  # the generated text joined the sequence kept here


def test_an_unreachable_server_is_one_line_naming_the_fix(hello_wasm: Path, llmhost_cache_dir: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    refused = llmhost_run(["--connect", f"http://127.0.0.1:{port}", str(hello_wasm)], llmhost_cache_dir)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "llmhost serve" in refused.stderr, refused.stderr
    assert f"cannot reach an llmhost server at http://127.0.0.1:{port}/v1" in refused.stderr
