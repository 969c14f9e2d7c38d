"""Faults of the remote (OpenAI-compatible) backend against real servers on loopback: a port nobody listens on,
a server killed mid-stream, a server that answers 503 first, cancellation and deadlines mid-request, and
concurrency. The server is tests/remote_test_server.py (a tiny streaming server of our own)."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost.config import ModelConfig
from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.limits import DEFAULT_MODEL
from llmhost.domain.types import InferencingParams, StreamChunk, StreamDone
from llmhost.engine.remote.engine import OpenAIEngine
from llmhost.run.scope import RunScope, ScopedGeneration

SERVER = Path(__file__).resolve().parents[1] / "remote_test_server.py"
PARAMS = InferencingParams(max_tokens=8, temperature=0, repeat_penalty=1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), str(self.port), *args], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=5) as r:
            data: dict[str, int] = json.loads(r.read())
            return data

    def wait_idle(self, timeout: float = 5.0) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if stats["active"] == 0 or time.monotonic() > deadline:
                return stats
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.stop()


def _cache_dir() -> Path:
    import os

    shared = os.environ.get("LLMHOST_TEST_CACHE_DIR")
    return Path(shared) if shared else Path.home() / ".cache" / "llmhost"


def remote_engine(*urls: str, **extra: Any) -> OpenAIEngine:
    config = ModelConfig(
        backend="openai", base_urls=urls, remote_model="m", connect_timeout_s=2, read_timeout_s=10, **extra
    )
    # Named as the embedded default model, whose vocabulary tokenizes prompts here (the server has no endpoint).

    return OpenAIEngine({DEFAULT_MODEL: config}, cache_dir=_cache_dir())


MODEL = "gemma-3-270m"


def test_a_port_nobody_listens_on_is_a_runtime_error_naming_the_url_and_the_key() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    eng = remote_engine(url)
    try:
        eng.tokenize(MODEL, "Hello")  # load the vocabulary first: only the request is timed
        started = time.monotonic()
        with pytest.raises(EngineError) as err:
            eng.infer(MODEL, "Hello", PARAMS)
        assert time.monotonic() - started < 2.0  # refused at once, well within the connect timeout
        assert url in err.value.message and f"models.{MODEL}.base-urls" in err.value.message
    finally:
        eng.close()


def test_a_dead_url_is_skipped_for_a_live_one(server: Server) -> None:
    eng = remote_engine(f"http://127.0.0.1:{free_port()}/v1", server.url)
    try:
        for _ in range(2):  # round-robin: one of the two starts on the dead URL
            result = eng.infer(MODEL, "Hello", PARAMS)
            assert result.text == " tok" * 8 and result.usage.generated_token_count == 8
    finally:
        eng.close()


def test_503_is_retried_and_then_served() -> None:
    server = Server("--busy", "2")
    eng = remote_engine(server.url)
    try:
        result = eng.infer(MODEL, "Hello", PARAMS)
        assert result.text == " tok" * 8
        assert result.finish_reason == "length"
        # The budget spent, the request is closed at once (issue 66): the usage is counted here, not the server's 3.
        assert result.usage.prompt_token_count == 2 and result.usage.generated_token_count == 8
        assert server.stats()["requests"] == 3
    finally:
        eng.close()
        server.stop()


def test_503_beyond_the_retries_is_a_runtime_error_naming_the_key() -> None:
    server = Server("--busy", "5")
    eng = remote_engine(server.url, retries=1)
    try:
        with pytest.raises(EngineError) as err:
            eng.infer(MODEL, "Hello", PARAMS)
        assert "503" in err.value.message and f"models.{MODEL}.retries" in err.value.message
        assert server.stats()["requests"] == 2
    finally:
        eng.close()
        server.stop()


def test_a_server_killed_mid_stream_is_a_runtime_error_not_a_hang(server: Server) -> None:
    eng = remote_engine(server.url)
    try:
        gen = eng.stream(MODEL, "Hello", InferencingParams(max_tokens=200, temperature=0))
        first = next(gen)
        assert isinstance(first, StreamChunk)
        server.proc.kill()
        started = time.monotonic()
        with pytest.raises(EngineError) as err:
            for _ in gen:
                pass
        assert time.monotonic() - started < 5
        assert server.url.removesuffix("/v1") in err.value.message and "cut" in err.value.message
    finally:
        eng.close()


def test_a_stop_sequence_ends_the_remote_request_at_once(server: Server) -> None:
    eng = remote_engine(server.url)
    try:
        gen = eng.stream(MODEL, "Hello", InferencingParams(max_tokens=200, temperature=0, stop=("ok t",)))
        events = list(gen)
        assert [e.text for e in events if isinstance(e, StreamChunk)] == [" t"]
        done = events[-1]
        assert isinstance(done, StreamDone) and done.finish_reason == "stop"
        assert done.usage.generated_token_count == 2  # counted here: the request was closed, no server usage
        stats = server.wait_idle()
        assert stats["active"] == 0 and stats["cancelled"] == 1
    finally:
        eng.close()


def test_closing_a_generation_mid_request_cancels_the_remote_request(server: Server) -> None:
    eng = remote_engine(server.url)
    try:
        gen = eng.stream(MODEL, "Hello", InferencingParams(max_tokens=200, temperature=0))
        next(gen)
        gen.close()
        assert list(gen) == []
        stats = server.wait_idle()
        assert stats["active"] == 0 and stats["cancelled"] == 1
    finally:
        eng.close()


def test_a_deadline_mid_request_cancels_the_remote_request(server: Server) -> None:
    """What a request's deadline does (serve cancels the request's run scope): cancel the scoped generation from
    another thread while its step waits on the network. The step ends with the deadline's error at once, and the
    server's request is gone."""
    eng = remote_engine(server.url)
    try:
        scope = RunScope("request")
        gen = ScopedGeneration(eng.stream(MODEL, "Hello", InferencingParams(max_tokens=200, temperature=0)), scope)
        next(gen)
        timer = threading.Timer(0.3, scope.cancel, args=("the request's deadline passed",))
        timer.start()
        started = time.monotonic()
        with pytest.raises(EngineError, match="deadline"):
            for _ in gen:
                pass
        assert time.monotonic() - started < 2
        stats = server.wait_idle()
        assert stats["active"] == 0 and stats["cancelled"] == 1
    finally:
        eng.close()


def test_requests_go_out_concurrently_up_to_the_models_slots(server: Server) -> None:
    eng = remote_engine(server.url, slots=3)
    try:
        gens = [eng.stream(MODEL, "Hello", InferencingParams(max_tokens=30, temperature=0)) for _ in range(4)]
        results: list[Any] = [None] * 4

        def run(i: int) -> None:
            results[i] = [e for e in gens[i]]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.6)
        assert server.stats()["active"] == 3  # three at once (not one behind a lock), the fourth waits its turn
        for t in threads:
            t.join(10)
        assert all(isinstance(r[-1], StreamDone) for r in results)
    finally:
        eng.close()


def test_per_token_embeddings_are_mean_pooled_and_a_malformed_body_is_a_runtime_error(server: Server) -> None:
    eng = remote_engine(server.url)
    try:
        result = eng.embeddings(MODEL, ["ab", "z"])
        # "ab": tokens [97, 1] and [98, 1], mean [97.5, 1], L2-normalized; "z": one token [122, 1].
        for vector, (x, y) in zip(result.embeddings, [(97.5, 1.0), (122.0, 1.0)], strict=True):
            norm = math.hypot(x, y)
            assert vector == pytest.approx([x / norm, y / norm])
        assert result.prompt_token_count == 3
        for broken, field in [("no-data", "`data`"), ("strings", "`data[0].embedding`"),
                              ("ragged", "`data[0].embedding`"), ("index", "`data[0].index`")]:  # fmt: skip
            with pytest.raises(EngineError) as err:
                eng.embeddings(MODEL, [f"malformed:{broken}"])
            assert server.url in err.value.message and field in err.value.message, err.value.message
        with pytest.raises(InvalidInput, match="at most 16384"):
            eng.embeddings(MODEL, ["x"] * 16385)  # checked as the local engine checks, before any request
        # More texts than a server takes in one request (OpenAI's 2048; the test server refuses more): sent in
        # several requests, the vectors in input order.
        texts = [chr(65 + i % 50) for i in range(2100)]
        many = eng.embeddings(MODEL, texts)
        assert [v[0] * math.hypot(ord(t), 1.0) for v, t in zip(many.embeddings, texts, strict=True)] == pytest.approx(
            [float(ord(t)) for t in texts]
        )
    finally:
        eng.close()
