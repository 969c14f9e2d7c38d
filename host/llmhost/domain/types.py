"""Typed domain values shared by the engine, the host interfaces, the Python API and the CLI.

Nothing here knows about wasmtime or llama.cpp: the converters in `llmhost.interfaces` turn these into WIT
values and back.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmhost.domain.errors import InvalidInput
from llmhost.domain.limits import (
    MAX_ABS_LOGIT_BIAS,
    MAX_ABS_PENALTY,
    MAX_BEAM_TOKENS,
    MAX_BEAM_WIDTH,
    MAX_CHOICES,
    MAX_CONSTRAINT_BYTES,
    MAX_EMBEDDING_TEXTS,
    MAX_LENGTH_PENALTY,
    MAX_LOGIT_BIAS_ENTRIES,
    MAX_NEXT_TOKEN_TOP,
    MAX_SCORE_CONTINUATIONS,
    MAX_STOP_LENGTH,
    MAX_STOP_SEQUENCES,
    MAX_TOKENIZE_BYTES,
    MAX_TOP_LOGPROBS,
    U32_MAX,
    U64_MAX,
)


class Value(BaseModel):
    """A domain value: immutable once constructed (and validated)."""

    model_config = ConfigDict(frozen=True)


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CONTENT_FILTER = "content-filter"
    TOOL_CALLS = "tool-calls"

    @property
    def openai(self) -> str:
        """As OpenAI spells it (underscores, where WIT has hyphens)."""
        return self.value.replace("-", "_")


ConstraintKind = Literal["json-schema", "json-object", "regex", "grammar", "choice"]


class Constraint(Value):
    """The WIT variant `constraint`: `text` is the schema, regex or grammar; `options` the choices."""

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


class LogitBias(Value):
    token_id: int
    bias: float


class InferencingParams(Value):
    """Sampling and stopping parameters (the WIT record `inferencing-params`; defaults are `limits`' and Spin's).

    Validated when constructed (`check_params`): every path (guest calls through `abi`, the Python API,
    the CLI) gets the same checks and messages, and the engine only ever sees valid params. Bad values raise
    `InvalidInput` naming the field and its range.
    """

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
        check_params(self)
        return self


class TopLogprob(Value):
    token_id: int
    bytes: bytes
    logprob: float


class TokenLogprob(Value):
    """A sampled token's log-probability under the raw model distribution, with the top alternatives."""

    token_id: int
    bytes: bytes
    logprob: float
    top: tuple[TopLogprob, ...] = ()


class Usage(Value):
    prompt_token_count: int
    generated_token_count: int

    def to_dict(self) -> dict[str, int]:
        """OpenAI's `usage`."""
        prompt, completion = self.prompt_token_count, self.generated_token_count
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class InferenceResult(Value):
    finish_reason: FinishReason
    text: str
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """One choice of an OpenAI (legacy) completion, with its usage."""
        return {"text": self.text, "finish_reason": self.finish_reason.openai, "usage": self.usage.to_dict()}


class StreamChunk(Value):
    """New text since the previous chunk, the tokens it came from, and the running usage."""

    text: str
    token_ids: tuple[int, ...]
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] = ()  # parallel to token_ids when logprobs were requested


class StreamDone(Value):
    finish_reason: FinishReason
    usage: Usage


StreamEvent = StreamChunk | StreamDone


class ModelInfo(Value):
    name: str
    context_length: int
    vocab_size: int


class EmbeddingsResult(Value):
    embeddings: list[list[float]] = Field(default_factory=list)
    prompt_token_count: int = 0


class BeamParams(Value):
    """WIT `beam-params` (validated when constructed: `check_beam_params`)."""

    width: int = 4
    max_tokens: int = 32
    stop: tuple[str, ...] = ()
    length_penalty: float = 0.0

    @model_validator(mode="after")
    def _check(self) -> BeamParams:
        check_beam_params(self)
        return self


# -- chat (WIT `chat`, `chat-stream`, `apply-chat-template`) ---------------------------------------------------


class ChatRole(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ToolCall(Value):
    id: str
    name: str
    arguments: str  # a JSON object, as text (as in OpenAI's API)

    def parsed_arguments(self) -> Any:
        """`arguments` parsed (json.JSONDecodeError when the text is not JSON)."""
        return json.loads(self.arguments)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class ChatMessage(Value):
    role: ChatRole
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As OpenAI's messages (what `Host.chat` also takes)."""
        result: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            result["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            result["tool_call_id"] = self.tool_call_id
        return result


class Tool(Value):
    name: str
    description: str | None = None
    parameters: str = '{"type": "object"}'  # a JSON Schema, as text


class ToolChoice(Value):
    """`auto`, `none`, `required`, or `named` with `name`."""

    kind: Literal["auto", "none", "required", "named"] = "auto"
    name: str | None = None


class ChatParams(Value):
    inferencing: InferencingParams = Field(default_factory=InferencingParams)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = Field(default_factory=ToolChoice)


class ChatResult(Value):
    message: ChatMessage
    finish_reason: FinishReason
    usage: Usage
    logprobs: tuple[TokenLogprob, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """One choice of an OpenAI chat completion, with its usage."""
        return {
            "message": self.message.to_dict(),
            "finish_reason": self.finish_reason.openai,
            "usage": self.usage.to_dict(),
        }


class ToolCallDelta(Value):
    """A piece of a streamed tool call: the first of a call has `id` and `name`; `arguments` pieces join up."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


ChatEvent = StreamChunk | ToolCallDelta | StreamDone


# --- validation: the checks `InferencingParams` and `BeamParams` run when constructed, and the others --------


def check_params(params: InferencingParams) -> None:
    """Check every field; raise `InvalidInput` naming the field and its allowed range (NaN and inf included).

    Called when `InferencingParams` is constructed, so every path validates alike. Bounds that depend on the
    model (the repeat window is clamped to the context length) are applied by the engine.
    """
    if params.max_tokens is not None and not 1 <= params.max_tokens <= U32_MAX:
        raise InvalidInput(f"max-tokens must be at least 1 (or none for no limit), got {params.max_tokens}")
    if not 0 <= params.temperature < math.inf:  # also rejects NaN
        raise InvalidInput(f"temperature must be >= 0 and finite (0 is greedy), got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise InvalidInput(f"top-p must be in (0, 1], got {params.top_p}")
    if not 0 < params.repeat_penalty < math.inf:
        raise InvalidInput(f"repeat-penalty must be > 0 and finite (1.0 disables it), got {params.repeat_penalty}")
    if not 0 <= params.top_k <= U32_MAX:
        raise InvalidInput(f"top-k must be >= 0 (0 disables it), got {params.top_k}")
    if not 0 <= params.repeat_penalty_last_n_token_count <= U32_MAX:
        raise InvalidInput(
            f"repeat-penalty-last-n-token-count must be >= 0, got {params.repeat_penalty_last_n_token_count}"
        )
    if params.seed is not None and not 0 <= params.seed <= U64_MAX:
        raise InvalidInput(f"seed must be a u64, got {params.seed}")
    for name in ("frequency_penalty", "presence_penalty"):
        value = getattr(params, name)
        if not -MAX_ABS_PENALTY <= value <= MAX_ABS_PENALTY:
            raise InvalidInput(
                f"{name.replace('_', '-')} must be in [-{MAX_ABS_PENALTY}, {MAX_ABS_PENALTY}] (0 disables it), "
                f"got {value}"
            )
    if params.logprobs is not None and not 0 <= params.logprobs <= MAX_TOP_LOGPROBS:
        raise InvalidInput(
            f"logprobs must be 0 (the sampled token only) to {MAX_TOP_LOGPROBS} alternatives, got {params.logprobs}"
        )
    check_stops(params.stop)
    if len(params.logit_bias) > MAX_LOGIT_BIAS_ENTRIES:
        raise InvalidInput(
            f"logit-bias has {len(params.logit_bias)} entries; at most {MAX_LOGIT_BIAS_ENTRIES} are allowed"
        )
    for i, entry in enumerate(params.logit_bias):
        if not -MAX_ABS_LOGIT_BIAS <= entry.bias <= MAX_ABS_LOGIT_BIAS:
            raise InvalidInput(
                f"logit-bias[{i}].bias must be in [-{MAX_ABS_LOGIT_BIAS}, {MAX_ABS_LOGIT_BIAS}], got {entry.bias}"
            )
        if not 0 <= entry.token_id <= U32_MAX:
            raise InvalidInput(f"logit-bias[{i}].token-id must be a u32, got {entry.token_id}")
    if params.constraint is not None:
        check_constraint(params.constraint)


def check_stops(stop: tuple[str, ...]) -> None:
    if len(stop) > MAX_STOP_SEQUENCES:
        raise InvalidInput(f"stop has {len(stop)} entries; at most {MAX_STOP_SEQUENCES} are allowed")
    for i, s in enumerate(stop):
        check_text(s, f"stop[{i}]")
        if s == "":
            raise InvalidInput(
                f"stop[{i}] is an empty string; stop sequences must be 1 to {MAX_STOP_LENGTH} characters"
            )
        if len(s) > MAX_STOP_LENGTH:
            raise InvalidInput(f"stop[{i}] has {len(s)} characters; at most {MAX_STOP_LENGTH} are allowed")


def check_beam_params(params: BeamParams) -> None:
    """Called when `BeamParams` is constructed, like `check_params`."""
    if not 1 <= params.width <= MAX_BEAM_WIDTH:
        raise InvalidInput(f"width must be 1 to {MAX_BEAM_WIDTH}, got {params.width}")
    if not 1 <= params.max_tokens <= MAX_BEAM_TOKENS:
        raise InvalidInput(f"max-tokens must be 1 to {MAX_BEAM_TOKENS}, got {params.max_tokens}")
    if not 0 <= params.length_penalty <= MAX_LENGTH_PENALTY:  # also rejects NaN
        raise InvalidInput(
            f"length-penalty must be in [0, {MAX_LENGTH_PENALTY}] (0: none), got {params.length_penalty}"
        )
    check_stops(params.stop)


def check_continuations(continuations: list[str]) -> None:
    if len(continuations) > MAX_SCORE_CONTINUATIONS:
        raise InvalidInput(f"score got {len(continuations)} continuations; at most {MAX_SCORE_CONTINUATIONS} per call")


def check_logprobs_top(top: int) -> None:
    """The alternatives per token of `sequence.append-tokens-with-logprobs` (as `logprobs` in params)."""
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise InvalidInput(f"top must be 0 to {MAX_TOP_LOGPROBS} alternatives per token, got {top}")


def check_next_token_top(top: int) -> None:
    if not 1 <= top <= MAX_NEXT_TOKEN_TOP:
        raise InvalidInput(f"top must be 1 to {MAX_NEXT_TOKEN_TOP} candidates, got {top}")


def check_constraint(constraint: Constraint) -> None:
    """The model-independent checks of a constraint (the parser's own checks run when the engine compiles it)."""
    if constraint.kind == "choice":
        if not constraint.options:
            raise InvalidInput("constraint choice needs at least one option, got an empty list")
        if len(constraint.options) > MAX_CHOICES:
            raise InvalidInput(f"constraint choice has {len(constraint.options)} options; at most {MAX_CHOICES}")
        for i, option in enumerate(constraint.options):
            check_text(option, f"constraint choice[{i}]")
            if option == "":
                raise InvalidInput(f"constraint choice[{i}] is an empty string; options must not be empty")
        size = sum(len(o.encode()) for o in constraint.options)
    else:
        check_text(constraint.text, f"constraint {constraint.kind}")
        size = len(constraint.text.encode())
        if constraint.kind != "json-object" and not constraint.text.strip():
            raise InvalidInput(f"constraint {constraint.kind} is empty")
    if size > MAX_CONSTRAINT_BYTES:
        raise InvalidInput(f"constraint {constraint.kind} is {size} bytes; at most {MAX_CONSTRAINT_BYTES} are allowed")


# One input of an embeddings call: a text (tokenized as a prompt is) or token ids (taken as they are).
EmbeddingInput = str | list[int]


def check_embedding_texts(texts: Sequence[EmbeddingInput]) -> None:
    if len(texts) > MAX_EMBEDDING_TEXTS:
        raise InvalidInput(f"generate-embeddings got {len(texts)} inputs; at most {MAX_EMBEDDING_TEXTS} per call")


def embedding_inputs(texts: object) -> list[EmbeddingInput]:
    """An embeddings call's inputs from a Python caller, checked once: a list or tuple whose items are texts (valid
    Unicode) or lists of integer token ids. A bare string, bytes, a float or bool id, or a text among ids is
    `InvalidInput` saying what was expected (WIT inputs have these types by construction)."""
    if isinstance(texts, (str, bytes, bytearray, memoryview)):
        what = "a single string: pass [text] for one vector" if isinstance(texts, str) else "bytes: decode them first"
        raise InvalidInput(f"embeddings take a list of inputs (texts, or lists of token ids), not {what}")
    if not isinstance(texts, (list, tuple)):
        raise InvalidInput(
            f"embeddings take a list of inputs (texts, or lists of token ids), not {type(texts).__name__}"
        )
    check_embedding_texts(texts)
    inputs: list[EmbeddingInput] = []
    for i, item in enumerate(texts):
        if isinstance(item, str):
            check_text(item, f"inputs[{i}]")
            inputs.append(item)
        elif isinstance(item, (list, tuple)):
            for j, token in enumerate(item):
                if isinstance(token, bool) or not isinstance(token, numbers.Integral):
                    raise InvalidInput(
                        f"inputs[{i}][{j}] is {token!r} ({type(token).__name__}): token ids are integers"
                    )
            inputs.append([int(token) for token in item])
        else:
            raise InvalidInput(
                f"inputs[{i}] is a {type(item).__name__}: each input is a text (str) or a list of token ids (ints)"
            )
    return inputs


def encodable(text: str, codec: str) -> bool:
    """Whether `text` can be encoded with `codec` (UTF-8: no lone surrogate; latin-1: what an HTTP header can carry)."""
    try:
        text.encode(codec)
    except UnicodeEncodeError:
        return False
    return True


def check_text(text: str, what: str) -> None:
    """A text from a Python caller must be valid Unicode: a lone surrogate (e.g. from `json.loads` of "\\ud800")
    cannot be encoded as UTF-8, which the tokenizer (and any WIT string) needs."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidInput(
            f"{what} is not valid Unicode: it holds a lone surrogate ({text[error.start]!r}) at index {error.start}; "
            "texts must be encodable as UTF-8"
        ) from None


def check_embedding_tokens(inputs: Sequence[EmbeddingInput], n_vocab: int, model: str) -> None:
    """Token-id inputs: not empty, every id in the vocabulary (the error names the element, `inputs[1][3]`)."""
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            continue
        if not item:
            raise InvalidInput(f"inputs[{i}] is empty: an embedding needs at least one token")
        for j, token in enumerate(item):
            if not 0 <= token < n_vocab:
                raise InvalidInput(f"inputs[{i}][{j}] = {token} is not a token of {model} (ids are 0 to {n_vocab - 1})")


# Spin's defaults for `params: none` (see the WIT doc of `inferencing-params`).
DEFAULT_PARAMS = InferencingParams()


def check_text_length(what: str, length: int, room: int, context_length: int, bytes_per_token: int) -> None:
    """Refuse a text of `length` characters when it is too long to be tokenized into `room` tokens or fewer,
    before tokenizing it: it has at least length / bytes_per_token tokens (see `MAX_BYTES_PER_TOKEN`). Costs
    nothing (no encoding)."""
    if length > max(room, 0) * bytes_per_token:
        left = "" if room == context_length else f" ({max(room, 0)} of them left)"
        raise InvalidInput(
            f"{what} is {length} characters: more than the context window of {context_length} tokens{left} can "
            f"hold (a token of this model is at most {bytes_per_token} bytes); shorten it or raise the model's "
            "`context-length` in the config"
        )


def check_tokenize_length(text: str) -> None:
    """`tokenize` builds its whole result: its text is capped (`MAX_TOKENIZE_BYTES`), checked before encoding."""
    size = len(text) if len(text) > MAX_TOKENIZE_BYTES else len(text.encode())
    if size > MAX_TOKENIZE_BYTES:
        raise InvalidInput(
            f"tokenize got a text of at least {size} bytes; at most {MAX_TOKENIZE_BYTES} bytes per call "
            "(tokenize a long text in parts)"
        )


def check_prompt_fits(prompt_tokens: int, context_length: int) -> None:
    # At least one token must still fit after the prompt, or nothing can be generated.
    if prompt_tokens >= context_length:
        raise InvalidInput(
            f"prompt is {prompt_tokens} tokens but the context window is {context_length} tokens "
            "(prompt must be shorter; raise the model's `context-length` in the config or shorten the prompt)"
        )
