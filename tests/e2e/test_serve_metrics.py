"""`llmhost serve` with `metrics-listen`, the real model and real guests: exact counter deltas and histogram counts
for known requests (2xx, 4xx, a trap, a deadline, memory, a dropped log), token counters equal to the responses'
usage, gauges under load, /healthz and /readyz (503 before ready and during shutdown), and a real Prometheus
(Debian's package) scraping it and answering PromQL; each model's residency alike in /v1/models, the listener's /models,
`llmhost models --server` and the gauges."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from serve_driver import LISTENING, LLMHOST, METRICS_LINE, START_TIMEOUT_S, Samples, Server, delta, scrape, value

pytestmark = [pytest.mark.model, pytest.mark.wasm]
MODEL = "gemma-3-270m"
STATUS_MODEL = "smollm2-135m"
STATUS_KEEP_ALIVE_S = 4.0
UNLOAD_TIMEOUT_S = 30.0


class MetricsServer:
    def __init__(self, server: Server, host: str, port: int, readiness: list[int]) -> None:
        self.server = server
        self.host, self.port = host, port
        self.readiness_seen = readiness  # /readyz statuses from the listener's start to ready

    def get(self, path: str) -> tuple[int, str, bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.getheader("content-type", ""), response.read()
        finally:
            connection.close()

    def samples(self) -> Samples:
        return scrape(self.host, self.port)


@pytest.fixture(scope="module")
def metrics_server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MetricsServer]:
    config = tmp_path_factory.mktemp("serve-metrics") / "llmhost.toml"
    config.write_text(
        f"""
metrics-listen = "127.0.0.1:0"
max-log-bytes = 4096
shutdown-grace-s = 4

[models.gemma-3-270m]
slots = 2

[models.smollm2-135m]  # test_model_status_*: used by no other test here, unloads soon once idle
keep-alive-s = {STATUS_KEEP_ALIVE_S}

[limits]
deadline-s = 120
max-tokens = 4000

[components.probe]
source = "{http_wasm["http_probe"]}"
allowed-models = ["{MODEL}"]

[components.slow]
source = "{http_wasm["http_probe"]}"
allowed-models = ["{MODEL}"]
[components.slow.limits]
deadline-s = 1

[components.openai]
source = "{http_wasm["openai-compat"]}"
allowed-models = ["{MODEL}", "{STATUS_MODEL}"]

[routes]
"/" = "probe"
"/slow" = "slow"
"/v1" = "openai"
"""
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_LISTEN")}
    env["LLMHOST_CACHE_DIR"] = str(llmhost_cache_dir)
    process = subprocess.Popen(
        [LLMHOST, "serve", "-c", str(config), "--listen", "127.0.0.1:0", "--preload", MODEL],  # ready: loaded
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    server = Server(process)
    try:
        match = server.wait_for_line(METRICS_LINE.pattern, START_TIMEOUT_S)
        metrics = MetricsServer(server, match.group(1), int(match.group(2)), [])
        # The listener is up before the components load and the model does: /readyz says 503 until then.
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            status = metrics.get("/readyz")[0]
            metrics.readiness_seen.append(status)
            if status == 200:
                break
            time.sleep(0.02)
        listening = server.wait_for_line(LISTENING.pattern, 5)
        server.host, server.port = listening.group(1), int(listening.group(2))
        yield metrics
    finally:
        if process.poll() is None:
            server.stop()


def test_readiness_is_503_until_the_components_and_models_are_loaded(metrics_server: MetricsServer) -> None:
    seen = metrics_server.readiness_seen
    assert seen[0] == 503 and seen[-1] == 200 and set(seen) == {200, 503}, seen
    log = "\n".join(metrics_server.server.lines)
    # Ready came after the model loaded and the app port opened (the log says both before /readyz said 200).
    assert f"loaded model {MODEL}" in log and "listening on" in log
    assert metrics_server.get("/healthz")[0] == 200
    status, content_type, body = metrics_server.get("/metrics")
    assert status == 200 and content_type.startswith("text/plain") and b"llmhost_requests_total" in body
    # The apps' port does not serve the metrics: /metrics there is an ordinary request routed to a guest.
    status, body = metrics_server.server.request("GET", "/metrics")
    assert status == 404 and b"llmhost_" not in body


def test_known_requests_give_exact_counter_deltas(metrics_server: MetricsServer) -> None:
    server = metrics_server.server
    before = metrics_server.samples()
    assert server.request("GET", "/hello")[0] == 200
    assert server.request("GET", "/hello")[0] == 200
    assert server.request("GET", "/no-such-operation")[0] == 404  # the guest's own 4xx
    assert server.request("GET", "/trap")[0] == 500
    assert server.request("GET", "/alloc?mb=400")[0] == 500  # over max-memory-mb (256)
    assert server.request("GET", "/say?text=" + "x" * 5000)[0] == 200  # over max-log-bytes (4096)
    started = time.monotonic()
    assert server.request("GET", "/slow/loop")[0] == 504  # past its 1 s deadline (and the grace)
    slow_seconds = time.monotonic() - started
    after = metrics_server.samples()
    requests = {("probe", "200"): 3, ("probe", "404"): 1, ("probe", "500"): 2, ("slow", "504"): 1}
    for (component, status), count in requests.items():
        assert delta(before, after, "llmhost_requests_total", component=component, status=status) == count
    assert delta(before, after, "llmhost_request_duration_seconds_count", component="probe") == 6
    assert delta(before, after, "llmhost_request_duration_seconds_count", component="slow") == 1
    slow = delta(before, after, "llmhost_request_duration_seconds_sum", component="slow")
    assert 1.0 < slow <= slow_seconds
    # The 504 took more than 5 s: not in the 5 s bucket, in the 10 s one.
    assert delta(before, after, "llmhost_request_duration_seconds_bucket", component="slow", le="5.0") == 0
    assert delta(before, after, "llmhost_request_duration_seconds_bucket", component="slow", le="10.0") == 1
    failures = {
        ("probe", "trap"): 1,
        ("probe", "memory"): 1,
        ("probe", "log-dropped"): 1,
        ("probe", "deadline"): 0,
        ("slow", "deadline"): 1,
        ("slow", "trap"): 0,
        ("openai", "trap"): 0,
    }
    for (component, kind), count in failures.items():
        assert delta(before, after, "llmhost_guest_failures_total", component=component, kind=kind) == count, kind
    # None of these generated: the model's counters did not move.
    assert delta(before, after, "llmhost_generated_tokens_total", model=MODEL) == 0


def completion(server: Server, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, raw = server.request(
        "POST", "/v1/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    return status, json.loads(raw)


def test_token_counters_equal_the_responses_usage(metrics_server: MetricsServer) -> None:
    server = metrics_server.server
    before = metrics_server.samples()
    usages = []
    for prompt, max_tokens in (("Once upon a time", 12), ("The capital of France is", 7), ("1, 2, 3,", 20)):
        status, body = completion(
            server, {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        )
        assert status == 200, body
        usages.append(body["usage"])
    status, body = completion(server, {"model": MODEL, "prompt": "x", "temperature": 7})  # out of range
    assert status == 400, body
    after = metrics_server.samples()
    assert delta(before, after, "llmhost_requests_total", component="openai", status="200") == 3
    assert delta(before, after, "llmhost_requests_total", component="openai", status="400") == 1
    assert delta(before, after, "llmhost_prompt_tokens_total", model=MODEL) == sum(u["prompt_tokens"] for u in usages)
    assert delta(before, after, "llmhost_generated_tokens_total", model=MODEL) == sum(
        u["completion_tokens"] for u in usages
    )
    # One first token per generation; the 400 was refused before any generation.
    assert delta(before, after, "llmhost_time_to_first_token_seconds_count", model=MODEL) == 3
    assert delta(before, after, "llmhost_admission_wait_seconds_count", model=MODEL) >= 3
    steps = delta(before, after, "llmhost_decode_steps_total", model=MODEL)
    rows = delta(before, after, "llmhost_decode_rows_total", model=MODEL)
    # One generation at a time: each step decoded one row (a prompt in one chunk, then one row per next token).
    assert steps == rows >= sum(u["completion_tokens"] for u in usages)
    assert value(after, "llmhost_slots", model=MODEL) == 2
    assert value(after, "llmhost_slots_busy", model=MODEL) == 0
    assert value(after, "llmhost_admission_waiting", model=MODEL) == 0


def test_gauges_under_load_show_busy_slots_and_waiting_requests(metrics_server: MetricsServer) -> None:
    server = metrics_server.server
    connections = []
    try:
        for _ in range(3):  # two slots: the third request waits for one
            connection = server.connection()
            connection.request("GET", "/stream?prompt=Once%20upon%20a%20time&max_tokens=4000")
            connections.append(connection)
        deadline, seen = time.monotonic() + 60, (0.0, 0.0)
        while time.monotonic() < deadline:
            samples = metrics_server.samples()
            seen = (
                value(samples, "llmhost_slots_busy", model=MODEL),
                value(samples, "llmhost_admission_waiting", model=MODEL),
            )
            if seen == (2, 1):
                break
            time.sleep(0.05)
        assert seen == (2, 1)
        batch = delta({}, samples, "llmhost_decode_rows_total", model=MODEL)
        assert batch > 0
    finally:
        for connection in connections:
            if connection.sock is not None:
                connection.sock.shutdown(socket.SHUT_RDWR)
            connection.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        samples = metrics_server.samples()
        if value(samples, "llmhost_slots_busy", model=MODEL) == 0:
            break
        time.sleep(0.1)
    assert value(samples, "llmhost_slots_busy", model=MODEL) == 0
    assert value(samples, "llmhost_admission_waiting", model=MODEL) == 0


def test_model_status_agrees_in_v1_models_the_listener_the_cli_and_the_metrics(metrics_server: MetricsServer) -> None:
    """Issue 69: each model loaded or not, with its memory and last use, alike through the official `openai` client
    (openai-compat's /v1/models, from WIT `list-model-status`), the listener's /models, `llmhost models --server`
    and the gauges: not loaded, loaded by a completion, unloaded again once its keep-alive has passed."""
    from openai import OpenAI

    server = metrics_server.server
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    listener_url = f"http://{metrics_server.host}:{metrics_server.port}"

    def listed() -> dict[str, Any]:
        return {m.id: (m.model_extra or {})["status"] for m in client.models.list()}

    def served() -> dict[str, Any]:
        status, content_type, body = metrics_server.get("/models")
        assert status == 200 and content_type == "application/json", body
        return {entry["name"]: entry for entry in json.loads(body)["models"]}

    before = listed()
    assert set(before) == {MODEL, STATUS_MODEL}  # the component's models only
    assert before[MODEL]["loaded"] and before[MODEL]["memory_bytes"] > 0  # --preload
    assert (before[STATUS_MODEL]["value"], before[STATUS_MODEL]["loaded"], before[STATUS_MODEL]["memory_bytes"]) == (
        "unloaded", False, 0,
    )  # fmt: skip
    assert served()[STATUS_MODEL]["state"] == "unloaded"  # asking loaded nothing

    client.completions.create(model=STATUS_MODEL, prompt="Hello", max_tokens=2)
    used = time.time()
    table = subprocess.run(
        [LLMHOST, "models", "--server", listener_url], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    now, listener, samples = listed()[STATUS_MODEL], served(), metrics_server.samples()
    assert now["value"] == "loaded" and now["loaded"] and now["memory_bytes"] > 0 and now["in_use"] == 0, now
    assert 0 <= now["idle_s"] < STATUS_KEEP_ALIVE_S and now["keep_alive_s"] == STATUS_KEEP_ALIVE_S, now
    assert used <= now["expires_at"] + 1 <= used + STATUS_KEEP_ALIVE_S + 2, now
    entry = listener[STATUS_MODEL]
    assert (entry["state"], entry["loaded"], entry["memory_bytes"]) == ("loaded", True, now["memory_bytes"]), entry
    assert entry["idle_s"] >= now["idle_s"] and entry["unload_in_s"] <= STATUS_KEEP_ALIVE_S
    assert value(samples, "llmhost_model_loaded", model=STATUS_MODEL) == 1
    assert value(samples, "llmhost_model_memory_bytes", model=STATUS_MODEL) == now["memory_bytes"]
    rows = {line.split()[0]: line.split() for line in table.splitlines()}
    assert rows["NAME"] == ["NAME", "LOADED", "MEMORY", "IN-USE", "IDLE", "UNLOADS-IN"], table
    assert rows[STATUS_MODEL][1:4] == ["yes", f"{now['memory_bytes'] / 1e6:.0f}MB", "0"], table
    assert rows[MODEL][1] == "yes" and set(rows) >= {"NAME", MODEL, STATUS_MODEL, "all-minilm-l6-v2"}, table

    deadline = time.monotonic() + UNLOAD_TIMEOUT_S
    while listed()[STATUS_MODEL]["value"] != "unloaded" and time.monotonic() < deadline:  # through "unloading"
        time.sleep(0.2)
    after = listed()[STATUS_MODEL]
    assert (after["value"], after["memory_bytes"], after["idle_s"], after["expires_at"]) == ("unloaded", 0, None, None)
    assert time.time() - used >= STATUS_KEEP_ALIVE_S - 0.5  # not before its keep-alive
    assert served()[STATUS_MODEL]["state"] == "unloaded"
    assert value(metrics_server.samples(), "llmhost_model_loaded", model=STATUS_MODEL) == 0


def promql(port: int, query: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_real_prometheus_scrapes_and_answers_promql(metrics_server: MetricsServer, tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Debian's `prometheus` package is not installed (`make prometheus` installs it, as root)")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: llmhost\n"
        f"    static_configs:\n      - targets: ['{metrics_server.host}:{metrics_server.port}']\n"
    )
    port = free_port()
    prometheus = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stop = threading.Event()

    def traffic() -> None:  # a generation every moment, so the rates over the last minute are positive
        while not stop.is_set():
            metrics_server.server.request("GET", "/infer?max_tokens=6")

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    try:
        rate_query = f'rate(llmhost_generated_tokens_total{{model="{MODEL}"}}[1m])'
        p95_query = (
            "histogram_quantile(0.95, sum by (le) "
            f'(rate(llmhost_time_to_first_token_seconds_bucket{{model="{MODEL}"}}[1m])))'
        )
        deadline, rate, p95 = time.monotonic() + 90, [], []
        while time.monotonic() < deadline:
            assert prometheus.poll() is None, prometheus.stderr.read() if prometheus.stderr else ""
            try:
                rate, p95 = promql(port, rate_query), promql(port, p95_query)
            except OSError:  # not listening yet
                rate, p95 = [], []
            if rate and p95 and float(rate[0]["value"][1]) > 0 and float(p95[0]["value"][1]) > 0:
                break
            time.sleep(1)
        assert rate and float(rate[0]["value"][1]) > 0, rate
        assert p95 and 0 < float(p95[0]["value"][1]) < 60, p95
        up = promql(port, "up")
        assert up and up[0]["value"][1] == "1", up
    finally:
        stop.set()
        sender.join(30)
        prometheus.send_signal(signal.SIGTERM)
        try:
            prometheus.wait(timeout=30)
        except subprocess.TimeoutExpired:
            prometheus.kill()


def test_readiness_is_503_during_shutdown_while_health_stays_200(metrics_server: MetricsServer) -> None:
    """Last in this module: it stops the server."""
    server = metrics_server.server
    connection = server.connection()
    connection.request("GET", "/stream?prompt=Once%20upon%20a%20time&max_tokens=4000")
    response = connection.getresponse()
    assert response.readline()  # streaming: the request is in flight
    assert metrics_server.get("/readyz")[0] == 200
    server.process.send_signal(signal.SIGTERM)
    deadline, status = time.monotonic() + 5, 200
    while time.monotonic() < deadline and status == 200:
        status = metrics_server.get("/readyz")[0]
        time.sleep(0.02)
    assert status == 503
    assert metrics_server.get("/healthz")[0] == 200  # the process still serves its in-flight request
    response.read()
    connection.close()
    assert server.process.wait(timeout=30) == 0
