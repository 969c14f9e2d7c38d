"""Typed domain values shared by the engine, the host interfaces, the Python API and the CLI.

Nothing here knows about wasmtime or llama.cpp: `abi` converts these to and from WIT values.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CONTENT_FILTER = "content-filter"
    TOOL_CALLS = "tool-calls"


ConstraintKind = Literal["json-schema", "json-object", "regex", "grammar", "choice"]


class Constraint(BaseModel):
    """The WIT variant `constraint`: `text` is the schema, regex or grammar; `options` the choices."""

    model_config = ConfigDict(frozen=True)

    kind: ConstraintKind
    text: str = ""
    options: tuple[str, ...] = ()

    @classmethod
    def json_schema(cls, schema: str) -> Constraint:
        return cls(kind="json-schema", text=schema)

    @classmethod
    def json_object(cls) -> Constraint:
        return cls(kind="json-object")

    @classmethod
    def regex(cls, pattern: str) -> Constraint:
        return cls(kind="regex", text=pattern)

    @classmethod
    def grammar(cls, grammar: str) -> Constraint:
        return cls(kind="grammar", text=grammar)

    @classmethod
    def choice(cls, options: tuple[str, ...] | list[str]) -> Constraint:
        return cls(kind="choice", options=tuple(options))


class LogitBias(BaseModel):
    model_config = ConfigDict(frozen=True)

    token_id: int
    bias: float


class InferencingParams(BaseModel):
    """Sampling and stopping parameters (the WIT record `inferencing-params`; defaults are `policy`'s).

    Validated when constructed (`policy.check_params`): every path (guest calls through `abi`, the Python API,
    the CLI) gets the same checks and messages, and the engine only ever sees valid params. Bad values raise
    `InvalidInput` naming the field and its range.
    """

    model_config = ConfigDict(frozen=True)

    max_tokens: int | None = 100
    repeat_penalty: float = 1.1
    repeat_penalty_last_n_token_count: int = 64
    stop: tuple[str, ...] = ()
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    seed: int | None = None
    constraint: Constraint | None = None
    logprobs: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[LogitBias, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> InferencingParams:
        from . import policy  # policy imports this module

        policy.check_params(self)
        return self


class TopLogprob(BaseModel):
    model_config = ConfigDict(frozen=True)

    token_id: int
    bytes: bytes
    logprob: float


class TokenLogprob(BaseModel):
    """A sampled token's log-probability under the raw model distribution, with the top alternatives."""

    model_config = ConfigDict(frozen=True)

    token_id: int
    bytes: bytes
    logprob: float
    top: tuple[TopLogprob, ...] = ()


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    prompt_token_count: int
    generated_token_count: int


class InferenceResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    finish_reason: FinishReason
    text: str
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] = ()


class StreamChunk(BaseModel):
    """New text since the previous chunk, the tokens it came from, and the running usage."""

    model_config = ConfigDict(frozen=True)

    text: str
    token_ids: tuple[int, ...]
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] = ()  # parallel to token_ids when logprobs were requested


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


class BeamParams(BaseModel):
    """WIT `beam-params` (validated when constructed: `policy.check_beam_params`)."""

    model_config = ConfigDict(frozen=True)

    width: int = 4
    max_tokens: int = 32
    stop: tuple[str, ...] = ()
    length_penalty: float = 0.0

    @model_validator(mode="after")
    def _check(self) -> BeamParams:
        from . import policy

        policy.check_beam_params(self)
        return self


# -- chat (WIT `chat`, `chat-stream`, `apply-chat-template`) ---------------------------------------------------


class ChatRole(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str  # a JSON object, as text


class ChatMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: ChatRole
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


class Tool(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str | None = None
    parameters: str = '{"type": "object"}'  # a JSON Schema, as text


class ToolChoice(BaseModel):
    """`auto`, `none`, `required`, or `named` with `name`."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["auto", "none", "required", "named"] = "auto"
    name: str | None = None


class ChatParams(BaseModel):
    model_config = ConfigDict(frozen=True)

    inferencing: InferencingParams = Field(default_factory=InferencingParams)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = Field(default_factory=ToolChoice)


class ChatResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    message: ChatMessage
    finish_reason: FinishReason
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] = ()


class ToolCallDelta(BaseModel):
    """A piece of a streamed tool call: the first of a call has `id` and `name`; `arguments` pieces join up."""

    model_config = ConfigDict(frozen=True)

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


ChatEvent = StreamChunk | ToolCallDelta | StreamDone
