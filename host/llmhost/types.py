"""Typed domain values shared by the engine, the host interfaces, the Python API and the CLI.

Nothing here knows about wasmtime or llama.cpp: `abi` converts these to and from WIT values.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CONTENT_FILTER = "content-filter"


class InferencingParams(BaseModel):
    """Sampling and stopping parameters (the WIT record `inferencing-params`; defaults are `policy`'s)."""

    model_config = ConfigDict(frozen=True)

    max_tokens: int | None = 100
    repeat_penalty: float = 1.1
    repeat_penalty_last_n_token_count: int = 64
    stop: tuple[str, ...] = ()
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    seed: int | None = None


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    prompt_token_count: int
    generated_token_count: int


class InferenceResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    finish_reason: FinishReason
    text: str
    usage: Usage


class StreamChunk(BaseModel):
    """New text since the previous chunk, the tokens it came from, and the running usage."""

    model_config = ConfigDict(frozen=True)

    text: str
    token_ids: tuple[int, ...]
    usage: Usage


class StreamDone(BaseModel):
    model_config = ConfigDict(frozen=True)

    finish_reason: FinishReason
    usage: Usage


StreamEvent = StreamChunk | StreamDone


class ModelInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    context_length: int
    vocab_size: int


class EmbeddingsResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    embeddings: list[list[float]] = Field(default_factory=list)
    prompt_token_count: int = 0


class LlmError(Exception):
    """An expected failure; `abi` turns it into the WIT `error` variant (never a trap)."""

    kind = "runtime-error"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class ModelNotSupported(LlmError):
    kind = "model-not-supported"


class EngineError(LlmError):
    kind = "runtime-error"


class InvalidInput(LlmError):
    kind = "invalid-input"
