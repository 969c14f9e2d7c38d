"""openai-compat through `llmhost serve` with real clients and the real model: the official `openai` client and
LangChain's `langchain-openai` (chat, streaming, tools, structured output, embeddings), API keys, 400s for wrong
types, and how deadlines end streamed and non-streamed answers. One server for the module; small token budgets."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from serve_driver import Server, serving

from .conftest import END_TOKENS

pytestmark = [pytest.mark.model, pytest.mark.wasm]

MODEL = "gemma-3-270m"
EMBEDDING_MODEL = "all-minilm-l6-v2"  # the built-in embedding model
CHAT_MODEL = "smollm2-135m"  # the built-in instruct model: chat's default
API_KEY = "sk-test-4c7e0b9d2f"  # must never show up in the server's log
SHORT_DEADLINE_S = 2.0  # the /short route: time to first byte and between writes
CAP_S = 6.0  # the /capped route: the whole request (its idle deadline is long)
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


class Person(BaseModel):
    # Bounded: the greedy JSON then fits its max_tokens whatever a near-tie's rounding picks on this CPU (Gemma's
    # name string ran past 64 tokens once the prefix cache placed a prompt's cells elsewhere).
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=150)


@pytest.fixture(scope="module")
def server(
    http_wasm: dict[str, Path], llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("openai-clients")
    (directory / "keys.txt").write_text(f"# accepted keys\n{API_KEY}\n")
    config = directory / "llmhost.toml"
    wasm = http_wasm["openai-compat"]
    config.write_text(
        f"""
api-keys-file = "keys.txt"

[components.openai]
source = "{wasm}"
[components.openai.limits]
deadline-s = 120  # generous: the machine's two cores are shared with other work

[components.short]
source = "{wasm}"
[components.short.limits]
deadline-s = {SHORT_DEADLINE_S}

[components.capped]
source = "{wasm}"
[components.capped.limits]
deadline-s = 60
max-duration-s = {CAP_S}

[routes]
"/v1" = "openai"
"/short" = "short"
"/capped" = "capped"

# One llama.cpp thread: its spinning threads slow down a hundredfold when they share both cores with other work
# (the background optimising compile of the component, the test process). Short prompt chunks: a cancelled
# generation stops after the step under way, well within the grace the deadline tests rely on.
[models.gemma-3-270m]
threads = 1
batch-size = 128
"""
    )
    with serving(["-c", str(config)], llmhost_cache_dir) as running:
        yield running
        assert running.stop() == 0
        assert not any(API_KEY in line for line in running.lines)
        assert not any("trapped" in line for line in running.lines), "the guest trapped"


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)


def post(server: Server, path: str, body: Any, key: str | None = API_KEY) -> tuple[int, Any]:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, data = server.request("POST", path, raw, headers)
    return status, json.loads(data)


# -- keys, errors, models, embeddings ---------------------------------------------------------------------------------


def test_requests_without_the_key_get_401_in_openai_shape(server: Server) -> None:
    from openai import AuthenticationError, OpenAI

    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 2}
    for key in (None, "sk-wrong"):
        status, data = post(server, "/v1/chat/completions", body, key)
        assert status == 401
        assert data["error"]["type"] == "invalid_request_error" and data["error"]["code"] == "invalid_api_key"
    status, _ = server.request("GET", "/v1/models")
    assert status == 401
    wrong = OpenAI(base_url=f"{server.url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(AuthenticationError):
        wrong.models.list()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL, "messages": "hi"}, "messages"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": 7, "messages": QUESTION}, "model"),
        ({"model": MODEL, "messages": QUESTION, "max_tokens": "10"}, "max_tokens"),
        ({"model": MODEL, "messages": QUESTION, "max_tokens": 0}, "max_tokens"),
        ({"model": MODEL, "messages": QUESTION, "temperature": True}, "temperature"),
        ({"model": MODEL, "messages": QUESTION, "top_p": 0}, "top_p"),
        ({"model": MODEL, "messages": QUESTION, "n": "3"}, "n"),
        ({"model": MODEL, "messages": QUESTION, "stop": [1, 2]}, "stop[0]"),
        ({"model": MODEL, "messages": QUESTION, "seed": 1.5}, "seed"),
        ({"model": MODEL, "messages": QUESTION, "stream": "yes"}, "stream"),
        ({"model": MODEL, "messages": QUESTION, "logprobs": 1}, "logprobs"),
        ({"model": MODEL, "messages": QUESTION, "top_logprobs": 3}, "top_logprobs"),
        ({"model": MODEL, "messages": QUESTION, "frequency_penalty": 3}, "frequency_penalty"),
        ({"model": MODEL, "messages": QUESTION, "logit_bias": {"x": 1}}, "logit_bias"),
        ({"model": MODEL, "messages": QUESTION, "logit_bias": {"999999999": 1}}, "logit_bias"),
        ({"model": MODEL, "messages": QUESTION, "response_format": {"type": "xml"}}, "response_format.type"),
        ({"model": MODEL, "messages": QUESTION, "response_format": "json"}, "response_format"),
        ({"model": MODEL, "messages": QUESTION, "tools": {"a": 1}}, "tools"),
        ({"model": MODEL, "messages": QUESTION, "tools": [{"type": "function"}]}, "tools[0].function"),
        ({"model": MODEL, "messages": QUESTION, "tool_choice": "required"}, "tool_choice"),
        ({"model": MODEL, "messages": QUESTION, "functions": []}, "functions"),
        ({"model": MODEL, "messages": QUESTION, "frobnicate": 1}, "frobnicate"),
    ],
)
def test_malformed_chat_requests_get_400_naming_the_param(server: Server, body: Any, param: str) -> None:
    status, data = post(server, "/v1/chat/completions", body)
    assert status == 400, data
    assert data["error"]["type"] == "invalid_request_error" and data["error"]["param"] == param, data


def test_a_request_naming_no_model_uses_the_components_default_model(server: Server) -> None:
    # Clients written for local servers omit `model` or send null (llama.cpp's own server tests do): the first
    # model the component may use answers, and the response names it. An unknown name stays a 404.
    for body in ({"prompt": "Hello", "max_tokens": 2}, {"model": None, "prompt": "Hello", "max_tokens": 2}):
        status, data = post(server, "/v1/completions", body)
        assert status == 200 and data["model"] == MODEL and data["usage"]["completion_tokens"] <= 2, data
    # But chat goes to the built-in instruct model (Gemma 3 270M is a base model), and /v1/models says which is which.
    status, data = post(server, "/v1/chat/completions", {"messages": QUESTION, "max_tokens": 2})
    assert status == 200 and data["model"] == CHAT_MODEL, data
    status, listed = server.request("GET", "/v1/models", headers={"authorization": f"Bearer {API_KEY}"})
    assert status == 200, listed
    kinds = {model["id"]: model["kind"] for model in json.loads(listed)["data"]}
    assert kinds == {MODEL: "base", CHAT_MODEL: "instruct", EMBEDDING_MODEL: "embedding"}, kinds
    status, data = post(server, "/v1/embeddings", {"model": None, "input": "x"})
    assert status == 200 and data["model"] == MODEL and len(data["data"]) == 1, data
    status, data = post(server, "/v1/completions", {"model": "no-such-model", "prompt": "x", "max_tokens": 2})
    assert status == 404 and data["error"]["code"] == "model_not_found", data


def test_malformed_other_requests_and_bodies_get_400(server: Server) -> None:
    assert post(server, "/v1/chat/completions", b"{not json")[0] == 400
    assert post(server, "/v1/chat/completions", [1, 2])[0] == 400
    assert post(server, "/v1/completions", {"model": MODEL, "prompt": 5})[1]["error"]["param"] == "prompt"
    assert post(server, "/v1/completions", {"model": MODEL, "prompt": "x", "logprobs": 21})[1]["error"]["param"] == (
        "logprobs"
    )
    assert post(server, "/v1/embeddings", {"model": MODEL, "input": [1.5, "x"]})[1]["error"]["param"] == "input[0]"
    assert post(server, "/v1/embeddings", {"model": MODEL, "input": "x", "dimensions": 8})[0] == 400


def test_the_client_raises_bad_request_for_wrong_types(client: Any) -> None:
    from openai import BadRequestError

    with pytest.raises(BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=QUESTION, temperature="hot", max_tokens=2)
    assert caught.value.body["param"] == "temperature"  # type: ignore[index]


def test_models_list_and_retrieve(client: Any) -> None:
    from openai import NotFoundError

    assert MODEL in [m.id for m in client.models.list()]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(NotFoundError):
        client.models.retrieve("no-such-model")
    with pytest.raises(NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=QUESTION, max_tokens=2)


def test_embeddings(client: Any) -> None:
    texts = ["The cat sat on the mat.", "A kitten rested on the rug.", "Quarterly revenue grew."]
    result = client.embeddings.create(model=MODEL, input=texts)  # the client asks for base64
    vectors = [d.embedding for d in result.data]
    assert len(vectors) == 3 and len({len(v) for v in vectors}) == 1 and len(vectors[0]) > 100
    assert result.usage.prompt_tokens > 0
    floats = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")  # the same packed call
    assert floats.data[0].embedding == pytest.approx(vectors[0], abs=1e-6)


def test_embeddings_with_the_builtin_embedding_model(client: Any, llmhost_cache_dir: Path) -> None:
    """all-minilm-l6-v2 through /v1/embeddings: the host's own vectors and usage; generation on it is refused
    with a 400 that says why."""
    from openai import BadRequestError

    from llmhost import Host, HostConfig

    texts = ["How tall is Kilimanjaro?", "Kilimanjaro rises 5,895 metres.", "A kitten rested on the rug."]
    result = client.embeddings.create(model=EMBEDDING_MODEL, input=texts, encoding_format="float")
    vectors = [d.embedding for d in result.data]
    with Host(HostConfig(cache_dir=llmhost_cache_dir)) as host:
        want = host.embeddings(EMBEDDING_MODEL, texts)
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(v == pytest.approx(w, abs=1e-5) for v, w in zip(vectors, want.embeddings, strict=True))
    assert result.usage.prompt_tokens == want.prompt_token_count
    with pytest.raises(BadRequestError, match="embedding-only") as refused:
        client.completions.create(model=EMBEDDING_MODEL, prompt="Hello", max_tokens=2)
    assert refused.value.status_code == 400
    with pytest.raises(BadRequestError, match="embedding-only"):
        client.chat.completions.create(model=EMBEDDING_MODEL, messages=QUESTION, max_tokens=2)


# -- chat features ------------------------------------------------------------------------------------------------


def arguments(call: Any) -> dict[str, Any]:
    value = json.loads(call.function.arguments)
    assert isinstance(value, dict)
    return value


def test_tools_required_named_and_auto_and_a_round_trip(client: Any) -> None:
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        reply = client.chat.completions.create(
            model=MODEL, messages=QUESTION, tools=[WEATHER_TOOL], tool_choice=choice, max_tokens=48, temperature=0
        )
        assert reply.choices[0].finish_reason == "tool_calls", reply
        call = reply.choices[0].message.tool_calls[0]
        assert call.type == "function" and call.function.name == "get_weather" and call.id
        assert isinstance(arguments(call).get("city"), str)
    auto = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER_TOOL], max_tokens=48, temperature=0
    )
    message = auto.choices[0].message
    assert message.tool_calls or message.content
    assert (auto.choices[0].finish_reason == "tool_calls") == bool(message.tool_calls)
    # The round trip: the call, its result, and the model's answer in text.
    history = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"city": "Paris", "sky": "sunny", "c": 21})},
    ]
    answer = client.chat.completions.create(
        model=MODEL, messages=history, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=24, temperature=0
    )
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
    baseline = client.chat.completions.create(
        model=MODEL, messages=QUESTION, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=1, temperature=0
    )
    assert answer.usage.prompt_tokens > baseline.usage.prompt_tokens + 10  # the call and its result were in the prompt


def test_streamed_tool_calls(client: Any) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            tools=[WEATHER_TOOL],
            tool_choice="required",
            max_tokens=48,
            temperature=0,
            stream=True,
        )
    )
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += delta.id or ""
            entry["name"] += (delta.function.name if delta.function else None) or ""
            entry["arguments"] += (delta.function.arguments if delta.function else None) or ""
    assert calls and calls[0]["name"] == "get_weather" and calls[0]["id"]
    assert isinstance(json.loads(calls[0]["arguments"]), dict)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_parse_with_a_pydantic_model(client: Any) -> None:
    reply = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "Ann is 30 years old. Give her name and age as JSON."}],
        response_format=Person,
        max_tokens=128,
        temperature=0,
    )
    person = reply.choices[0].message.parsed
    assert isinstance(person, Person) and reply.choices[0].finish_reason == "stop"


def test_response_format_json_schema_and_json_object(client: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Name a city and its country."}],
        response_format={"type": "json_schema", "json_schema": {"name": "place", "strict": True, "schema": schema}},
        max_tokens=64,
        temperature=0,
    )
    value = json.loads(reply.choices[0].message.content)
    assert set(value) == {"city", "country"}
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe a dog as JSON."}],
        response_format={"type": "json_object"},
        max_tokens=48,
        temperature=0,
    )
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_logprobs_with_top_logprobs(client: Any) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3
    )
    entries = reply.choices[0].logprobs.content
    assert len(entries) == reply.usage.completion_tokens - (reply.choices[0].finish_reason == "stop")
    for entry in entries:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)  # greedy: the likeliest token
    assert "".join(e.token for e in entries) == reply.choices[0].message.content


def test_n_choices(client: Any) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=6, temperature=1.0, n=3, seed=7)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.message.content is not None and c.finish_reason in ("stop", "length") for c in reply.choices)
    assert reply.usage.completion_tokens <= 18
    greedy = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0, n=2)
    assert greedy.choices[0].text == greedy.choices[1].text  # forks of one prompt, decoded together
    streamed = list(
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4, temperature=0, n=2, stream=True)
    )
    ends = {c.choices[0].index: c.choices[0].finish_reason for c in streamed if c.choices}
    assert set(ends) == {0, 1} and set(ends.values()) <= {"stop", "length"}  # each choice ends with its own reason


def test_seed_stop_and_penalties(client: Any) -> None:
    def once(**kwargs: Any) -> str:
        reply = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, **kwargs)
        return str(reply.choices[0].text)

    assert once(temperature=1.0, seed=3) == once(temperature=1.0, seed=3)
    greedy = once(temperature=0)
    stop = greedy.strip()[-1]
    assert once(temperature=0, stop=[stop]) == greedy[: greedy.index(stop)]
    assert isinstance(once(temperature=0, frequency_penalty=1.5, presence_penalty=1.0), str)
    # logit_bias +100 all but forces a token: every sampled token is the same one.
    forced = client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=0, logit_bias={"1000": 100}
    )
    assert len(set(forced.choices[0].logprobs.tokens)) == 1


# -- deadlines ------------------------------------------------------------------------------------------------------


def test_a_stream_at_its_cap_ends_with_a_finish_reason_and_done(server: Server) -> None:
    from openai import OpenAI

    short = OpenAI(base_url=f"{server.url}/capped/v1", api_key=API_KEY, max_retries=0, timeout=60)
    stream = short.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Write a very long story about a dragon."}],
        max_tokens=4000,
        temperature=0.7,
        logit_bias={str(t): -100 for t in END_TOKENS[MODEL]},  # an unseeded sample must not end before the cap
        stream=True,
    )
    chunks = list(stream)  # the client would raise on a cut stream or an error event
    assert chunks[-1].choices[0].finish_reason == "length"
    assert sum(len(c.choices[0].delta.content or "") for c in chunks) > 0


def test_a_stalled_stream_ends_with_an_error_event_and_done(server: Server, client: Any) -> None:
    """A prompt whose evaluation outlasts the idle deadline after the stream started: the server cancels the
    generation, and the app ends the stream itself within the grace (an error event, then [DONE]).

    The engine notices a cancellation between decode steps, and a reader evaluating a long prompt may run its
    steps back to back, so the prompt is sized from a measured prefill rate to take about 4 s: past the 2 s idle
    deadline, well within the 5 s grace after it."""
    probe = "Count the animals: " + "a cat and a horse and a cow and a goat and " * 60
    started = time.monotonic()
    measured = client.completions.create(model=MODEL, prompt=probe, max_tokens=1, temperature=0)
    rate = measured.usage.prompt_tokens / (time.monotonic() - started)
    words = int(rate * (SHORT_DEADLINE_S + 2.0) / 9)  # the sentence below is about 9 tokens
    long_prompt = "Summarise this: " + "the quick brown fox jumps over the lazy dog " * max(words, 20)
    status, body = server.request(
        "POST",
        "/short/v1/chat/completions",
        json.dumps(
            {"model": MODEL, "messages": [{"role": "user", "content": long_prompt}], "max_tokens": 8, "stream": True}
        ).encode(),
        {"content-type": "application/json", "authorization": f"Bearer {API_KEY}"},
    )
    assert status == 200  # a complete body: the stream was ended, not cut
    events = [e.removeprefix("data: ") for e in body.decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "timeout" and "deadline" in error["message"]


def test_a_non_streamed_overrun_is_a_json_error(server: Server) -> None:
    status, data = post(
        server,
        "/short/v1/completions",
        # the end-of-generation tokens forbidden: an unseeded sample that ends early would answer 200 in time
        {
            "model": MODEL,
            "prompt": "Write a very long story:",
            "max_tokens": 4000,
            "temperature": 0.7,
            "logit_bias": {str(t): -100 for t in END_TOKENS[MODEL]},
        },
    )
    assert status == 504, data
    assert data["error"]["code"] == "timeout"


# -- LangChain --------------------------------------------------------------------------------------------------


def test_langchain_chat_stream_tools_structured_and_embeddings(server: Server) -> None:
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings

    base = f"{server.url}/v1"
    llm = ChatOpenAI(model=MODEL, base_url=base, api_key=API_KEY, max_tokens=16, temperature=0, max_retries=0)  # type: ignore[arg-type]
    reply = llm.invoke("Say hello.")
    assert isinstance(reply.content, str) and reply.content
    pieces = [chunk.content for chunk in llm.stream("Say hello.")]
    assert len(pieces) > 2 and "".join(str(p) for p in pieces) == reply.content

    with_tools = llm.bind_tools([WEATHER_TOOL], tool_choice="get_weather").bind(max_tokens=48)
    called = with_tools.invoke("What is the weather in Paris?")
    assert called.tool_calls and called.tool_calls[0]["name"] == "get_weather"
    assert isinstance(called.tool_calls[0]["args"].get("city"), str)

    structured = ChatOpenAI(
        model=MODEL,
        base_url=base,
        api_key=API_KEY,
        max_tokens=64,
        temperature=0,
        max_retries=0,  # type: ignore[arg-type]
    ).with_structured_output(Person, method="json_schema")
    person = structured.invoke("Ann is 30 years old. Give her name and age as JSON.")
    assert isinstance(person, Person)

    embeddings = OpenAIEmbeddings(
        model=MODEL,
        base_url=base,
        api_key=API_KEY,
        check_embedding_ctx_length=False,
        max_retries=0,  # type: ignore[arg-type]
    )
    vectors = embeddings.embed_documents(["a cat", "a dog"])
    assert len(vectors) == 2 and len(vectors[0]) == len(embeddings.embed_query("a bird"))


# -- the Responses API -------------------------------------------------------------------------------------------

RESPONSE_TOOL = {"type": "function", **WEATHER_TOOL["function"]}  # this API's tools are flat


def test_responses_with_the_official_client(client: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    reply = client.responses.create(
        model=MODEL, input="Say hi.", instructions="Be brief.", max_output_tokens=8, temperature=0
    )
    assert reply.object == "response" and reply.status in ("completed", "incomplete") and reply.output_text
    # Exact usage: the same conversation through chat/completions has the same prompt; the budget counts.
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
    assert reply.usage.input_tokens == chat.usage.prompt_tokens
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    assert reply.usage.output_tokens == 8 if reply.status == "incomplete" else reply.usage.output_tokens <= 8
    assert reply.status != "incomplete" or reply.incomplete_details.reason == "max_output_tokens"
    # `input` as messages with content parts: the same prompt.
    parts = [messages[0], {"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}]
    listed = client.responses.create(model=MODEL, input=parts, max_output_tokens=8, temperature=0, top_p=0.5)
    assert listed.usage.input_tokens == reply.usage.input_tokens and listed.output_text
    # Streamed: the documented event sequence, whose deltas make the final response's text.
    events = list(client.responses.create(model=MODEL, input=parts, max_output_tokens=8, temperature=0, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"], kinds
    assert kinds[-4:] == [
        "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"
    ]  # fmt: skip
    assert [event.sequence_number for event in events] == list(range(1, len(events) + 1))
    final = events[-1].response
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text and final.output_text == text and final.usage.input_tokens == reply.usage.input_tokens
    assert final.usage.output_tokens <= 8


def test_responses_structured_output_and_tools(client: Any) -> None:
    schema = {"type": "json_schema", "name": "person", "schema": Person.model_json_schema(), "strict": True}
    person = client.responses.create(
        model=MODEL, input="Invent a person.", text={"format": schema}, max_output_tokens=60, temperature=0
    )
    if person.status == "completed":  # constrained by the host: it parses and validates
        Person.model_validate_json(person.output_text)
    else:
        assert person.output_text.startswith("{")
    obj = client.responses.create(
        model=MODEL, input="A JSON object:", text={"format": {"type": "json_object"}}, max_output_tokens=40
    )
    assert obj.output_text.lstrip().startswith("{")
    question = "What is the weather in Paris?"
    for stream in (False, True):
        answer = client.responses.create(
            model=MODEL, input=question, tools=[RESPONSE_TOOL], tool_choice="required", max_output_tokens=60,
            temperature=0, stream=stream,
        )  # fmt: skip
        if stream:
            events = list(answer)
            assert "response.function_call_arguments.delta" in [e.type for e in events]
            answer = events[-1].response
        calls = [item for item in answer.output if item.type == "function_call"]
        assert calls and calls[0].name == "get_weather" and calls[0].call_id, answer.output
        assert isinstance(json.loads(calls[0].arguments).get("city"), str)
    # The round trip: the call and its output as input items, answered in text.
    back = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": question},
            {
                "type": "function_call",
                "call_id": calls[0].call_id,
                "name": "get_weather",
                "arguments": calls[0].arguments,
            },
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"sky": "sunny"}'},
        ],
        tools=[RESPONSE_TOOL],
        tool_choice="none",
        max_output_tokens=16,
        temperature=0,
    )
    assert back.output_text and not [item for item in back.output if item.type == "function_call"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"temperature": 3}, "temperature"),
        ({"input": [{"type": "input_image", "image_url": "x"}]}, "input[0].type"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"frobnicate": 1}, "frobnicate"),
    ],
)
def test_responses_refuses_what_it_does_not_support_naming_the_field(
    client: Any, fields: dict[str, Any], param: str
) -> None:
    from openai import BadRequestError

    with pytest.raises(BadRequestError) as caught:  # sent as they are (the client would refuse some itself)
        client.responses.create(model=MODEL, input="x", max_output_tokens=2, extra_body=fields)
    assert caught.value.body["param"] == param, caught.value.body  # type: ignore[index]
