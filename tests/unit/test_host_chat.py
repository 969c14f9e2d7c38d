"""`Host.chat`, `chat_stream` and `apply_chat_template` (issue 58): typed messages and OpenAI-shaped dicts give the
same prompt and result, results have OpenAI's `to_dict()`, and bad input is `InvalidInput` naming
the field. On the fake engine (it replays a script; it cannot constrain a reply, so tool calls are tested in
tests/e2e/test_embed_host.py on the real model, against a guest's chat)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmhost import (
    ChatMessage,
    ChatRole,
    FakeEngineConfig,
    FinishReason,
    Host,
    HostConfig,
    InferencingParams,
    InvalidInput,
    ToolCall,
)
from llmhost.chat.service import collect_chat

MODEL = "gemma-3-270m"
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "The time", "parameters": {"type": "object"}},
}


def fake_host(tmp_path: Path, script: str) -> Host:
    return Host(HostConfig(engine=FakeEngineConfig(script=script, context_length=512), cache_dir=tmp_path))


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with fake_host(tmp_path, "Hi there.") as running:
        yield running


def test_dicts_and_typed_messages_give_the_same_prompt_and_reply(host: Host) -> None:
    dicts = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    typed = [ChatMessage(role=ChatRole.SYSTEM, content="Be brief."), ChatMessage(role=ChatRole.USER, content="Hi!")]
    prompt = host.apply_chat_template(MODEL, dicts)
    assert prompt == host.apply_chat_template(MODEL, typed)
    assert prompt.endswith("<|assistant|>") and "Be brief." in prompt
    assert not host.apply_chat_template(MODEL, dicts, add_generation_prompt=False).endswith("<|assistant|>")
    result = host.chat(MODEL, dicts, InferencingParams(max_tokens=32))
    assert result == host.chat(MODEL, typed, InferencingParams(max_tokens=32))
    assert result.message.content == "Hi there." and result.finish_reason is FinishReason.STOP
    # The prompt chat generates from is the template's: its token count is the prompt's (fake tokens: bytes + BOS).
    assert result.usage.prompt_token_count == len(host.tokenize(MODEL, prompt))
    assert result.to_dict() == {
        "message": {"role": "assistant", "content": "Hi there."},
        "finish_reason": "stop",
        "usage": {
            "prompt_tokens": result.usage.prompt_token_count,
            "completion_tokens": result.usage.generated_token_count,
            "total_tokens": result.usage.prompt_token_count + result.usage.generated_token_count,
        },
    }


def test_content_parts_are_joined_as_openai_sends_them(host: Host) -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]}]
    assert host.apply_chat_template(MODEL, parts) == host.apply_chat_template(
        MODEL, [{"role": "user", "content": "Hi!"}]
    )


def test_a_past_call_and_its_result_render_like_the_typed_messages(host: Host) -> None:
    openai_history: list[dict[str, Any]] = [
        {"role": "user", "content": "Time?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ]
    typed = [
        ChatMessage(role=ChatRole.USER, content="Time?"),
        ChatMessage(
            role=ChatRole.ASSISTANT,
            tool_calls=(ToolCall(id="c1", name="get_time", arguments="{}"),),
        ),
        ChatMessage(role=ChatRole.TOOL, tool_call_id="c1", content="12:00"),
    ]
    assert host.apply_chat_template(MODEL, openai_history, [TIME_TOOL]) == host.apply_chat_template(
        MODEL, typed, [TIME_TOOL]
    )


def test_chat_stream_collects_to_chat(host: Host) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    assert collect_chat(host.chat_stream(MODEL, messages)) == host.chat(MODEL, messages)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda h: h.chat(MODEL, [{"role": "robot", "content": "x"}]), r"messages\[0\]: role"),
        (lambda h: h.chat(MODEL, [{"content": "x"}]), r"messages\[0\]: role"),
        (lambda h: h.chat(MODEL, "Hi"), "messages must be a list"),
        (lambda h: h.chat(MODEL, [42]), r"messages\[0\] must be a ChatMessage or a dict"),
        (lambda h: h.chat(MODEL, [{"role": "user", "content": "\ud800"}]), r"messages\[0\].content"),
        (lambda h: h.chat(MODEL, [{"role": "user", "content": [{"type": "image_url"}]}]), "only text parts"),
        (lambda h: h.chat(MODEL, [{"role": "user", "content": "x"}], tools=[{"function": {}}]), r"tools\[0\]"),
        (lambda h: h.chat(MODEL, [{"role": "user", "content": "x"}], tool_choice="sometimes"), "tool_choice"),
        # The service's own checks, as a guest gets them: a named tool that is not offered.
        (
            lambda h: h.chat(
                MODEL, [{"role": "user", "content": "x"}], tools=[TIME_TOOL], tool_choice={"function": {"name": "nope"}}
            ),
            "nope",
        ),
    ],
)
def test_bad_input_is_invalid_input_naming_the_field(host: Host, call: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        call(host)
