"""Reading tool calls out of replies (whole and streamed), the reply constraints, and the chat stream's events."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from llmhost.chat.service import ChatStream, collect_chat
from llmhost.chat.tools import parse_tools, reply_constraint, scan_calls, shortest_call
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import (
    FinishReason,
    StreamChunk,
    StreamDone,
    StreamEvent,
    Tool,
    ToolCallDelta,
    ToolChoice,
    Usage,
)

ARGS = '{"city": "Paris", "days": 3}'
JSON_CALL = '{"name": "get_weather", "arguments": ' + ARGS + "}"
HERMES_CALL = "<tool_call>\n" + JSON_CALL + "\n</tool_call>"


def test_scan_json_call() -> None:
    [call] = scan_calls(JSON_CALL, "json", final=True) or []
    assert (call.name, call.arguments, call.complete) == ("get_weather", ARGS, True)
    assert scan_calls("The weather is fine.", "json", final=True) is None
    [partial] = scan_calls(JSON_CALL[:50], "json", final=False) or []
    assert ARGS.startswith(partial.arguments) and not partial.complete


def test_scan_hermes_calls() -> None:
    calls = scan_calls(HERMES_CALL + "\n" + HERMES_CALL.replace("Paris", "Rome"), "hermes", final=True) or []
    assert [c.arguments for c in calls] == [ARGS, ARGS.replace("Paris", "Rome")]
    assert all(c.complete for c in calls)
    assert scan_calls("<b>bold</b>", "hermes", final=True) is None
    assert scan_calls("Hello", "hermes", final=True) is None


@pytest.mark.parametrize("fmt,text", [("json", JSON_CALL), ("hermes", HERMES_CALL)])
def test_streamed_arguments_are_prefixes_of_the_final_ones(fmt: str, text: str) -> None:
    for cut in range(1, len(text)):
        for call in scan_calls(text[:cut], fmt, final=False) or []:  # type: ignore[arg-type]
            assert ARGS.startswith(call.arguments), (cut, call.arguments)


class ScriptedGeneration:
    def __init__(self, pieces: list[str], finish: FinishReason = FinishReason.STOP) -> None:
        usage = Usage(prompt_token_count=5, generated_token_count=len(pieces))
        self.events: list[StreamEvent] = [StreamChunk(text=p, token_ids=(1,), usage=usage) for p in pieces]
        self.events.append(StreamDone(finish_reason=finish, usage=usage))
        self.closed = False

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if not self.events:
            raise StopIteration
        return self.events.pop(0)

    def close(self) -> None:
        self.closed = True


def pieces_of(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("fmt,text", [("json", JSON_CALL), ("hermes", HERMES_CALL)])
def test_chat_stream_emits_deltas_then_tool_calls(fmt: str, text: str) -> None:
    events = list(ChatStream(ScriptedGeneration(pieces_of(text)), fmt))  # type: ignore[arg-type]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert not any(isinstance(e, StreamChunk) for e in events)
    assert deltas[0].name == "get_weather" and deltas[0].id
    assert "".join(d.arguments for d in deltas) == ARGS
    assert isinstance(events[-1], StreamDone) and events[-1].finish_reason is FinishReason.TOOL_CALLS
    result = collect_chat(ChatStream(ScriptedGeneration(pieces_of(text)), fmt))  # type: ignore[arg-type]
    assert result.finish_reason is FinishReason.TOOL_CALLS and result.message.content is None
    [call] = result.message.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris", "days": 3})


def test_chat_stream_text_passes_through() -> None:
    result = collect_chat(ChatStream(ScriptedGeneration(pieces_of(" Sunny, 18 C.")), "json"))
    assert result.message.content == " Sunny, 18 C." and result.finish_reason is FinishReason.STOP
    assert not result.message.tool_calls


def test_a_cut_off_call_is_reported_incomplete_never_as_text() -> None:
    with pytest.raises(InvalidInput, match=r"incomplete tool call.*finish `length`.*max-tokens"):
        collect_chat(ChatStream(ScriptedGeneration(pieces_of(JSON_CALL[:30]), FinishReason.LENGTH), "json"))
    # A stream says it by its events: a call's deltas (arguments a prefix of JSON), then `length`, never content.
    events = list(ChatStream(ScriptedGeneration(pieces_of(JSON_CALL[:30]), FinishReason.LENGTH), "json"))  # type: ignore[arg-type]
    assert not any(isinstance(e, StreamChunk) for e in events)
    assert isinstance(events[-1], StreamDone) and events[-1].finish_reason is FinishReason.LENGTH


@pytest.mark.parametrize(
    ("schema", "arguments"),
    [
        ({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, {"city": ""}),
        ({"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "string"}}}, {}),
        ({"type": "object", "properties": {"u": {"enum": ["celsius", "c"]}}, "required": ["u"]}, {"u": "c"}),
    ],
)
def test_shortest_call_takes_only_required_arguments_at_their_shortest(schema: dict, arguments: dict) -> None:
    tools = parse_tools((Tool(name="f", parameters=json.dumps(schema)),), ToolChoice(kind="required"))
    text = shortest_call(tools, ToolChoice(kind="required"), "json")
    assert json.loads(text) == {"name": "f", "arguments": arguments}
    assert shortest_call(tools, ToolChoice(kind="required"), "hermes") == f"<tool_call>\n{text}\n</tool_call>"


def test_parse_tools_errors() -> None:
    good = Tool(name="f", parameters='{"type": "object"}')
    with pytest.raises(InvalidInput, match=r"tools\[0\]\.parameters"):
        parse_tools((Tool(name="f", parameters="{nope"),), ToolChoice())
    with pytest.raises(InvalidInput, match="twice"):
        parse_tools((good, good), ToolChoice())
    with pytest.raises(InvalidInput, match="required"):
        parse_tools((), ToolChoice(kind="required"))
    with pytest.raises(InvalidInput, match="'g'"):
        parse_tools((good,), ToolChoice(kind="named", name="g"))


def test_reply_constraints() -> None:
    tools = parse_tools(
        (Tool(name="f", parameters='{"type": "object"}'), Tool(name="g", parameters='{"type": "object"}')), ToolChoice()
    )
    assert reply_constraint(tools, ToolChoice(kind="none"), "json") is None
    auto = reply_constraint(tools, ToolChoice(), "json")
    assert auto is not None and auto.kind == "grammar" and "TEXT" in auto.text and '"anyOf"' in auto.text
    named = reply_constraint(tools, ToolChoice(kind="named", name="g"), "hermes")
    assert named is not None and "TEXT" not in named.text and '"const": "g"' in named.text
    assert '"const": "f"' not in named.text and "<tool_call>" in named.text
