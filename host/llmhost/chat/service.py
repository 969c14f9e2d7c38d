"""`ChatService`: the WIT `chat`, `chat-stream` and `apply-chat-template` on domain types, over any `Engine`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from ..engine.base import Engine
from ..types import ChatEvent, ChatMessage, ChatParams, ChatResult, EngineError, Tool


class ChatGeneration(Protocol):
    """A chat answer in progress: iterate for `ChatEvent`s (content chunks, tool-call deltas, then one done)."""

    def __iter__(self) -> Iterator[ChatEvent]: ...

    def __next__(self) -> ChatEvent: ...

    def close(self) -> None: ...


class ChatService:
    def __init__(self, engine: Callable[[], Engine]) -> None:
        self._engine = engine

    def apply_template(
        self, model: str, messages: list[ChatMessage], tools: tuple[Tool, ...], add_generation_prompt: bool
    ) -> str:
        raise EngineError("chat templates are not available yet in this build")

    def chat(self, model: str, messages: list[ChatMessage], params: ChatParams) -> ChatResult:
        raise EngineError("chat is not available yet in this build")

    def chat_stream(self, model: str, messages: list[ChatMessage], params: ChatParams) -> ChatGeneration:
        raise EngineError("chat is not available yet in this build")
