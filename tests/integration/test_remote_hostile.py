"""Remote models against a hostile OpenAI-compatible server on loopback (issue 66): keep-alives, empty chunks or a
byte at a time forever, text without end, silence, endless or credential-echoing error bodies, an endless model
listing, and values of the wrong type. Every call ends within its bound (the run's deadline, else
`read-timeout-s` as a whole) with a one-line error; none reads past its token budget; no message quotes a key.

The server is of kind "llmhost" (as `run --connect` makes them): it counts prompts at /v1/tokenize, so no model
file is needed. The request's `model` field picks the behaviour."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llmhost.config import ConfigError, HostConfig, ModelConfig, SandboxConfig
from llmhost.domain.errors import EngineError, InvalidInput, LlmError
from llmhost.domain.types import InferencingParams, StreamDone
from llmhost.engine.remote import connect
from llmhost.engine.remote.bounds import MAX_LISTING_BYTES
from llmhost.engine.remote.engine import OpenAIEngine
from llmhost.run.scope import RunScope, ScopedGeneration
from probe_driver import ProbeOutcome

KEY = "sk-hostile-test-0123456789abcdef"
OTHER_CREDENTIAL = "dXNlcjpzZWNyZXRwYXNz"  # some Authorization value that is not our key
FOUR = InferencingParams(max_tokens=4, temperature=0)
POLL_S = 0.05  # serve_forever's shutdown poll (its default, 0.5 s, would end each test that much later)
SLACK_S = 1.5  # past a bound: thread wake-ups, closing the connection
HANG_S = 20.0  # what the old code exceeded (it ran on forever): the tests' own bound
CHUNK = {"id": "x", "object": "text_completion", "created": 0, "model": "m"}


def _chunk(text: Any = " tok", finish: Any = None, **extra: Any) -> bytes:
    body = {**CHUNK, "choices": [{"index": 0, "text": text, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Hostile:
    """The server: one thread per request; every endless behaviour ends when the client goes or `stop` is set."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.listing = "endless"
        self.sent = 0  # bytes of the last endless body
        self.gone = threading.Event()  # a client closed a stream while it was still being written
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def head(self, status: int = 200, kind: str = "text/event-stream") -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.flush()

            def forever(self, piece: Callable[[], bytes], every_s: float, cap: int = 1 << 40) -> None:
                hostile.sent = 0
                try:
                    while not hostile.stop.is_set() and hostile.sent < cap:
                        data = piece()
                        self.wfile.write(data)
                        self.wfile.flush()
                        hostile.sent += len(data)
                        if every_s:
                            hostile.stop.wait(every_s)
                except OSError:
                    hostile.gone.set()
                self.close_connection = True

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if hostile.listing == "endless":  # 64 MiB at most: enough to pass any cap, not to fill the machine
                    self.head(200, "application/json")
                    self.wfile.write(b'{"data": [')
                    self.forever(lambda: b'{"id": "m"}, ' * 4096, 0.0, cap=64 << 20)
                elif hostile.listing == "drip":
                    self.head(200, "application/json")
                    self.forever(lambda: b" ", 0.3)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                mode = str(body.get("model", ""))
                auth = self.headers.get("authorization", "")
                if self.path == "/v1/tokenize":
                    self.tokenize(mode, auth)
                    return
                if mode == "silent":
                    hostile.stop.wait(HANG_S)
                    return
                if mode == "echo-auth":  # an error that quotes the request's headers, ours and another's
                    message = f"bad request: authorization: {auth}; proxy-authorization: Basic {OTHER_CREDENTIAL}"
                    payload = json.dumps({"error": {"message": message, "headers": {"Authorization": auth}}})
                    self.send_response(400)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload.encode())
                    return
                if mode == "endless-error":
                    self.head(500, "application/json")
                    self.forever(lambda: b"x" * 65536, 0.0, cap=64 << 20)
                    return
                self.head()
                if mode == "keepalive":
                    self.forever(lambda: b": keep-alive\n\n", 0.2)
                elif mode == "empty":
                    self.forever(lambda: b"data: " + json.dumps({**CHUNK, "choices": []}).encode() + b"\n\n", 0.2)
                elif mode == "drip":
                    self.forever(lambda: b":", 2.0)
                elif mode == "silent-body":
                    hostile.stop.wait(HANG_S)
                elif mode == "endless":
                    self.forever(_chunk, 0.01)
                elif mode == "text-123":
                    self.forever(lambda: _chunk(123), 0.0, cap=1)
                elif mode in ("usage-negative", "usage-string", "cached-string"):
                    usage: dict[str, Any] = {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
                    if mode == "usage-negative":
                        usage["prompt_tokens"] = -5
                    elif mode == "usage-string":
                        usage["completion_tokens"] = "many"
                    else:
                        usage["prompt_tokens_details"] = {"cached_tokens": "some"}
                    last = {**CHUNK, "choices": [], "usage": usage}
                    self.wfile.write(_chunk(" ok", "stop") + b"data: " + json.dumps(last).encode() + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")

            def tokenize(self, mode: str, auth: str) -> None:
                if mode == "tokenize-silent":
                    hostile.stop.wait(HANG_S)
                    return
                if mode == "tokenize-drip":
                    self.head(200, "application/json")
                    self.forever(lambda: b" ", 0.3)
                    return
                if mode == "tokenize-echo":
                    payload = f"refused, you sent authorization: {auth}".encode()
                    self.send_response(500)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                tokens: Any = {"tokenize-strings": ["a", 1], "tokenize-floats": [1, 2.5], "tokenize-negative": [-3]}
                payload = json.dumps({"tokens": tokens.get(mode, [1, 2])}).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    server = Hostile()
    thread = threading.Thread(target=server.server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True)
    thread.start()
    yield server
    server.stop.set()
    server.server.shutdown()
    server.server.server_close()


def model(url: str, mode: str, **extra: Any) -> ModelConfig:
    fields: dict[str, Any] = {"read_timeout_s": 3.0, "connect_timeout_s": 2.0, **extra}
    return ModelConfig(backend="openai", base_urls=(url + "/v1",), server="llmhost", remote_model=mode, **fields)


def engine(url: str, mode: str, tmp_path: Path, **extra: Any) -> OpenAIEngine:
    return OpenAIEngine({"m": model(url, mode, **extra)}, cache_dir=tmp_path)


def bounded(call: Callable[[], Any], limit_s: float) -> tuple[Any, float]:
    """(what `call` returned or raised, seconds it took), failing when it runs past `limit_s` (it is left running
    on a daemon thread then, which the fixture's `stop` ends)."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as error:  # noqa: BLE001 - handed to the test
            box.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    took = time.monotonic() - started
    assert not thread.is_alive(), f"still running after {limit_s} s"
    return box[0], took


def concurrently(calls: dict[str, Callable[[], Any]], limit_s: float) -> dict[str, tuple[Any, float]]:
    """`bounded` for each call, all at once (each waits on a timeout: run together, the cases take one's time)."""
    results: dict[str, tuple[Any, float]] = {}
    threads = [
        threading.Thread(target=lambda k=key, c=call: results.__setitem__(k, bounded(c, limit_s)), daemon=True)
        for key, call in calls.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(limit_s + 1)
    assert set(results) == set(calls), f"still running after {limit_s} s: {sorted(set(calls) - set(results))}"
    return results


def test_a_generation_ends_within_read_timeout_as_a_whole(hostile: Hostile, tmp_path: Path) -> None:
    """Keep-alives, empty chunks and a byte every 2 s each pass a per-read timeout of 3 s forever (the four servers
    run at once)."""
    modes = ["keepalive", "empty", "drip", "silent-body"]
    engines = {mode: engine(hostile.url, mode, tmp_path / mode) for mode in modes}
    try:
        calls = {mode: lambda e=eng: e.infer("m", "Hello", FOUR) for mode, eng in engines.items()}
        results = concurrently(calls, HANG_S)
        for mode, (error, took) in results.items():
            assert isinstance(error, EngineError), (mode, error)
            assert "read-timeout-s" in error.message and "\n" not in error.message, mode
            assert took < 3.0 + SLACK_S, (mode, took)
    finally:
        for eng in engines.values():
            eng.close()


def test_an_endless_stream_returns_after_the_token_budget(hostile: Hostile, tmp_path: Path) -> None:
    """The request is closed the moment the 4th token arrives: nothing more is read "for the usage"."""
    eng = engine(hostile.url, "endless", tmp_path, read_timeout_s=60.0)
    try:
        result, took = bounded(lambda: eng.infer("m", "Hello", FOUR), HANG_S)
        assert not isinstance(result, BaseException), result
        assert result.text == " tok" * 4 and result.finish_reason == "length"
        assert result.usage.generated_token_count == 4 and result.usage.prompt_token_count == 2  # counted here
        assert took < 2.0
        assert hostile.gone.wait(5)  # the server saw the request closed
    finally:
        eng.close()


def test_a_scope_deadline_ends_a_remote_step_that_waits(hostile: Hostile, tmp_path: Path) -> None:
    """A run's deadline (`set_deadline` with a reason, as `App.run` sets it) bounds a remote call far below its
    `read-timeout-s`: a silent server, or one sending keep-alives, is given up on at the deadline."""
    modes = ["silent", "keepalive"]
    engines = {mode: engine(hostile.url, mode, tmp_path / mode, read_timeout_s=60.0) for mode in modes}
    scopes = {mode: RunScope("run of test") for mode in modes}
    try:
        calls = {}
        for mode in modes:
            scopes[mode].set_deadline(time.monotonic() + 2.0, "the run ran past its deadline")
            gen = ScopedGeneration(engines[mode].stream("m", "Hello", FOUR), scopes[mode])
            calls[mode] = lambda g=gen: next(g)
        for mode, (error, took) in concurrently(calls, HANG_S).items():
            assert isinstance(error, EngineError), (mode, error)
            assert "deadline" in error.message, (mode, error.message)
            assert took < 2.0 + SLACK_S, (mode, took)
    finally:
        for mode in modes:
            scopes[mode].close()
            engines[mode].close()


def test_the_deadline_timer_cancels_the_scope_and_ends_with_the_run(tmp_path: Path) -> None:
    scope = RunScope("run of test")
    scope.set_deadline(time.monotonic() + 0.2, "past its time limit")
    time.sleep(0.5)
    assert scope.cancelled == "past its time limit"
    later = RunScope("run of test")
    later.set_deadline(time.monotonic() + 0.3, "never")
    later.close()  # the run ended first: its timer is gone
    time.sleep(0.5)
    assert later.cancelled is None


def test_tokenize_ends_within_its_bound(hostile: Hostile, tmp_path: Path) -> None:
    modes = ["tokenize-silent", "tokenize-drip"]
    engines = {mode: engine(hostile.url, mode, tmp_path / mode, read_timeout_s=2.0) for mode in modes}
    try:
        results = concurrently({mode: lambda e=eng: e.tokenize("m", "Hello") for mode, eng in engines.items()}, HANG_S)
        for mode, (error, took) in results.items():
            assert isinstance(error, EngineError), (mode, error)
            assert "did not complete" in error.message or "timed out" in error.message, (mode, error.message)
            assert took < 2.0 + SLACK_S, (mode, took)
    finally:
        for eng in engines.values():
            eng.close()


def test_an_endless_listing_is_a_one_line_error_at_its_cap(hostile: Hostile) -> None:
    hostile.listing = "endless"
    error, took = bounded(lambda: connect.lent_models(HostConfig(), hostile.url), HANG_S)
    assert isinstance(error, ConfigError), error
    assert f"{MAX_LISTING_BYTES:,} bytes" in str(error) and "\n" not in str(error)
    assert took < 5.0


def test_a_dripping_listing_ends_within_its_time_bound(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect, "_LIST_TIMEOUT_S", 2.0)
    hostile.listing = "drip"
    error, took = bounded(lambda: connect.lent_models(HostConfig(), hostile.url), HANG_S)
    assert isinstance(error, ConfigError), error
    assert "did not complete within 2 s" in str(error)
    assert took < 2.0 + SLACK_S


def test_an_error_body_is_scrubbed_of_every_credential(
    hostile: Hostile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    eng = engine(hostile.url, "echo-auth", tmp_path, api_key_env="HOSTILE_KEY")
    try:
        with pytest.raises(InvalidInput) as refused:
            eng.infer("m", "Hello", FOUR)
        message = refused.value.message
        assert "400" in message and "***" in message
        assert KEY[:12] not in message and OTHER_CREDENTIAL not in message, message
    finally:
        eng.close()
    eng = engine(hostile.url, "tokenize-echo", tmp_path, api_key_env="HOSTILE_KEY")
    try:
        with pytest.raises(EngineError) as failed:
            eng.tokenize("m", "Hello")
        assert "500" in failed.value.message and KEY[:12] not in failed.value.message, failed.value.message
    finally:
        eng.close()


def test_an_endless_error_body_is_read_up_to_a_cap(hostile: Hostile, tmp_path: Path) -> None:
    eng = engine(hostile.url, "endless-error", tmp_path, read_timeout_s=10.0)
    try:
        error, took = bounded(lambda: eng.infer("m", "Hello", FOUR), HANG_S)
        assert isinstance(error, EngineError), error
        assert "500" in error.message and len(error.message) < 1000
        assert took < 2.0
        assert hostile.sent < 8 << 20  # the rest of its 64 MiB was never read
    finally:
        eng.close()


@pytest.mark.parametrize(
    ("mode", "field"),
    [
        ("text-123", "`choices[0].text`"),
        ("usage-negative", "`usage.prompt_tokens`"),
        ("usage-string", "`usage.completion_tokens`"),
        ("cached-string", "`usage.prompt_tokens_details`"),
        ("tokenize-strings", "`tokens[0]`"),
        ("tokenize-floats", "`tokens[1]`"),
        ("tokenize-negative", "`tokens[0]`"),
    ],
)
def test_bad_values_from_a_server_are_runtime_errors_naming_the_field(
    hostile: Hostile, tmp_path: Path, mode: str, field: str
) -> None:
    """Not "internal host error" with a traceback: an `EngineError` (the guest's `runtime-error`)."""
    eng = engine(hostile.url, mode, tmp_path)
    try:
        call = (
            (lambda: eng.tokenize("m", "Hello")) if mode.startswith("tokenize") else lambda: eng.infer("m", "Hi", FOUR)
        )
        with pytest.raises(LlmError) as failed:
            call()
        assert isinstance(failed.value, EngineError) and field in failed.value.message, failed.value.message
    finally:
        eng.close()


def test_a_server_that_ends_by_itself_still_reports_its_usage(hostile: Hostile, tmp_path: Path) -> None:
    """The budget not spent, the stream is read to its end and the server's usage kept (here it is broken, so the
    field is named); the request with a good usage is covered by test_remote_faults."""
    eng = engine(hostile.url, "usage-negative", tmp_path)
    try:
        events: list[Any] = []
        with pytest.raises(EngineError, match="usage.prompt_tokens"):
            for event in eng.stream("m", "Hi", InferencingParams(max_tokens=50, temperature=0)):
                events.append(event)
        assert not any(isinstance(e, StreamDone) for e in events)
    finally:
        eng.close()


def test_a_run_deadline_ends_a_guest_waiting_on_a_silent_server(
    hostile: Hostile,
    make_host: Callable[..., Any],
    probe_wasm: Path,
    llmhost_cache_dir: Path,
    run_probe: Callable[..., ProbeOutcome],
) -> None:
    """`llmhost run` with `timeout-s = 3` against a server that never answers: the guest's `infer` host call ends
    at the run's deadline (the epoch interrupts only guest code), not at `read-timeout-s` (60 s)."""
    config = HostConfig(
        cache_dir=llmhost_cache_dir,
        models={"m": model(hostile.url, "keepalive", read_timeout_s=60.0)},
        sandbox=SandboxConfig(timeout_s=3.0),
    )
    app = make_host(config).load(probe_wasm)
    outcome, took = bounded(lambda: run_probe(app, "infer", "m", "Hello", json.dumps({"max-tokens": 4})), HANG_S)
    assert took < 3.0 + 2 * SLACK_S
    if not isinstance(outcome, BaseException):  # the guest got the error in time to report it
        assert outcome.error is not None and outcome.error["kind"] == "runtime-error", outcome
        assert "deadline" in outcome.error["message"] or "time limit" in outcome.error["message"]
