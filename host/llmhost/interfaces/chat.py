"""The chat functions of `llmhost:llm/llm@0.2.0` (wit/llm.wit): `chat`, `chat-stream`, `apply-chat-template`.

Chat streams live in the run scope's stream table beside inference streams (one quota, one idle reaper).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from wasmtime.component import FuncType, LinkerInstance, ResourceType

from llmhost import telemetry
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
        messages, params = abi.chat_messages_from_wit(messages), abi.chat_params_from_wit(params)
        return service.chat(model, messages, params, scope_of(store))

    def chat_stream(store: Any, model: str, messages: Any, params: Any) -> int:
        streams = scope_streams(store, limits)
        streams.check_room()
        wit_params = params
        messages, params = abi.chat_messages_from_wit(messages), abi.chat_params_from_wit(params)
        opened = lambda: service.chat_stream(model, messages, params, scope_of(store))  # noqa: E731
        generation = telemetry.stream("chat-stream", model, wit_params, opened)
        return streams.open(generation)  # type: ignore[arg-type]  # a chat generation iterates chat events

    def apply_template(store: Any, model: str, messages: Any, tools: Any, add_generation_prompt: bool) -> str:
        messages, tools = abi.chat_messages_from_wit(messages), abi.tools_from_wit(tools)
        text = service.apply_chat_template(model, messages, tools, bool(add_generation_prompt), scope_of(store))
        return abi.string_to_wit(text)

    bindings: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
        "chat": (chat, abi.chat_result_to_wit),
        "chat-stream": (chat_stream, lambda rep: abi.own_resource(rep, CHAT_STREAM_TYPE_ID)),
        "apply-chat-template": (apply_template, lambda text: text),
        "[method]chat-completion-stream.next": (
            lambda store, this: scope_streams(store, limits).next(abi.resource_rep(store, this)),
            abi.chat_event_to_wit,
        ),
    }
    if "chat-stream" in imported or "[method]chat-completion-stream.next" in imported:
        instance.add_resource(
            "chat-completion-stream", ResourceType.host(CHAT_STREAM_TYPE_ID), stream_dropped(limits, "chat stream")
        )
    define_functions(instance, imported, bindings, traced="llm")
