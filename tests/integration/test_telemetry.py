"""OpenTelemetry traces of `llmhost serve` (issue 69): the official OTLP/HTTP exporter, through a real server and a
real guest, to a receiver on loopback that decodes the protobuf (tests/otlp_receiver.py).

One request makes a chat, a key-value get and an outbound request: its trace is the server span (the child of the
client's `traceparent`), the component span, a span per host call, and the model's queue wait, prefill and decode
under the chat; the outbound request carries the `traceparent` of its host call's span. No prompt, header or config
value is in any span. With tracing off, nothing is exported and outbound requests carry no `traceparent`.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from llmhost import build_component
from otlp_receiver import Received, Receiver, receiving
from outbound_servers import TestServer
from outbound_servers import serving as serving_outbound
from serve_driver import Server, serving

pytestmark = pytest.mark.wasm

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cret-token-5b1e9a"  # a config value the guest sends in a header: never in a span
API_KEY = "sk-client-key-77f0"  # a header the client sends: never in a span
SEND = "outbound-http.send-streamed"  # the guest SDK's `http.request` (its body then read in chunks)
ARRIVE_S = 20.0  # an upper bound for spans to reach the receiver (the batch is sent every 50 ms here)


@pytest.fixture(scope="module")
def app_wasm(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("telemetry-guest") / "telemetry_app.wasm"
    return build_component(REPO / "tests" / "guests" / "telemetry_app", out, "http-app", cache_dir=llmhost_cache_dir)


@pytest.fixture(scope="module")
def upstream() -> Iterator[TestServer]:
    with serving_outbound() as running:
        yield running


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


def write_config(directory: Path, app: Path, upstream: TestServer, endpoint: str | None) -> Path:
    telemetry = f'[telemetry]\notlp-endpoint = "{endpoint}"\n' if endpoint else ""
    config = directory / "serve.toml"
    config.write_text(
        f"""
data-dir = "{directory / "data"}"
{telemetry}
[engine]
kind = "fake-decoder"

[components.app]
source = "{app}"
key-value-stores = ["default"]
allowed-outbound-hosts = ["http://127.0.0.1:{upstream.port}"]
config = {{ TOKEN = "{SECRET}" }}

[routes]
"/" = "app"
"""
    )
    return config


def server_env() -> dict[str, str]:
    """No OTEL_ variable of this machine's environment, and the batch sent every 50 ms."""
    cleared = {name: "" for name in os.environ if name.startswith("OTEL_")}
    return {**cleared, "OTEL_BSP_SCHEDULE_DELAY": "50"}


@pytest.fixture(scope="module")
def traced(
    app_wasm: Path, upstream: TestServer, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory,
    llmhost_cache_dir: Path,
) -> Iterator[Server]:  # fmt: skip
    config = write_config(tmp_path_factory.mktemp("traced"), app_wasm, upstream, receiver.endpoint)
    with serving(["-c", str(config)], llmhost_cache_dir, extra_env=server_env()) as running:
        yield running
        assert running.stop() == 0


def work(server: Server, upstream: TestServer, headers: dict[str, str]) -> dict[str, object]:
    status, body = server.request("GET", f"/work?url={quote(upstream.url('/echo'))}", headers=headers)
    assert status == 200, body[:500]
    answer = json.loads(body)
    assert answer["status"] == 200 and answer["chat"] >= 1, answer
    return answer


def traceparent_sent(answer: dict[str, object]) -> str | None:
    """The `traceparent` the upstream received (its /echo lists the request's headers)."""
    headers = dict(json.loads(str(answer["echo"]))["headers"])
    return headers.get("traceparent")


def ids_of(traceparent: str | None) -> str:
    """A traceparent without its flags (sampled, and from SDK 1.45 on "random trace id" for a trace it began)."""
    assert traceparent is not None, "the outbound request carried no traceparent"
    return traceparent.rsplit("-", 1)[0]


def one(spans: list[Received], name: str) -> Received:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def test_a_request_is_one_trace_continuing_the_callers_traceparent(
    traced: Server, upstream: TestServer, receiver: Receiver
) -> None:
    receiver.clear()
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    headers = {"traceparent": f"00-{trace_id}-{parent_id}-01", "authorization": f"Bearer {API_KEY}"}
    answer = work(traced, upstream, headers)
    spans = receiver.wait_for(lambda got: any(s.kind == "SERVER" for s in got), ARRIVE_S)
    spans = [span for span in spans if span.trace_id == trace_id]

    server = one(spans, "GET")
    assert (server.kind, server.parent_id) == ("SERVER", parent_id)  # the caller's span is its parent
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["llmhost.component"] == "app" and server.service == "llmhost"
    component = one(spans, "component app")
    assert component.parent_id == server.span_id
    under_component = {s.name for s in spans if s.parent_id == component.span_id}
    assert {"llm.chat", "keyvalue.open", "keyvalue.bucket.get", SEND} <= under_component

    chat = one(spans, "llm.chat")
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "gemma-3-270m"
    assert chat.attributes["gen_ai.request.max_tokens"] == 4
    assert chat.attributes["gen_ai.usage.output_tokens"] == answer["chat"]
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert chat.attributes["gen_ai.response.finish_reasons"] in (("length",), ("stop",))
    # The model's work, under the chat, in order: the admission queue, prefill (the prompt), decode (the tokens).
    queue, prefill, decode = (one(spans, name) for name in ("llm.queue", "llm.prefill", "llm.decode"))
    assert {queue.parent_id, prefill.parent_id, decode.parent_id} == {chat.span_id}
    assert queue.end_ns <= prefill.start_ns + 1000 and prefill.end_ns <= decode.start_ns + 1000
    assert chat.start_ns <= queue.start_ns and decode.end_ns <= chat.end_ns
    assert prefill.attributes["gen_ai.usage.input_tokens"] == chat.attributes["gen_ai.usage.input_tokens"]
    assert decode.attributes["gen_ai.usage.output_tokens"] == answer["chat"]

    # The outbound request carried the traceparent of its host call's span.
    send = one(spans, SEND)
    assert ids_of(traceparent_sent(answer)) == f"00-{trace_id}-{send.span_id}"
    # No prompt, no header, no config value in any span (content capture is off).
    text = json.dumps([[s.name, s.attributes] for s in spans])
    for private in (SECRET, API_KEY, "Say hi", "x-api-key", "authorization"):
        assert private not in text


def test_a_request_without_traceparent_starts_a_trace_and_a_bad_one_is_ignored(
    traced: Server, upstream: TestServer, receiver: Receiver
) -> None:
    receiver.clear()
    work(traced, upstream, {})
    work(traced, upstream, {"traceparent": "00-not-a-trace-01"})
    spans = receiver.wait_for(lambda got: sum(s.kind == "SERVER" for s in got) >= 2, ARRIVE_S)
    roots = [span for span in spans if span.kind == "SERVER"]
    assert [root.parent_id for root in roots] == ["", ""]
    assert len({root.trace_id for root in roots}) == 2  # two traces of their own


def test_nothing_is_exported_and_nothing_propagated_when_tracing_is_off(
    app_wasm: Path, upstream: TestServer, receiver: Receiver, tmp_path: Path, llmhost_cache_dir: Path
) -> None:
    """Off: the standard endpoint variable is set, but so is `OTEL_SDK_DISABLED=true` (the unit tests check that no
    endpoint at all is off too)."""
    config = write_config(tmp_path, app_wasm, upstream, None)
    receiver.clear()
    env = {**server_env(), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SDK_DISABLED": "true"}
    with serving(["-c", str(config)], llmhost_cache_dir, extra_env=env) as running:
        incoming = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
        answer = work(running, upstream, {"traceparent": incoming})
        assert traceparent_sent(answer) is None  # neither made up nor passed on
        assert running.stop() == 0  # a tracer would flush its spans at exit
    assert (receiver.posts, receiver.spans) == (0, [])


def test_the_standard_environment_variable_turns_tracing_on(
    app_wasm: Path, upstream: TestServer, receiver: Receiver, tmp_path: Path, llmhost_cache_dir: Path
) -> None:
    config = write_config(tmp_path, app_wasm, upstream, None)
    receiver.clear()
    env = {**server_env(), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint + "/v1/traces"}
    env["OTEL_SERVICE_NAME"] = "my-gateway"
    with serving(["-c", str(config)], llmhost_cache_dir, extra_env=env) as running:
        answer = work(running, upstream, {})
        assert running.stop() == 0  # the last batch is flushed at exit
    spans = receiver.wait_for(lambda got: any(s.kind == "SERVER" for s in got), ARRIVE_S)
    server = next(span for span in spans if span.kind == "SERVER")
    assert server.service == "my-gateway"
    assert ids_of(traceparent_sent(answer)) == f"00-{server.trace_id}-{one(spans, SEND).span_id}"


def test_a_stream_is_one_span_for_its_lifetime_with_its_model_work(traced: Server, receiver: Receiver) -> None:
    receiver.clear()
    status, body = traced.request("GET", "/stream?max_tokens=6")
    assert status == 200 and json.loads(body)["generated"] == 6, body[:300]
    spans = receiver.wait_for(lambda got: any(s.kind == "SERVER" for s in got), ARRIVE_S)
    stream = one(spans, "llm.infer-stream")
    assert stream.parent_id == one(spans, "component app").span_id
    assert stream.attributes["gen_ai.operation.name"] == "text_completion"
    assert stream.attributes["gen_ai.request.max_tokens"] == 6
    assert (stream.attributes["gen_ai.usage.output_tokens"], stream.attributes["gen_ai.response.finish_reasons"]) == (
        6,
        ("length",),
    )
    work_spans = [one(spans, name) for name in ("llm.queue", "llm.prefill", "llm.decode")]
    assert {span.parent_id for span in work_spans} == {stream.span_id}
    assert not any(span.name.endswith(".next") for span in spans)  # nothing per token


def test_an_mcp_tool_call_is_one_trace_from_the_call_to_the_models_work(
    tool_wasm: dict[str, Path], receiver: Receiver, tmp_path: Path, llmhost_cache_dir: Path
) -> None:
    """`llmhost mcp` traced, a tool called with the official MCP client over Streamable HTTP: the call's own server
    span, the component's, the guest's `llm.infer` with its GenAI attributes, and the model's work under it; a
    caller's `traceparent` (in the request's `_meta`, or an HTTP header) continued."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    prompt = "A prompt that no span may hold"
    config = tmp_path / "mcp.toml"
    config.write_text(
        f'data-dir = "{tmp_path / "data"}"\n\n[telemetry]\notlp-endpoint = "{receiver.endpoint}"\n\n'
        f'[engine]\nkind = "fake-decoder"\n\n[components.probe]\nsource = "{tool_wasm["mcp_probe"]}"\n'
    )
    receiver.clear()

    sent = {"_meta": "4bf92f3577b34da6a3ce929d0e0e4736", "header": "0af7651916cd43dd8448eb211c80319c"}
    caller_span = "00f067aa0ba902b7"
    args = {"prompt": prompt, "max-tokens": 5}

    async def call(url: str) -> list[Any]:
        import httpx2

        async with streamable_http_client(url) as (read, write, *_), ClientSession(read, write) as session:
            await session.initialize()
            plain = await session.call_tool("generate", args)
            meta = {"traceparent": f"00-{sent['_meta']}-{caller_span}-01"}
            continued = await session.call_tool("generate", args, meta=meta)  # type: ignore[arg-type]
        headers = {"traceparent": f"00-{sent['header']}-{caller_span}-01"}
        async with (
            httpx2.AsyncClient(headers=headers) as client,
            streamable_http_client(url, http_client=client) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return [plain, continued, await session.call_tool("generate", args)]

    with serving(["-c", str(config)], llmhost_cache_dir, command="mcp", extra_env=server_env()) as server:
        results = anyio.run(call, f"http://{server.host}:{server.port}/mcp")
        every = receiver.wait_for(lambda got: sum(s.kind == "SERVER" for s in got) >= 3, ARRIVE_S)
        assert server.stop() == 0
    for result in results:
        assert not result.is_error and result.structured_content["generated"] == 5, result

    calls = [span for span in every if span.name == "tools/call generate"]
    # A caller's trace context, in the request's `_meta` or in the HTTP request's headers: the call continues it.
    for where, trace_id in sent.items():
        continued = [span for span in calls if span.trace_id == trace_id]
        assert [span.parent_id for span in continued] == [caller_span], (where, calls)
    tool = one([span for span in calls if span.trace_id not in sent.values()], "tools/call generate")
    spans = [span for span in every if span.trace_id == tool.trace_id]  # the plain call's trace, a new one
    assert (tool.kind, tool.parent_id, tool.service) == ("SERVER", "", "llmhost")
    assert tool.attributes["mcp.method.name"] == "tools/call" and tool.attributes["gen_ai.tool.name"] == "generate"
    assert str(tool.attributes["llmhost.request_id"]).startswith("call-")
    component = one(spans, "component probe")
    assert (component.parent_id, component.attributes["llmhost.component"]) == (tool.span_id, "probe")
    infer = one(spans, "llm.infer")
    assert infer.parent_id == component.span_id
    assert infer.attributes["gen_ai.operation.name"] == "text_completion"
    assert infer.attributes["gen_ai.request.model"] == "gemma-3-270m"
    assert infer.attributes["gen_ai.request.max_tokens"] == 5
    assert infer.attributes["gen_ai.usage.output_tokens"] == 5 and infer.attributes["gen_ai.usage.input_tokens"] > 0
    assert infer.attributes["gen_ai.response.finish_reasons"] == ("length",)
    queue, prefill, decode = (one(spans, name) for name in ("llm.queue", "llm.prefill", "llm.decode"))
    assert {queue.parent_id, prefill.parent_id, decode.parent_id} == {infer.span_id}
    assert queue.end_ns <= prefill.start_ns + 1000 and prefill.end_ns <= decode.start_ns + 1000
    assert tool.start_ns <= component.start_ns <= infer.start_ns <= queue.start_ns and decode.end_ns <= tool.end_ns
    assert decode.attributes["gen_ai.usage.output_tokens"] == 5
    assert prompt not in json.dumps([[s.name, s.attributes] for s in spans])  # content capture is off
