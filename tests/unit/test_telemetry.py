"""The telemetry facade (llmhost/telemetry): off by default, and then free: no OpenTelemetry module imported, every
call site handed back what it gave (no wrapper, no copy), and where spans would go resolved from the config and the
standard environment variables. The real tracer is tested through `llmhost serve` (tests/integration/test_telemetry.py).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from llmhost import telemetry
from llmhost.config import HostConfig, TelemetryConfig
from llmhost.shell.config import AppConfig

ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED")


@pytest.fixture(autouse=True)
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def test_off_every_call_site_gets_back_what_it_gave() -> None:
    assert not telemetry.enabled()

    def function(*args: object) -> str:
        return "called"

    assert telemetry.carry(function) is function  # no context copy per request
    assert telemetry.host_call("llm", "infer", function) is function  # no wrapper per host call
    headers = [(b"accept", b"*/*")]
    assert telemetry.inject(headers) is headers
    assert telemetry.capture() is None  # a generation keeps no context: no spans at its end
    assert telemetry.stream("infer-stream", "m", None, lambda: function) is function  # the generation itself
    assert telemetry.call("x", {}, function, 1) == "called"
    with telemetry.span("a") as one, telemetry.server_span("GET", "/", [("traceparent", "00-x")]) as two:
        assert one is two is telemetry.NOOP_SPAN
        one.set("k", "v")
        one.fail("nothing happens")
    with telemetry.tracing(TelemetryConfig()) as on:
        assert on is False and not telemetry.enabled()


def test_where_spans_go(monkeypatch: pytest.MonkeyPatch) -> None:
    assert telemetry.endpoint_of(TelemetryConfig()) is None  # off by default
    configured = TelemetryConfig(otlp_endpoint="http://collector:4318/")
    assert telemetry.endpoint_of(configured) == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318")
    assert telemetry.endpoint_of(TelemetryConfig()) == "http://base:4318/v1/traces"
    assert telemetry.endpoint_of(configured) == "http://collector:4318/v1/traces"  # the config's own wins
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4318/custom")  # used as it is
    assert telemetry.endpoint_of(TelemetryConfig()) == "http://traces:4318/custom"
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert telemetry.endpoint_of(configured) is None


def test_the_config_section() -> None:
    app = AppConfig.model_validate({"telemetry": {"otlp-endpoint": "http://127.0.0.1:4318", "capture-content": True}})
    assert app.host_config().telemetry == TelemetryConfig(otlp_endpoint="http://127.0.0.1:4318", capture_content=True)
    assert HostConfig().telemetry == TelemetryConfig()
    with pytest.raises(ValidationError, match="otlp-endpoint"):
        AppConfig.model_validate({"telemetry": {"otlp-endpoint": "collector:4318"}})
    with pytest.raises(ValidationError, match="capture"):
        AppConfig.model_validate({"telemetry": {"capture": True}})


def test_off_no_opentelemetry_module_is_imported() -> None:
    """In a fresh interpreter: the server, the engine and the host calls, imported and run through the facade."""
    code = (
        "import sys\n"
        "import llmhost.serve.server, llmhost.mcp.calls, llmhost.engine.local.job, llmhost.interfaces.linker\n"
        "from llmhost import telemetry\n"
        "from llmhost.config import TelemetryConfig\n"
        "with telemetry.tracing(TelemetryConfig()), telemetry.span('x'):\n"
        "    telemetry.inject([])\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
