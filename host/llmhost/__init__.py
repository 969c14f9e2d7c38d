"""llmhost: run sandboxed WebAssembly components that use an LLM served by the host.

The public API (`Host`, `App`, the domain types and errors) is re-exported here. Names are resolved lazily so
that importing the package (e.g. for `llmhost --help`) does not load wasmtime.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import App, CompletedRun, GuestTimeout, GuestTrap, Host, HostError, LoadError, ModelSummary
    from .build import BuildError, build_component
    from .config import ConfigError, FakeEngineConfig, HostConfig, ModelConfig, SandboxConfig, load_config
    from .types import (
        EmbeddingsResult,
        EngineError,
        FinishReason,
        InferenceResult,
        InferencingParams,
        InvalidInput,
        LlmError,
        ModelInfo,
        ModelNotSupported,
        StreamChunk,
        StreamDone,
        StreamEvent,
        Usage,
    )

_EXPORTS = {
    "api": ["App", "CompletedRun", "GuestTimeout", "GuestTrap", "Host", "HostError", "LoadError", "ModelSummary"],
    "build": ["BuildError", "build_component"],
    "config": ["ConfigError", "FakeEngineConfig", "HostConfig", "ModelConfig", "SandboxConfig", "load_config"],
    "types": [
        "EmbeddingsResult",
        "EngineError",
        "FinishReason",
        "InferenceResult",
        "InferencingParams",
        "InvalidInput",
        "LlmError",
        "ModelInfo",
        "ModelNotSupported",
        "StreamChunk",
        "StreamDone",
        "StreamEvent",
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
