"""The chat functions of `llmhost:llm/llm@0.2.0` (wit/llm.wit): `chat`, `chat-stream`, `apply-chat-template`.

Chat streams live in the run scope's stream table beside inference streams (one quota, one idle reaper).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from wasmtime.component import FuncType, LinkerInstance, Record, ResourceType, Variant

from llmhost import telemetry
from llmhost.domain.types import (
    ChatEvent,
    ChatMessage,
    ChatParams,
    ChatResult,
    ChatRole,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
)
from llmhost.interfaces import llm_values
from llmhost.interfaces.streams import scope_streams, stream_dropped
from llmhost.run.service import LlmService, ScopeLimits
from llmhost.runtime import abi
from llmhost.runtime.abi import define_functions
from llmhost.runtime.sandbox import scope_of

_log = logging.getLogger(__name__)

CHAT_STREAM_TYPE_ID = 4

FUNCTIONS = ("chat", "chat-stream", "apply-chat-template", "[method]chat-completion-stream.next")


def define_chat(
    instance: LinkerInstance,
    service: LlmService,
    limits: ScopeLimits,
    imported: dict[str, FuncType],
) -> None:
    """Register the chat functions the component imports. Chats run in the caller's run scope, as `infer` does
    (the component's allowed models, cancellation with the run, its token budget)."""

    def chat(store: Any, model: str, messages: Any, params: Any) -> Any:
        messages, params = chat_messages_from_wit(messages), chat_params_from_wit(params)
        return service.chat(model, messages, params, scope_of(store))

    def chat_stream(store: Any, model: str, messages: Any, params: Any) -> int:
        streams = scope_streams(store, limits)
        streams.check_room()
        wit_params = params
        messages, params = chat_messages_from_wit(messages), chat_params_from_wit(params)
        opened = lambda: service.chat_stream(model, messages, params, scope_of(store))  # noqa: E731
        generation = telemetry.stream("chat-stream", model, wit_params, opened)
        return streams.open(generation)  # type: ignore[arg-type]  # a chat generation iterates chat events

    def apply_template(store: Any, model: str, messages: Any, tools: Any, add_generation_prompt: bool) -> str:
        messages, tools = chat_messages_from_wit(messages), tools_from_wit(tools)
        text = service.apply_chat_template(model, messages, tools, bool(add_generation_prompt), scope_of(store))
        return abi.string_to_wit(text)

    bindings: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
        "chat": (chat, chat_result_to_wit),
        "chat-stream": (chat_stream, lambda rep: abi.own_resource(rep, CHAT_STREAM_TYPE_ID)),
        "apply-chat-template": (apply_template, lambda text: text),
        "[method]chat-completion-stream.next": (
            lambda store, this: scope_streams(store, limits).next(abi.resource_rep(store, this)),
            chat_event_to_wit,
        ),
    }
    if "chat-stream" in imported or "[method]chat-completion-stream.next" in imported:
        instance.add_resource(
            "chat-completion-stream", ResourceType.host(CHAT_STREAM_TYPE_ID), stream_dropped(limits, "chat stream")
        )
    define_functions(instance, imported, bindings, traced="llm")


# -- converters (wit/llm.wit, 0.2.0): WIT values <-> the chat types of `llmhost.domain.types` --


def chat_messages_from_wit(values: Iterable[Any]) -> list[ChatMessage]:
    return [
        ChatMessage(
            role=ChatRole(str(value.role)),
            content=value.content,
            tool_calls=tuple(
                ToolCall(id=str(call.id), name=str(call.name), arguments=str(call.arguments))
                for call in getattr(value, "tool-calls")
            ),
            tool_call_id=getattr(value, "tool-call-id"),
        )
        for value in values
    ]


def tools_from_wit(values: Iterable[Any]) -> tuple[Tool, ...]:
    return tuple(Tool(name=str(v.name), description=v.description, parameters=str(v.parameters)) for v in values)


def chat_params_from_wit(value: Any | None) -> ChatParams:
    """`option<chat-params>` -> validated `ChatParams` (raises `InvalidInput` as `params_from_wit` does)."""
    if value is None:
        return ChatParams()
    choice = getattr(value, "tool-choice")
    tag, payload = (choice.tag, choice.payload) if isinstance(choice, Variant) else (str(choice), None)
    return ChatParams(
        inferencing=llm_values.params_from_wit(value.inferencing),
        tools=tools_from_wit(value.tools),
        tool_choice=ToolChoice(kind=tag, name=payload),
    )


def chat_message_to_wit(message: ChatMessage) -> Record:
    return abi.record(
        {
            "role": message.role.value,
            "content": None if message.content is None else abi.string_to_wit(message.content),
            "tool-calls": [
                abi.record(
                    {
                        "id": abi.string_to_wit(c.id),
                        "name": abi.string_to_wit(c.name),
                        "arguments": abi.string_to_wit(c.arguments),
                    }
                )
                for c in message.tool_calls
            ],
            "tool-call-id": None if message.tool_call_id is None else abi.string_to_wit(message.tool_call_id),
        }
    )


def chat_result_to_wit(result: ChatResult) -> Record:
    return abi.record(
        {
            "message": chat_message_to_wit(result.message),
            "finish-reason": result.finish_reason.value,
            "usage": llm_values.usage_to_wit(result.usage),
            "logprobs": llm_values.logprobs_to_wit(result.logprobs),
        }
    )


def chat_event_to_wit(event: ChatEvent | None) -> Variant | None:
    """`option<chat-event>`."""
    if event is None:
        return None
    if isinstance(event, ToolCallDelta):
        delta = abi.record(
            {
                "index": abi.u32(event.index, "index"),
                "id": None if event.id is None else abi.string_to_wit(event.id),
                "name": None if event.name is None else abi.string_to_wit(event.name),
                "arguments": abi.string_to_wit(event.arguments),
            }
        )
        return Variant("tool-call", delta)
    wrapped = llm_values.stream_event_to_wit(event)
    assert wrapped is not None
    return Variant("content", wrapped.payload) if wrapped.tag == "chunk" else wrapped
