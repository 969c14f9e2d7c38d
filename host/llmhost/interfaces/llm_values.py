"""The converters of `llmhost:llm/llm` and the values `llm` and `sequences` share (wit/llm.wit): WIT values <->
`llmhost.domain.types` (params, constraints, results, usage, log-probabilities, model info, embeddings, stream
events, model status), on top of `runtime.abi`'s generic lowering.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from wasmtime.component import Record, Variant

from llmhost.domain import types as domain
from llmhost.domain.errors import InvalidInput
from llmhost.domain.limits import U32_MAX, U64_MAX
from llmhost.engine.status import ModelStatus
from llmhost.runtime import abi

# WIT field name -> `InferencingParams` attribute, in WIT order. Fields marked 0.2.0 are absent from a 0.1.0
# component's record: they take their defaults (the whole of the 0.1.0 -> 0.2.0 conversion of params).
_PARAM_FIELDS = {
    "max-tokens": "max_tokens",
    "repeat-penalty": "repeat_penalty",
    "repeat-penalty-last-n-token-count": "repeat_penalty_last_n_token_count",
    "stop": "stop",
    "temperature": "temperature",
    "top-k": "top_k",
    "top-p": "top_p",
    "seed": "seed",
}
_PARAM_FIELDS_0_2 = {
    "constraint": "constraint",
    "logprobs": "logprobs",
    "frequency-penalty": "frequency_penalty",
    "presence-penalty": "presence_penalty",
    "logit-bias": "logit_bias",
}
_F32_FIELDS = ("repeat_penalty", "temperature", "top_p", "frequency_penalty", "presence_penalty")
_MISSING = object()


def params_from_wit(record: Any | None) -> domain.InferencingParams:
    """`option<inferencing-params>` -> validated params; `none` means the documented defaults.

    Raises `InvalidInput` naming the field for out-of-range values (NaN, empty stops, ...): the one place guest
    params are checked (`InferencingParams` validates when constructed).
    """
    if record is None:
        return domain.DEFAULT_PARAMS
    values = {attr: getattr(record, wit_name) for wit_name, attr in _PARAM_FIELDS.items()}
    for wit_name, attr in _PARAM_FIELDS_0_2.items():
        value = getattr(record, wit_name, _MISSING)
        if value is not _MISSING:
            values[attr] = value
    values["stop"] = tuple(values["stop"])
    for name in _F32_FIELDS:
        if name in values:
            values[name] = shortest_f32(values[name])
    if values.get("constraint") is not None:
        values["constraint"] = constraint_from_wit(values["constraint"])
    if "logit_bias" in values:
        values["logit_bias"] = tuple(
            domain.LogitBias(token_id=int(getattr(e, "token-id")), bias=shortest_f32(float(e.bias)))
            for e in values["logit_bias"]
        )
    return domain.InferencingParams(**values)


def constraint_from_wit(value: Any) -> domain.Constraint:
    """The WIT variant `constraint` (lifted as `Variant(tag, payload)`) -> `Constraint`."""
    tag, payload = (value.tag, value.payload) if isinstance(value, Variant) else (str(value), None)
    if tag == "choice":
        return domain.Constraint.choice(tuple(str(option) for option in payload or ()))
    if tag == "json-object":
        return domain.Constraint.json_object()
    if tag in ("json-schema", "regex", "grammar"):
        return domain.Constraint(kind=tag, text=str(payload))
    raise InvalidInput(f"unknown constraint kind {tag!r}")


def constraint_to_wit(constraint: domain.Constraint) -> Variant:
    if constraint.kind == "choice":
        return Variant("choice", list(constraint.options))
    if constraint.kind == "json-object":
        return Variant("json-object")
    return Variant(constraint.kind, constraint.text)


def shortest_f32(value: float) -> float:
    """The shortest decimal with the same f32 value: a guest's 0.8 arrives as 0.800000011920929, and messages,
    logs and equality checks should see 0.8, as the guest wrote it."""
    try:
        exact = struct.pack("<f", value)
    except OverflowError:  # not an f32 at all (only possible from Python callers)
        return value
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        try:
            if struct.pack("<f", candidate) == exact:
                return candidate
        except OverflowError:  # rounding near the largest f32 can step past it
            continue
    return value  # NaN payloads and the like: keep as is (validation rejects NaN anyway)


def params_to_wit(params: domain.InferencingParams) -> Record:
    """The inverse of `params_from_wit` (used by tests and by host-side callers of guest exports)."""
    values = {wit_name: getattr(params, attr) for wit_name, attr in {**_PARAM_FIELDS, **_PARAM_FIELDS_0_2}.items()}
    values["stop"] = list(values["stop"])
    if params.constraint is not None:
        values["constraint"] = constraint_to_wit(params.constraint)
    values["logit-bias"] = [abi.record({"token-id": e.token_id, "bias": e.bias}) for e in params.logit_bias]
    return abi.record(values)


def usage_to_wit(usage: domain.Usage) -> Record:
    return abi.record(
        {
            "prompt-token-count": abi.u32(usage.prompt_token_count, "prompt-token-count"),
            "generated-token-count": abi.u32(usage.generated_token_count, "generated-token-count"),
        }
    )


def inference_result_to_wit(result: domain.InferenceResult) -> Record:
    # `logprobs` is a 0.2.0 field: lowering reads only the fields of the component's own type, so a 0.1.0
    # component gets the same record without it.
    return abi.record(
        {
            "finish-reason": result.finish_reason.value,
            "text": abi.string_to_wit(result.text),
            "usage": usage_to_wit(result.usage),
            "logprobs": logprobs_to_wit(result.logprobs),
        }
    )


def logprobs_to_wit(entries: Iterable[domain.TokenLogprob]) -> list[Record]:
    return [
        abi.record(
            {
                "token-id": abi.u32(entry.token_id, "token id"),
                "bytes": entry.bytes,
                "logprob": entry.logprob,
                "top": top_logprobs_to_wit(entry.top),
            }
        )
        for entry in entries
    ]


def optional_logprobs_to_wit(entries: Iterable[domain.TokenLogprob | None]) -> list[Record | None]:
    """`list<option<token-logprob>>`: `None` stays `none`."""
    return [None if entry is None else logprobs_to_wit([entry])[0] for entry in entries]


def top_logprobs_to_wit(entries: Iterable[domain.TopLogprob]) -> list[Record]:
    return [
        abi.record({"token-id": abi.u32(top.token_id, "token id"), "bytes": top.bytes, "logprob": top.logprob})
        for top in entries
    ]


def tokens_to_wit(tokens: Iterable[int]) -> list[int]:
    return [abi.u32(t, "token id") for t in tokens]


def model_info_to_wit(info: domain.ModelInfo) -> Record:
    return abi.record(
        {
            "name": abi.string_to_wit(info.name),
            "context-length": abi.u32(info.context_length, "context-length"),
            "vocab-size": abi.u32(info.vocab_size, "vocab-size"),
        }
    )


def embeddings_to_wit(result: domain.EmbeddingsResult) -> Record:
    usage = abi.record({"prompt-token-count": abi.u32(result.prompt_token_count, "prompt-token-count")})
    return abi.record({"embeddings": [[float(x) for x in vector] for vector in result.embeddings], "usage": usage})


def stream_event_to_wit(event: domain.StreamEvent | None) -> Variant | None:
    """`option<stream-event>`: `stream-event` is a tagged variant (both cases are records)."""
    if event is None:
        return None
    if isinstance(event, domain.StreamChunk):
        chunk = abi.record(
            {
                "text": abi.string_to_wit(event.text),
                "token-ids": tokens_to_wit(event.token_ids),
                "usage": usage_to_wit(event.usage),
                "logprobs": logprobs_to_wit(event.logprobs),
            }
        )
        return Variant("chunk", chunk)
    assert isinstance(event, domain.StreamDone)
    return Variant("done", abi.record({"finish-reason": event.finish_reason.value, "usage": usage_to_wit(event.usage)}))


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else min(max(0, round(seconds * 1000)), U64_MAX)


def model_status_to_wit(status: ModelStatus) -> Record:
    """`model-status` (0.2.5); `state` is the `model-state` enum (a plain string). Integers beyond their WIT type
    are clamped, not refused: `list-model-status` has no error case, so a value that failed to lower would trap."""
    return abi.record(
        {
            "name": abi.string_to_wit(status.name),
            "state": status.state,
            "memory-bytes": min(max(0, status.memory_bytes), U64_MAX),
            "in-use": min(max(0, status.in_use), U32_MAX),
            "idle-ms": _ms(status.idle_s),
            "keep-alive-ms": _ms(status.keep_alive_s),
            "unload-in-ms": _ms(status.unload_in_s),
        }
    )
