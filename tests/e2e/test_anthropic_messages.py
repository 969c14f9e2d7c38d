"""openai-compat's Anthropic Messages API (`/v1/messages`, `/v1/messages/count_tokens`) through a real
`llmhost serve` with the official `anthropic` client and the real instruct model: plain, streamed (the named
events in order), stop sequences, the max-tokens cut, a tool round trip, count_tokens, Anthropic's error shapes
and keys (`x-api-key` or a bearer token). Every answer is compared with /v1/chat/completions on the same
conversation (the same text and token counts), never with literal model text. One server; small token budgets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from serve_driver import Server, serving

pytestmark = [pytest.mark.model, pytest.mark.wasm]

MODEL = "smollm2-135m"  # the built-in instruct model
API_KEY = "sk-ant-test-5d1f3a"  # must never show up in the server's log
SYSTEM = "You are a helpful assistant."
STORY = [{"role": "user", "content": "Count from one to twenty in words, separated by commas."}]
WEATHER_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": WEATHER_SCHEMA,
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
# Greedy. The client's `create` no longer takes the sampling fields (2.x), so they go as extra body fields, which
# the server still reads (the API defines them).
GREEDY: dict[str, Any] = {"extra_body": {"temperature": 0}}


@pytest.fixture(scope="module")
def server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("anthropic-messages")
    (directory / "keys.txt").write_text(f"{API_KEY}\n")
    config = directory / "llmhost.toml"
    config.write_text(
        f"""
api-keys-file = "keys.txt"

[components.openai]
source = "{http_wasm["openai-compat"]}"
[components.openai.limits]
deadline-s = 120  # generous: the machine's two cores are shared with other work

[routes]
"/v1" = "openai"

[models.{MODEL}]
threads = 1  # llama.cpp's spinning threads slow down a hundredfold when they share both cores with other work
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as running:
        yield running
        assert running.stop() == 0
        assert not any(API_KEY in line for line in running.lines)
        assert not any("trapped" in line for line in running.lines), "the guest trapped"


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    from anthropic import Anthropic

    return Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)


def post(server: Server, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    sent = {"content-type": "application/json", "x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    sent.update(headers or {})
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, data = server.request("POST", path, raw, {k: v for k, v in sent.items() if v})
    return status, json.loads(data)


def chat(server: Server, messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """The same conversation through /v1/chat/completions (OpenAI's shapes, a bearer key)."""
    body = {"model": MODEL, "messages": messages, **params}
    status, data = post(server, "/v1/chat/completions", body, {"x-api-key": "", "authorization": f"Bearer {API_KEY}"})
    assert status == 200, data
    return data


def text_of(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def assert_agrees(message: Any, completion: dict[str, Any]) -> None:
    assert text_of(message) == (completion["choices"][0]["message"]["content"] or "")
    assert message.usage.input_tokens == completion["usage"]["prompt_tokens"]
    assert message.usage.output_tokens == completion["usage"]["completion_tokens"]


def streamed(client: Any, **params: Any) -> tuple[list[Any], str, dict[int, str]]:
    """The raw events of a streamed message, its text, and each tool_use block's joined input JSON."""
    with client.messages.create(model=MODEL, stream=True, **params) as stream:
        events = list(stream)
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    inputs: dict[int, str] = {}
    for e in events:
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            inputs[e.index] = inputs.get(e.index, "") + e.delta.partial_json
    return events, text, inputs


def assert_event_order(events: list[Any]) -> None:
    """message_start, then blocks (start, deltas of the open block, stop), then message_delta and message_stop."""
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds
    open_index, next_index = None, 0
    for e in events[1:-2]:
        if e.type == "content_block_start":
            assert open_index is None and e.index == next_index, kinds
            open_index, next_index = e.index, next_index + 1
        elif e.type in ("content_block_delta", "content_block_stop"):
            assert e.index == open_index, kinds
            open_index = None if e.type == "content_block_stop" else open_index
        else:
            assert e.type == "ping", kinds
    assert open_index is None and "content_block_start" in kinds


def test_a_message_plain_and_streamed_agrees_with_chat_completions(client: Any, server: Server) -> None:
    params: dict[str, Any] = {"max_tokens": 12, "extra_body": {"temperature": 0, "top_k": 40}}
    message = client.messages.create(model=MODEL, system=SYSTEM, messages=STORY, metadata={"user_id": "u-1"}, **params)
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == MODEL and [b.type for b in message.content] == ["text"]
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    with_system = [{"role": "system", "content": SYSTEM}, *STORY]
    assert_agrees(message, chat(server, with_system, max_tokens=12, temperature=0, top_k=40))
    # The system prompt as text blocks, and count_tokens on the same request.
    counted = client.messages.count_tokens(model=MODEL, system=[{"type": "text", "text": SYSTEM}], messages=STORY)
    assert counted.input_tokens == message.usage.input_tokens

    events, text, _ = streamed(client, system=SYSTEM, messages=STORY, **params)
    assert_event_order(events)
    assert text == text_of(message)
    start, delta = events[0], events[-2]
    assert start.message.id.startswith("msg_") and start.message.usage.input_tokens == message.usage.input_tokens
    assert delta.delta.stop_reason == message.stop_reason and delta.usage.output_tokens == message.usage.output_tokens


def test_stop_sequences_and_the_max_tokens_cut(client: Any, server: Server) -> None:
    full = client.messages.create(model=MODEL, messages=STORY, max_tokens=24, **GREEDY)
    words = text_of(full).split()
    assert len(words) >= 4, text_of(full)
    stop = words[2]  # a word the answer holds: where it first occurs, the answer must end
    expected = text_of(full)[: text_of(full).find(stop)]
    cut = client.messages.create(model=MODEL, messages=STORY, max_tokens=24, **GREEDY, stop_sequences=["@@", stop])
    assert (cut.stop_reason, cut.stop_sequence, text_of(cut)) == ("stop_sequence", stop, expected)
    # The host's own stop matching (chat completions' `stop`) ends at the same token.
    assert_agrees(cut, chat(server, STORY, max_tokens=24, temperature=0, stop=[stop]))
    events, text, _ = streamed(client, messages=STORY, max_tokens=24, **GREEDY, stop_sequences=[stop])
    assert text == expected and events[-2].delta.stop_reason == "stop_sequence"
    assert events[-2].delta.stop_sequence == stop and events[-2].usage.output_tokens == cut.usage.output_tokens

    short = client.messages.create(model=MODEL, messages=STORY, max_tokens=3, **GREEDY)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 3
    assert text_of(full).startswith(text_of(short))


def test_a_tool_round_trip(client: Any, server: Server) -> None:
    calls = []
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        reply = client.messages.create(
            model=MODEL, messages=QUESTION, tools=[WEATHER_TOOL], tool_choice=choice, max_tokens=48, **GREEDY
        )
        assert reply.stop_reason == "tool_use", reply
        (call,) = [b for b in reply.content if b.type == "tool_use"]
        assert call.id and call.name == "get_weather"
        jsonschema.validate(call.input, WEATHER_SCHEMA)
        calls.append(reply)
    # The chat route's call on the same conversation: the same arguments and token counts.
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
    tools[0]["function"]["description"] = WEATHER_TOOL["description"]
    completion = chat(server, QUESTION, tools=tools, tool_choice="required", max_tokens=48, temperature=0)
    (chat_call,) = completion["choices"][0]["message"]["tool_calls"]
    call = next(b for b in calls[0].content if b.type == "tool_use")
    assert json.loads(chat_call["function"]["arguments"]) == call.input
    assert calls[0].usage.output_tokens == completion["usage"]["completion_tokens"]
    counted = client.messages.count_tokens(model=MODEL, messages=QUESTION, tools=[WEATHER_TOOL])
    assert counted.input_tokens == calls[0].usage.input_tokens == completion["usage"]["prompt_tokens"]
    # Streamed: a tool_use block whose input_json_delta pieces join to the same input.
    events, _, inputs = streamed(
        client, messages=QUESTION, tools=[WEATHER_TOOL], tool_choice={"type": "any"}, max_tokens=48, **GREEDY
    )
    assert_event_order(events)
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [b.type for b in starts] == ["tool_use"] and starts[0].name == "get_weather"
    assert [json.loads(text) for text in inputs.values()] == [call.input]
    assert events[-2].delta.stop_reason == "tool_use"
    # The result goes back in a user message; the answer is text (`none`: the model may not call again).
    history = [
        *QUESTION,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in calls[0].content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 24 C"}]},
    ]
    answer = client.messages.create(
        model=MODEL, messages=history, tools=[WEATHER_TOOL], tool_choice={"type": "none"}, max_tokens=16, **GREEDY
    )
    assert answer.stop_reason in ("end_turn", "max_tokens") and [b.type for b in answer.content] == ["text"]
    assert text_of(answer)


def error_of(status: int, data: Any, kind: str) -> str:
    assert data["type"] == "error" and set(data["error"]) == {"type", "message"}, data
    assert (status, data["error"]["type"]) == (
        {"invalid_request_error": 400, "not_found_error": 404, "authentication_error": 401}[kind],
        kind,
    ), data
    message: str = data["error"]["message"]
    return message


def test_errors_have_anthropics_shape(client: Any, server: Server) -> None:
    import anthropic

    body: dict[str, Any] = {"model": MODEL, "messages": QUESTION, "max_tokens": 4}
    missing = {k: v for k, v in body.items() if k != "max_tokens"}
    assert "max_tokens" in error_of(*post(server, "/v1/messages", missing), "invalid_request_error")
    assert "does-not-exist" in error_of(
        *post(server, "/v1/messages", {**body, "model": "does-not-exist"}), "not_found_error"
    )
    twice = [*QUESTION, *QUESTION]
    assert "alternate" in error_of(*post(server, "/v1/messages", {**body, "messages": twice}), "invalid_request_error")
    error_of(*post(server, "/v1/messages", b"{not json"), "invalid_request_error")
    error_of(*post(server, "/v1/messages", {**body, "temperature": "hot"}), "invalid_request_error")
    error_of(*post(server, "/v1/messages/count_tokens", {"messages": QUESTION}), "invalid_request_error")
    for key in ("sk-wrong", ""):  # a wrong key, and none
        error_of(*post(server, "/v1/messages", body, {"x-api-key": key}), "authentication_error")
    # Through the client: its typed errors, and a bearer token (`auth_token`) is a key too.
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.url, api_key="sk-wrong", max_retries=0).messages.count_tokens(
            model=MODEL, messages=QUESTION
        )
    bearer = anthropic.Anthropic(base_url=server.url, api_key=None, auth_token=API_KEY, max_retries=0)
    assert bearer.messages.count_tokens(model=MODEL, messages=QUESTION).input_tokens > 0
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="does-not-exist", messages=QUESTION, max_tokens=4)
    with pytest.raises(anthropic.BadRequestError, match="alternate"):
        client.messages.create(model=MODEL, messages=twice, max_tokens=4)
