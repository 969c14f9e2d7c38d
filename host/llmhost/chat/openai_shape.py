"""Chat inputs and results in OpenAI's shape, for the Python API: messages, tools and tool choice given as the
OpenAI SDK's users write them (dicts) become domain values; results become dicts of the same shape.

Anything unusable is `InvalidInput` naming the field, as a guest's malformed chat is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import ChatMessage, Tool, ToolCall, ToolChoice, check_text

MessageLike = ChatMessage | Mapping[str, Any]
ToolLike = Tool | Mapping[str, Any]
ToolChoiceLike = ToolChoice | str | Mapping[str, Any]


def chat_messages(messages: Iterable[MessageLike]) -> list[ChatMessage]:
    if isinstance(messages, (str, bytes, Mapping)):
        raise InvalidInput("messages must be a list of messages (ChatMessage or {'role': ..., 'content': ...})")
    result = [
        message if isinstance(message, ChatMessage) else _message(i, message) for i, message in enumerate(messages)
    ]
    for i, message in enumerate(result):
        if message.content is not None:
            check_text(message.content, f"messages[{i}].content")
    return result


def _message(i: int, message: Mapping[str, Any]) -> ChatMessage:
    if not isinstance(message, Mapping):
        raise InvalidInput(f"messages[{i}] must be a ChatMessage or a dict, not {type(message).__name__}")
    content = message.get("content")
    if isinstance(content, list):  # OpenAI's content parts: only text parts carry anything a text model reads
        texts = [p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        if len(texts) != len(content):
            raise InvalidInput(f"messages[{i}].content: only text parts are supported")
        content = "".join(texts)
    calls = [_call(f"messages[{i}].tool_calls[{j}]", c) for j, c in enumerate(message.get("tool_calls") or ())]
    try:
        return ChatMessage(
            role=message.get("role"),
            content=content,
            tool_calls=tuple(calls),
            tool_call_id=message.get("tool_call_id"),
        )
    except ValidationError as error:
        raise InvalidInput(f"messages[{i}]: {_first(error)}") from None


def _call(where: str, call: Any) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, Mapping):
        raise InvalidInput(f"{where} must be a dict")
    function = call.get("function", call)
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):  # a parsed object is accepted too
        arguments = json.dumps(arguments)
    try:
        return ToolCall(id=call.get("id", ""), name=function.get("name"), arguments=arguments)
    except ValidationError as error:
        raise InvalidInput(f"{where}: {_first(error)}") from None


def chat_tools(tools: Iterable[ToolLike] | None) -> tuple[Tool, ...]:
    if tools is None:
        return ()
    return tuple(tool if isinstance(tool, Tool) else _tool(i, tool) for i, tool in enumerate(tools))


def _tool(i: int, tool: Mapping[str, Any]) -> Tool:
    if not isinstance(tool, Mapping):
        raise InvalidInput(f"tools[{i}] must be a Tool or a dict, not {type(tool).__name__}")
    function = tool.get("function", tool)  # {"type": "function", "function": {...}} or the function itself
    parameters = function.get("parameters", {"type": "object"})
    try:
        return Tool(
            name=function.get("name"),
            description=function.get("description"),
            parameters=parameters if isinstance(parameters, str) else json.dumps(parameters),
        )
    except ValidationError as error:
        raise InvalidInput(f"tools[{i}]: {_first(error)}") from None


def tool_choice(choice: ToolChoiceLike | None) -> ToolChoice:
    """`"auto"`, `"none"`, `"required"`, `{"type": "function", "function": {"name": ...}}` or a `ToolChoice`."""
    if choice is None:
        return ToolChoice()
    if isinstance(choice, ToolChoice):
        return choice
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise InvalidInput(f"tool_choice {choice!r} is not one of auto, none, required")
        return ToolChoice(kind=choice)
    name = (choice.get("function") or {}).get("name") if isinstance(choice, Mapping) else None
    if not isinstance(name, str):
        raise InvalidInput(
            "tool_choice must be auto, none, required or {'type': 'function', 'function': {'name': ...}}"
        )
    return ToolChoice(kind="named", name=name)


def _first(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    return f"{where}: {problem['msg']}" if where else str(problem["msg"])
