"""Keyword arguments → WIT `inferencing-params`, and WIT results → plain Python values."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidInput, call

DEFAULT_MODEL = "gemma-3-270m"  # completion (`infer`, `stream`, sequences): a pretrained (base) model
# `chat`, `chat_stream` and `apply_chat_template`'s: the built-in instruct model (Gemma 3 270M was never tuned to chat).
DEFAULT_CHAT_MODEL = "smollm2-135m"
# `llm.embed`'s: the built-in sentence-embedding model (the generative models retrieve poorly).
DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"
# What the host's wasmtime copies out of a guest in one call (the arguments of a host call, the result of an
# export): its hostcall fuel (128 MiB) over the 48 bytes each list element takes there; past it the guest traps
# (host/llmhost/domain/limits.py, MAX_LIFTED_ITEMS: the SDK imports nothing of the host). Strings count their bytes.
MAX_CALL_ITEMS = 2_796_202

# The keywords that fill `inferencing-params` (its fields but `constraint`, which the STRUCTURED keywords set).
FIELDS = (
    "max_tokens",
    "repeat_penalty",
    "repeat_penalty_last_n_token_count",
    "stop",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "logprobs",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
)
STRUCTURED = ("json_schema", "json_object", "regex", "grammar", "choice")
_defaults: dict[str, Any] = {}  # model -> the host's `inferencing-params` for it


def defaults(model: str = DEFAULT_MODEL) -> dict[str, Any]:
    """The host's params for `model` when none are given (WIT `default-params`, asked once per model), as the
    keywords `build` takes."""
    found = _defaults.get(model)
    if found is None:
        found = _defaults[model] = call(wit_llm().default_params, model)
    values = {name: getattr(found, name) for name in FIELDS}
    values["logit_bias"] = {int(e.token_id): float(e.bias) for e in values["logit_bias"]}
    values["stop"] = tuple(values["stop"])
    return values


def wit_llm() -> Any:
    from wit_world.imports import llm

    return llm


def schema_text(schema: Any) -> str:
    """A JSON Schema as text: a dict, a JSON string, or a pydantic model class (if the guest bundles pydantic)."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, Mapping):
        return json.dumps(schema)
    to_schema = getattr(schema, "model_json_schema", None)
    if callable(to_schema):
        return json.dumps(to_schema())
    raise InvalidInput(f"json_schema must be a dict, a JSON string or a pydantic model class, not {type(schema)}")


def constraint(options: Mapping[str, Any]) -> Any:
    """The WIT `constraint` for the structured-output keywords (at most one), or None."""
    given = [name for name in STRUCTURED if options.get(name) not in (None, False)]
    if not given:
        return None
    if len(given) > 1:
        raise InvalidInput(f"give at most one of {', '.join(STRUCTURED)} (got {', '.join(given)})")
    llm = wit_llm()
    name = given[0]
    value = options[name]
    if name == "json_schema":
        return llm.Constraint_JsonSchema(schema_text(value))
    if name == "json_object":
        return llm.Constraint_JsonObject()
    if name == "regex":
        return llm.Constraint_Regex(str(value))
    if name == "grammar":
        return llm.Constraint_Grammar(str(value))
    return llm.Constraint_Choice([str(c) for c in value])


def build(options: Mapping[str, Any], model: str = DEFAULT_MODEL) -> Any:
    """WIT `inferencing-params` from keyword arguments: each one not given takes the host's default for `model`.

    `stop` may be one string or several; `logit_bias` a {token id: bias} mapping; the structured-output keywords
    (`json_schema`, `json_object`, `regex`, `grammar`, `choice`) become `constraint`."""
    unknown = set(options) - set(FIELDS) - set(STRUCTURED)
    if unknown:
        raise TypeError(f"unknown keyword argument(s): {', '.join(sorted(unknown))}")
    values = {**defaults(model), **{k: v for k, v in options.items() if k in FIELDS}}
    stop = values["stop"]
    bias = values["logit_bias"] or {}
    llm = wit_llm()
    return llm.InferencingParams(
        max_tokens=values["max_tokens"],
        repeat_penalty=float(values["repeat_penalty"]),
        repeat_penalty_last_n_token_count=int(values["repeat_penalty_last_n_token_count"]),
        stop=[stop] if isinstance(stop, str) else list(stop),
        temperature=float(values["temperature"]),
        top_k=int(values["top_k"]),
        top_p=float(values["top_p"]),
        seed=values["seed"],
        constraint=constraint(options),
        logprobs=values["logprobs"],
        frequency_penalty=float(values["frequency_penalty"]),
        presence_penalty=float(values["presence_penalty"]),
        logit_bias=[llm.LogitBias(token_id=int(t), bias=float(b)) for t, b in dict(bias).items()],
    )


def reason_name(finish_reason: Any) -> str:
    """`finish-reason` as its WIT spelling: "stop", "length", "content-filter", "tool-calls"."""
    return str(finish_reason.name).lower().replace("_", "-")


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    generated_tokens: int

    @classmethod
    def from_wit(cls, usage: Any) -> Usage:
        return cls(int(usage.prompt_token_count), int(usage.generated_token_count))


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    text: bytes
    logprob: float
    top: tuple[tuple[int, bytes, float], ...] = ()

    @classmethod
    def from_wit(cls, entry: Any) -> TokenLogprob:
        return cls(
            int(entry.token_id),
            bytes(entry.bytes),
            float(entry.logprob),
            tuple((int(t.token_id), bytes(t.bytes), float(t.logprob)) for t in entry.top),
        )


class Completion(str):
    """The generated text (a `str`), with `.text`, `.finish_reason`, `.usage` and `.logprobs` beside it."""

    finish_reason: str
    usage: Usage
    logprobs: list[TokenLogprob]

    def __new__(cls, text: str, finish_reason: str, usage: Usage, logprobs: Iterable[TokenLogprob] = ()) -> Completion:
        value = super().__new__(cls, text)
        value.finish_reason = finish_reason
        value.usage = usage
        value.logprobs = list(logprobs)
        return value

    @property
    def text(self) -> str:
        return str.__str__(self)

    @classmethod
    def from_wit(cls, result: Any) -> Completion:
        return cls(
            result.text,
            reason_name(result.finish_reason),
            Usage.from_wit(result.usage),
            [TokenLogprob.from_wit(e) for e in result.logprobs],
        )


@dataclass
class Chunk:
    """One piece of a stream."""

    text: str
    token_ids: list[int]
    usage: Usage
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class Done:
    """How a stream ended."""

    finish_reason: str
    usage: Usage
