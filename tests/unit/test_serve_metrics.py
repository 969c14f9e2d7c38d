"""The pure parts of `llmhost serve`'s metrics: the families and their exact values, the engine's observer on a
fake decoder, the admission queue's waits, the probes' answers, and the `metrics-listen` config key."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmhost.config import ConfigError, ModelConfig
from llmhost.domain.types import InferencingParams
from llmhost.engine.admission import AdmissionQueue
from llmhost.engine.local.engine import LlamaCppEngine
from llmhost.engine.local.fake_decoder import FakeDecoder
from llmhost.engine.local.model import EngineModel
from llmhost.serve.server import needed_models
from llmhost.shell.config import load_app_config, resolve
from llmhost.shell.metrics import ServeMetrics
from llmhost.shell.probes import Readiness, probes_app

MODEL = "fake"
GREEDY = InferencingParams(max_tokens=5, temperature=0.0, repeat_penalty=1.0)


def samples(metrics: ServeMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition, parsed back by prometheus_client's own parser."""
    text = metrics.exposition().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def test_requests_and_failures_count_exactly_by_label() -> None:
    metrics = ServeMetrics(["chat", "api"], [MODEL])
    metrics.request("chat", 200, 0.02)
    metrics.request("chat", 200, 3.0)
    metrics.request("chat", 500, 0.1)
    metrics.request("", 404, 0.001)  # no route
    metrics.failure("chat", "trap")
    metrics.failure("chat", "log-dropped")
    found = samples(metrics)
    assert value(found, "llmhost_requests_total", component="chat", status="200") == 2
    assert value(found, "llmhost_requests_total", component="chat", status="500") == 1
    assert value(found, "llmhost_requests_total", component="", status="404") == 1
    assert value(found, "llmhost_request_duration_seconds_count", component="chat") == 3
    assert value(found, "llmhost_request_duration_seconds_bucket", component="chat", le="0.05") == 1
    assert value(found, "llmhost_request_duration_seconds_bucket", component="chat", le="+Inf") == 3
    assert value(found, "llmhost_request_duration_seconds_sum", component="chat") == pytest.approx(3.12)
    assert value(found, "llmhost_guest_failures_total", component="chat", kind="trap") == 1
    assert value(found, "llmhost_guest_failures_total", component="chat", kind="log-dropped") == 1
    # Every kind of every component is there from the start (at 0), so rates and alerts need no first failure.
    for kind in ("trap", "deadline", "memory", "log-dropped"):
        assert ("llmhost_guest_failures_total", frozenset({("component", "api"), ("kind", kind)})) in found
    assert value(found, "llmhost_guest_failures_total", component="api", kind="deadline") == 0
    assert not any(name.endswith("_created") for name, _ in found)


def test_two_servers_in_one_process_have_their_own_registries() -> None:
    first, second = ServeMetrics(["a"], [MODEL]), ServeMetrics(["a"], [MODEL])
    first.request("a", 200, 0.1)
    assert value(samples(first), "llmhost_requests_total", component="a", status="200") == 1
    assert ("llmhost_requests_total", frozenset({("component", "a"), ("status", "200")})) not in samples(second)


def fake_engine(metrics: ServeMetrics, slots: int = 2) -> LlamaCppEngine:
    config = ModelConfig(slots=slots, context_length=64, batch_size=8)

    def load(name: str, config: ModelConfig) -> EngineModel:
        return EngineModel(name, config, FakeDecoder(n_ctx=64, n_batch=8, n_slots=slots), metrics.observer(name))

    return LlamaCppEngine({MODEL: config}, Path("/nonexistent"), load=load)


def test_the_engine_reports_tokens_first_tokens_admissions_and_steps() -> None:
    metrics = ServeMetrics([], [MODEL])
    engine = fake_engine(metrics)
    found = samples(metrics)
    assert value(found, "llmhost_generated_tokens_total", model=MODEL) == 0  # bound before the model loads
    assert ("llmhost_slots", frozenset({("model", MODEL)})) not in found  # not loaded: no gauges yet
    results = [engine.infer(MODEL, prompt, GREEDY) for prompt in ("Hello", "Good morning", "abc")]
    found = samples(metrics)
    model = engine.model(MODEL)
    assert value(found, "llmhost_generated_tokens_total", model=MODEL) == sum(
        r.usage.generated_token_count for r in results
    )
    assert value(found, "llmhost_prompt_tokens_total", model=MODEL) == sum(r.usage.prompt_token_count for r in results)
    assert value(found, "llmhost_time_to_first_token_seconds_count", model=MODEL) == 3
    assert value(found, "llmhost_admission_wait_seconds_count", model=MODEL) == 3
    assert value(found, "llmhost_decode_steps_total", model=MODEL) == model.scheduler.steps > 0
    # One generation at a time: every step decoded one row.
    assert value(found, "llmhost_decode_rows_total", model=MODEL) == model.scheduler.steps
    assert value(found, "llmhost_slots", model=MODEL) == 2
    assert value(found, "llmhost_slots_busy", model=MODEL) == 0
    assert value(found, "llmhost_admission_waiting", model=MODEL) == 0
    assert value(found, "llmhost_swapped_bytes", model=MODEL) == 0
    engine.close()


def test_gauges_under_load_count_busy_slots_and_waiting_work() -> None:
    metrics = ServeMetrics([], [MODEL])
    engine = fake_engine(metrics, slots=1)
    long = GREEDY.model_copy(update={"max_tokens": 40})
    first = engine.stream(MODEL, "Hello", long)
    next(first)  # admitted and generating: it holds the only slot
    second = engine.stream(MODEL, "Other", long)
    reader = threading.Thread(target=lambda: next(second, None), daemon=True)
    reader.start()  # submitted: it waits in the admission queue
    deadline = time.monotonic() + 5
    while value(samples(metrics), "llmhost_admission_waiting", model=MODEL) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    found = samples(metrics)
    assert value(found, "llmhost_admission_waiting", model=MODEL) == 1
    assert value(found, "llmhost_slots_busy", model=MODEL) == 1
    time.sleep(0.05)  # the second waits at least this long
    first.close()
    reader.join(5)
    second.close()
    found = samples(metrics)
    assert value(found, "llmhost_admission_waiting", model=MODEL) == 0
    # Both admissions were observed, and the second's wait for the first's slot is in the sum.
    assert value(found, "llmhost_admission_wait_seconds_count", model=MODEL) == 2
    assert value(found, "llmhost_admission_wait_seconds_sum", model=MODEL) >= 0.05
    assert value(found, "llmhost_admission_wait_seconds_bucket", model=MODEL, le="0.01") <= 1
    engine.close()


def test_the_admission_queue_reports_each_wait() -> None:
    waits: list[float] = []
    queue = AdmissionQueue(threading.RLock(), "the slot", "models.m.slots", on_wait=waits.append)
    free = [False]
    queue.enter("generation", lambda: True)  # room at once: a wait of 0
    waiter = threading.Thread(target=queue.enter, args=("generation", lambda: free[0]))
    waiter.start()
    while queue.waiting == 0:
        time.sleep(0.001)
    time.sleep(0.05)
    free[0] = True
    queue.changed()
    waiter.join(5)
    assert waits[0] == 0.0 and len(waits) == 2 and waits[1] >= 0.05


def call(app: Any, path: str) -> tuple[str, bytes]:
    """GET `path` from the probes' ASGI app: (status as text, body)."""
    import anyio

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"", "headers": []}
    anyio.run(app, scope, receive, send)
    return str(sent[0]["status"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_probes_answer_health_readiness_and_metrics() -> None:
    metrics, readiness = ServeMetrics(["a"], [MODEL]), Readiness()
    app = probes_app(metrics, readiness)
    assert call(app, "/healthz")[0].startswith("200")
    assert call(app, "/readyz")[0].startswith("503")
    readiness.ready = True
    assert call(app, "/readyz")[0].startswith("200")
    status, body = call(app, "/metrics")
    assert status.startswith("200") and b"# TYPE llmhost_requests_total counter" in body
    assert call(app, "/other")[0].startswith("404")


def write_config(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "a.wasm").write_bytes(b"\0asm")
    path = tmp_path / "llmhost.toml"
    path.write_text(
        extra + '\n[components.a]\nsource = "a.wasm"\nallowed-models = ["smollm2-135m"]\n[components.b]\n'
        'source = "a.wasm"\n[routes]\n"/" = "a"\n'
    )
    return path


def test_metrics_listen_is_off_by_default_and_parsed_when_set(tmp_path: Path) -> None:
    path = write_config(tmp_path, "")
    assert resolve(load_app_config(path), str(path)).metrics_listen is None
    path = write_config(tmp_path, 'metrics-listen = "127.0.0.1:9464"')
    assert resolve(load_app_config(path), str(path)).metrics_listen == ("127.0.0.1", 9464)


@pytest.mark.parametrize(
    "line", ['listen = "127.0.0.1:9000"\nmetrics-listen = "127.0.0.1:9000"', 'metrics-listen = "0.0.0.0:8080"']
)
def test_metrics_listen_on_the_apps_port_is_refused(tmp_path: Path, line: str) -> None:
    path = write_config(tmp_path, line)
    with pytest.raises(ConfigError, match=r"`metrics-listen`: .*another port"):
        resolve(load_app_config(path), str(path))


def test_a_malformed_metrics_listen_names_the_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'metrics-listen = "9464"')
    with pytest.raises(ConfigError, match="metrics-listen"):
        load_app_config(path)


def test_the_models_routes_need_are_the_routed_components_allowed_ones(tmp_path: Path) -> None:
    path = write_config(tmp_path, "")
    settings = resolve(load_app_config(path), str(path))
    assert needed_models(settings) == ["smollm2-135m"]  # only "a" is routed, and it may use only smollm2
