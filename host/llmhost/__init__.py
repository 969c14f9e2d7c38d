"""llmhost: run sandboxed WebAssembly components that use an LLM served by the host.

The public API (`Host`, `App`, the domain types and errors) is re-exported here. Names are resolved lazily so
that importing the package (e.g. for `llmhost --help`) does not load wasmtime.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmhost.aio import AsyncApp, AsyncChatStream, AsyncGeneration, AsyncHost, AsyncSequence
    from llmhost.api import App, CompletedRun, GuestTimeout, GuestTrap, Host, HostError, LoadError, ModelSummary
    from llmhost.asgi import component_app
    from llmhost.config import ConfigError, FakeEngineConfig, HostConfig, ModelConfig, SandboxConfig, load_config
    from llmhost.domain.errors import EngineError, InvalidInput, LlmError, ModelNotSupported
    from llmhost.domain.types import (
        BeamParams,
        ChatEvent,
        ChatMessage,
        ChatParams,
        ChatResult,
        ChatRole,
        Constraint,
        EmbeddingsResult,
        FinishReason,
        InferenceResult,
        InferencingParams,
        ModelInfo,
        StreamChunk,
        StreamDone,
        StreamEvent,
        Tool,
        ToolCall,
        ToolCallDelta,
        ToolChoice,
        Usage,
    )
    from llmhost.toolchains import build_component
    from llmhost.toolchains.errors import BuildError

_EXPORTS = {
    "aio": ["AsyncApp", "AsyncChatStream", "AsyncGeneration", "AsyncHost", "AsyncSequence"],
    "api": ["App", "CompletedRun", "GuestTimeout", "GuestTrap", "Host", "HostError", "LoadError", "ModelSummary"],
    "asgi": ["component_app"],
    "toolchains": ["build_component"],
    "toolchains.errors": ["BuildError"],
    "config": ["ConfigError", "FakeEngineConfig", "HostConfig", "ModelConfig", "SandboxConfig", "load_config"],
    "domain.errors": ["EngineError", "InvalidInput", "LlmError", "ModelNotSupported"],
    "domain.types": [
        "BeamParams",
        "ChatEvent",
        "ChatMessage",
        "ChatParams",
        "ChatResult",
        "ChatRole",
        "Constraint",
        "EmbeddingsResult",
        "FinishReason",
        "InferenceResult",
        "InferencingParams",
        "ModelInfo",
        "StreamChunk",
        "StreamDone",
        "StreamEvent",
        "Tool",
        "ToolCall",
        "ToolCallDelta",
        "ToolChoice",
        "Usage",
    ],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'llmhost' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
