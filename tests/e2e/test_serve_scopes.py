"""Run scopes under `llmhost serve`: what a request opens is freed when it ends, and a long embeddings call
neither stalls other requests nor outlives its deadline. A real server with the real model, on loopback."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm]

DEADLINE_S = 8


@pytest.fixture(scope="module")
def server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("serve-scopes") / "llmhost.toml"
    config.write_text(
        f"""
[models.gemma-3-270m]
slots = 2

[limits]
deadline-s = {DEADLINE_S}
max-tokens = 16000
max-memory-mb = 512

[components.probe]
source = "{http_wasm["http_probe"]}"

[routes]
"/" = "probe"
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as running:
        running.get_json("/infer?max_tokens=1")  # load the model
        yield running
        assert running.stop() == 0


@pytest.mark.slow  # soak: 100 leaking requests
def test_requests_that_return_holding_handles_leave_nothing_behind(server: Server) -> None:
    # With 2 slots, two leaked streams or sequences would starve every later request for good. (One at a time:
    # each request holds a generating stream and a sequence, which is all of the 2 slots.)
    held = [server.request("GET", "/hold") for _ in range(100)]
    assert all(status == 200 for status, _ in held), held[:3]
    for _ in range(20):
        started = time.monotonic()
        result = server.get_json("/infer?max_tokens=4")
        assert result["ok"]["generated"] == 4
        assert time.monotonic() - started < 5  # never waits behind a leaked slot


def test_embeddings_interleave_with_a_stream_and_stop_at_the_deadline(server: Server) -> None:
    outcome: dict[str, object] = {}

    def embed() -> None:
        started = time.monotonic()
        outcome["status"], outcome["body"] = server.request("GET", "/embed?n=1000")
        outcome["ended"] = time.monotonic()
        outcome["elapsed"] = outcome["ended"] - started

    worker = threading.Thread(target=embed)
    worker.start()
    time.sleep(0.5)  # the embeddings call is under way
    connection = server.connection()
    connection.request("GET", "/stream?max_tokens=60&prompt=Once%20upon%20a%20time")
    response = connection.getresponse()
    assert response.status == 200
    arrivals, generated, done = [], [], None
    while True:
        line = response.readline()
        if not line:
            break
        if line.startswith(b"event: done"):
            done = json.loads(response.readline().removeprefix(b"data: "))
            break
        if line.startswith(b"data: "):
            arrivals.append(time.monotonic())
            generated.append(json.loads(line.removeprefix(b"data: "))["generated"])
    stream_ended = time.monotonic()
    connection.close()
    worker.join(timeout=60)
    # The stream ran to its end while the embeddings call was still going (it had ~7 s of work left), its tokens
    # arriving in many chunks (several tokens each: a burst's), never stalled behind a long embeddings decode.
    assert done is not None and done["generated"] >= generated[-1] > 10, (done, generated)
    assert stream_ended < float(outcome["ended"]), outcome  # type: ignore[arg-type]
    assert len(arrivals) >= 3, generated
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert max(gaps) < 2.0, max(gaps)
    # The embeddings call was stopped at its deadline instead of holding the model for minutes.
    assert outcome["status"] in (500, 504), outcome
    assert float(outcome["elapsed"]) < DEADLINE_S + 5, outcome  # type: ignore[arg-type]
    # And the server still answers.
    assert server.get_json("/infer?max_tokens=2")["ok"]["generated"] == 2
    json.dumps(outcome, default=str)


def test_a_score_past_its_deadline_stops_and_an_infer_answers_right_after(server: Server) -> None:
    """`score` is bounded like a generation: 14 continuations of 300 words (a logits row for each of their ~12,600
    tokens, within the budget) take far longer than the deadline even on a fast CPU (2 of them took under 8 s on an
    AVX-512 EPYC), but the deadline cancels the score within one decode step, and the model is free for the next
    request."""
    started = time.monotonic()
    status, body = server.request("GET", "/score?n=14&words=300")
    elapsed = time.monotonic() - started
    assert status == 504 or (status == 500 and json.loads(body)["err"]["kind"] == "runtime-error"), (status, body)
    assert elapsed < DEADLINE_S + 5, elapsed  # the deadline plus the grace, not the minutes scoring would take
    # The very next request is served at once: nothing is still scoring in the background.
    started = time.monotonic()
    assert server.get_json("/infer?max_tokens=4")["ok"]["generated"] == 4
    infer_s = time.monotonic() - started
    started = time.monotonic()
    assert server.get_json("/infer?max_tokens=4")["ok"]["generated"] == 4
    assert infer_s < 3 * (time.monotonic() - started) + 2.0, infer_s  # no more than a step's wait plus its own time


def test_a_score_over_the_token_budget_is_refused_before_any_work(server: Server) -> None:
    started = time.monotonic()
    status, body = server.request("GET", "/score?n=20&words=300")  # ~20 × 900 tokens: over max-tokens = 16000
    assert time.monotonic() - started < DEADLINE_S  # refused up front, not cut off at the deadline
    result = json.loads(body)
    assert status == 500 and result["err"]["kind"] == "invalid-input", result
    assert "limits.max-tokens" in result["err"]["message"]


def test_trapping_requests_release_their_memory_at_once(server: Server) -> None:
    # A trap leaves the instance in a reference cycle with the exception; the store is closed with the request
    # anyway, so its memory is gone before the next request, not at the next garbage collection.
    server.request("GET", "/alloc?mb=200&trap=1")  # warm up: the allocator's own first growth
    before = server.rss_kb()
    for _ in range(10):
        status, _ = server.request("GET", "/alloc?mb=200&trap=1")
        assert status == 500
    assert server.rss_kb() - before < 100 * 1024


def test_a_sequence_open_loop_hits_the_quota_and_others_are_unaffected(server: Server) -> None:
    status, body = server.request("GET", "/open-many?n=100")
    result = json.loads(body)
    assert status == 200 and result["opened"] == 64, result
    assert result["err"]["kind"] == "invalid-input" and "sandbox.max-open-sequences" in result["err"]["message"]
    assert server.get_json("/infer?max_tokens=2")["ok"]["generated"] == 2
