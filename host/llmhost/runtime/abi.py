"""The only module that knows wasmtime-py's dynamic component values.

WIT records are `wasmtime.component.Record` objects whose attributes are the WIT field names as written
(kebab-case: `getattr(rec, "max-tokens")`), enums are plain strings, options are `None` or the value, and
`result`/`variant` values are either the bare payload or `Variant(tag, payload)` depending on whether
wasmtime-py "tags" the type (see `ResultEncoder`). Everything else in the host works with `llmhost.domain.types`.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wasmtime import Engine
from wasmtime.component import (
    Component,
    ComponentInstanceType,
    FuncType,
    Record,
    ResourceAny,
    ResourceHost,
    ResultType,
    ValType,
    Variant,
    VariantType,
)

from llmhost import telemetry
from llmhost.domain.errors import InvalidInput, LlmError
from llmhost.domain.limits import U32_MAX
from llmhost.domain.types import (
    DEFAULT_PARAMS,
    BeamParams,
    ChatEvent,
    ChatMessage,
    ChatParams,
    ChatResult,
    ChatRole,
    Constraint,
    EmbeddingsResult,
    InferenceResult,
    InferencingParams,
    LogitBias,
    ModelInfo,
    StreamChunk,
    StreamDone,
    StreamEvent,
    TokenLogprob,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    TopLogprob,
    Usage,
)
from llmhost.grants.outbound.messages import OutboundRequest, OutboundResponse
from llmhost.runtime import lists
from llmhost.runtime.host_funcs import add_func

_log = logging.getLogger(__name__)
# Lists of bytes and numbers cross between host and guest in milliseconds instead of a ctypes call per element.
FAST_LISTS = lists.install()

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


def params_from_wit(record: Any | None) -> InferencingParams:
    """`option<inferencing-params>` -> validated params; `none` means the documented defaults.

    Raises `InvalidInput` naming the field for out-of-range values (NaN, empty stops, ...): the one place guest
    params are checked (`InferencingParams` validates when constructed).
    """
    if record is None:
        return DEFAULT_PARAMS
    values = {attr: getattr(record, wit_name) for wit_name, attr in _PARAM_FIELDS.items()}
    for wit_name, attr in _PARAM_FIELDS_0_2.items():
        value = getattr(record, wit_name, _MISSING)
        if value is not _MISSING:
            values[attr] = value
    values["stop"] = tuple(values["stop"])
    for name in _F32_FIELDS:
        if name in values:
            values[name] = _shortest_f32(values[name])
    if values.get("constraint") is not None:
        values["constraint"] = constraint_from_wit(values["constraint"])
    if "logit_bias" in values:
        values["logit_bias"] = tuple(
            LogitBias(token_id=int(getattr(e, "token-id")), bias=_shortest_f32(float(e.bias)))
            for e in values["logit_bias"]
        )
    return InferencingParams(**values)


def constraint_from_wit(value: Any) -> Constraint:
    """The WIT variant `constraint` (lifted as `Variant(tag, payload)`) -> `Constraint`."""
    tag, payload = (value.tag, value.payload) if isinstance(value, Variant) else (str(value), None)
    if tag == "choice":
        return Constraint.choice(tuple(str(option) for option in payload or ()))
    if tag == "json-object":
        return Constraint.json_object()
    if tag in ("json-schema", "regex", "grammar"):
        return Constraint(kind=tag, text=str(payload))
    raise InvalidInput(f"unknown constraint kind {tag!r}")


def constraint_to_wit(constraint: Constraint) -> Variant:
    if constraint.kind == "choice":
        return Variant("choice", list(constraint.options))
    if constraint.kind == "json-object":
        return Variant("json-object")
    return Variant(constraint.kind, constraint.text)


def _shortest_f32(value: float) -> float:
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


def params_to_wit(params: InferencingParams) -> Record:
    """The inverse of `params_from_wit` (used by tests and by host-side callers of guest exports)."""
    values = {wit_name: getattr(params, attr) for wit_name, attr in {**_PARAM_FIELDS, **_PARAM_FIELDS_0_2}.items()}
    values["stop"] = list(values["stop"])
    if params.constraint is not None:
        values["constraint"] = constraint_to_wit(params.constraint)
    values["logit-bias"] = [_record({"token-id": e.token_id, "bias": e.bias}) for e in params.logit_bias]
    return _record(values)


def _record(fields: Mapping[str, Any]) -> Record:
    record = Record()
    for name, value in fields.items():
        setattr(record, name, value)
    return record


def _u32(value: int, what: str) -> int:
    # An out-of-range integer would fail inside wasmtime's lowering, after our error handling, and trap the
    # guest; checking here turns an engine bug into a `runtime-error` instead.
    if not 0 <= value <= U32_MAX:
        raise ValueError(f"{what} {value} does not fit in a u32")
    return value


def string_to_wit(value: str) -> str:
    return _string(value)


def _string(value: str) -> str:
    # Lone surrogates cannot be lowered to a WIT string (same reason as `_u32`); raises UnicodeEncodeError.
    value.encode("utf-8")
    return value


def _safe_string(value: str) -> str:
    """For error messages, which must always lower: replace what cannot be encoded instead of raising."""
    return value.encode("utf-8", "replace").decode("utf-8")


def usage_to_wit(usage: Usage) -> Record:
    return _record(
        {
            "prompt-token-count": _u32(usage.prompt_token_count, "prompt-token-count"),
            "generated-token-count": _u32(usage.generated_token_count, "generated-token-count"),
        }
    )


def inference_result_to_wit(result: InferenceResult) -> Record:
    # `logprobs` is a 0.2.0 field: lowering reads only the fields of the component's own type, so a 0.1.0
    # component gets the same record without it.
    return _record(
        {
            "finish-reason": result.finish_reason.value,
            "text": _string(result.text),
            "usage": usage_to_wit(result.usage),
            "logprobs": logprobs_to_wit(result.logprobs),
        }
    )


def logprobs_to_wit(entries: Iterable[TokenLogprob]) -> list[Record]:
    return [
        _record(
            {
                "token-id": _u32(entry.token_id, "token id"),
                "bytes": entry.bytes,
                "logprob": entry.logprob,
                "top": top_logprobs_to_wit(entry.top),
            }
        )
        for entry in entries
    ]


def optional_logprobs_to_wit(entries: Iterable[TokenLogprob | None]) -> list[Record | None]:
    """`list<option<token-logprob>>`: `None` stays `none`."""
    return [None if entry is None else logprobs_to_wit([entry])[0] for entry in entries]


def top_logprobs_to_wit(entries: Iterable[TopLogprob]) -> list[Record]:
    return [
        _record({"token-id": _u32(top.token_id, "token id"), "bytes": top.bytes, "logprob": top.logprob})
        for top in entries
    ]


def tokens_to_wit(tokens: Iterable[int]) -> list[int]:
    return [_u32(t, "token id") for t in tokens]


def model_info_to_wit(info: ModelInfo) -> Record:
    return _record(
        {
            "name": _string(info.name),
            "context-length": _u32(info.context_length, "context-length"),
            "vocab-size": _u32(info.vocab_size, "vocab-size"),
        }
    )


def embeddings_to_wit(result: EmbeddingsResult) -> Record:
    usage = _record({"prompt-token-count": _u32(result.prompt_token_count, "prompt-token-count")})
    return _record({"embeddings": [[float(x) for x in vector] for vector in result.embeddings], "usage": usage})


def stream_event_to_wit(event: StreamEvent | None) -> Variant | None:
    """`option<stream-event>`: `stream-event` is a tagged variant (both cases are records)."""
    if event is None:
        return None
    if isinstance(event, StreamChunk):
        chunk = _record(
            {
                "text": _string(event.text),
                "token-ids": tokens_to_wit(event.token_ids),
                "usage": usage_to_wit(event.usage),
                "logprobs": logprobs_to_wit(event.logprobs),
            }
        )
        return Variant("chunk", chunk)
    assert isinstance(event, StreamDone)
    return Variant("done", _record({"finish-reason": event.finish_reason.value, "usage": usage_to_wit(event.usage)}))


def own_resource(rep: int, type_id: int) -> ResourceHost:
    """A new owned handle to a host resource, to return to a guest."""
    return ResourceHost.own(rep, type_id)


def resource_rep(store: Any, handle: ResourceAny) -> int:
    """The host's integer behind a handle the guest passed (a method's `self`). Consuming the borrow here is
    required: wasmtime fails the call if a borrowed handle is still unconsumed when the method returns."""
    return int(handle.to_host(store).rep)


# The case a host bug (an error of a kind the type lacks) is reported as, by the first of these the type has: llm's
# `runtime-error`, wasi:keyvalue's `other`, outbound-http's `connection`, wasi:config's `upstream`.
FALLBACK_CASES = ("runtime-error", "other", "connection", "upstream")


@dataclass(frozen=True)
class ErrorEncoder:
    """Builds values of the WIT `error` variant from `LlmError`s.

    `cases` maps each case name to whether it carries a payload (the message), as the WIT type says.
    """

    cases: Mapping[str, bool] = field(
        default_factory=lambda: {"model-not-supported": False, "runtime-error": True, "invalid-input": True}
    )
    # The case for errors whose kind the type lacks (host bugs): `runtime-error`, or else the type's first case
    # (an error type of another interface, e.g. http's `write-error`).
    fallback: str = "runtime-error"

    @classmethod
    def from_wit(cls, error_type: ValType) -> ErrorEncoder:
        if not isinstance(error_type, VariantType) or not error_type._tagged():
            # An untagged variant would be picked by the payload's Python class, which cannot tell two string
            # cases apart: refuse at link time rather than send the wrong case.
            raise TypeError("the WIT `error` type must be a variant with string payloads")
        cases = {name: payload is not None for name, payload in error_type.cases}
        return cls(cases, next((c for c in FALLBACK_CASES if c in cases), next(iter(cases))))

    def encode(self, error: LlmError) -> Variant:
        kind = error.kind if error.kind in self.cases else self.fallback
        if self.cases[kind]:
            return Variant(kind, _safe_string(error.message))
        return Variant(kind)


@dataclass(frozen=True)
class ResultEncoder:
    """Builds values of one function's `result<T, error>` type.

    wasmtime-py lowers a result by looking at the Python class of the value when the `ok` and `err` cases hold
    different classes (e.g. a `Record` vs a `Variant`), and needs `Variant("ok"|"err", payload)` when they
    could hold the same class ("tagged"). Which one applies is read from the function's real WIT type.
    """

    tagged: bool
    errors: ErrorEncoder = field(default_factory=ErrorEncoder)

    @classmethod
    def from_wit(cls, result_type: ValType | None) -> ResultEncoder:
        if not isinstance(result_type, ResultType) or result_type.err is None:
            raise TypeError("expected a function returning result<T, error>")
        # `_tagged()` is private API of wasmtime-py: it is the exact rule its lowering uses, and the version is
        # pinned (wasmtime==50.0.1); tests/unit/test_abi.py and the guest tests fail loudly if it changes.
        return cls(tagged=result_type._tagged(), errors=ErrorEncoder.from_wit(result_type.err))

    def ok(self, payload: Any) -> Any:
        return Variant("ok", payload) if self.tagged else payload

    def err(self, error: LlmError) -> Any:
        value = self.errors.encode(error)
        return Variant("err", value) if self.tagged else value


def error_tag_and_message(value: Any) -> tuple[str, str | None]:
    """Read a WIT `error` value (as wasmtime-py lifts it) back: (case name, message or None)."""
    if isinstance(value, Variant) and value.tag == "err":
        value = value.payload
    if not isinstance(value, Variant):
        raise TypeError(f"not a WIT error variant: {value!r}")
    return value.tag, value.payload


def imported_functions(component: Component, engine: Engine, interface: str) -> dict[str, FuncType]:
    """The functions of `interface` that `component` imports, with their WIT types (empty if not imported)."""
    imports = component.type.imports(engine)
    if interface not in imports:
        return {}
    instance_type = imports[interface].ty
    if not isinstance(instance_type, ComponentInstanceType):
        return {}
    exports = instance_type.exports(engine)
    return {name: item.ty for name, item in exports.items() if isinstance(item.ty, FuncType)}


# A function of an interface: the domain function (`fn(store, *wit_args)`) and how its result becomes WIT.
Binding = tuple[Callable[..., Any], Callable[[Any], Any]]


def define_functions(
    instance: Any,
    imported: Mapping[str, Any],
    fallible: Mapping[str, Binding],
    plain: Mapping[str, Callable[..., Any]] | None = None,
    scrub: Callable[[str], str] | None = None,
    traced: str | None = None,
) -> None:
    """Register, typed by the component's own imports, each imported function found in `fallible` (wrapped by
    `guarded`: its `LlmError`s become the WIT `err` value) or in `plain` (functions with no error case, which
    must not raise). A function the component imports but the host does not know is left undefined:
    instantiation then fails with wasmtime's message naming it. `traced`: the interface's name in the spans of
    its fallible calls (when tracing is on)."""
    for name, func_type in imported.items():
        if name in fallible:
            function, to_wit = fallible[name]
            function = telemetry.host_call(traced, name, function) if traced is not None else function
            encoder = ResultEncoder.from_wit(func_type.result)
            add_func(instance, name, guarded(function, to_wit, encoder, with_store=True, scrub=scrub), func_type)
        elif plain is not None and name in plain:
            add_func(instance, name, plain[name], func_type)


def guarded(
    function: Callable[..., Any],
    to_wit: Callable[[Any], Any],
    encoder: ResultEncoder,
    *,
    with_store: bool = False,
    scrub: Callable[[str], str] | None = None,
) -> Callable[..., Any]:
    """Wrap a domain function as a host function (`fn(store, *wit_args)`) that never raises.

    `with_store`: pass the store on as the first argument (resource methods need it to read their handle).

    A Python exception escaping a host function traps the guest, so expected failures (`LlmError`) become the
    WIT `err` value, and anything else becomes `runtime-error` with the message and is logged with its
    traceback, since it is a host bug. `scrub`: what every message goes through first (the component's secrets,
    values from `{ env = ... }`, never leave the host in text).
    """
    clean = scrub if scrub is not None else (lambda text: text)

    def host_function(store: Any, *args: Any) -> Any:
        try:
            return encoder.ok(to_wit(function(store, *args) if with_store else function(*args)))
        except LlmError as error:
            return encoder.err(error.scrubbed(clean) if scrub is not None else error)
        except Exception as error:  # every failure must become a value, not a trap
            message = clean(f"internal host error: {type(error).__name__}: {error}")
            _log.error("%s", message, exc_info=scrub is None)  # a traceback may quote a secret: none then
            return encoder.err(LlmError(message))

    return host_function


# -- wasi:keyvalue (wit/deps/keyvalue) -----------------------------------------------------------------------------


def key_response_to_wit(keys: Iterable[str], cursor: str | None) -> Record:
    """`store.key-response`: one page of keys, and the cursor of the next (none: the last page)."""
    return _record({"keys": [_string(key) for key in keys], "cursor": cursor})


def key_values_from_wit(pairs: Iterable[Any]) -> list[tuple[str, bytes]]:
    """`list<tuple<string, list<u8>>>` -> (key, value) pairs."""
    return [(str(key), bytes(value)) for key, value in pairs]


def optional_key_values_to_wit(pairs: Iterable[tuple[str, bytes] | None]) -> list[tuple[str, bytes] | None]:
    """`list<option<tuple<string, list<u8>>>>` (batch `get-many`)."""
    return [None if pair is None else (_string(pair[0]), bytes(pair[1])) for pair in pairs]


@dataclass(frozen=True)
class CasSwapEncoder:
    """Values of `atomics.swap`'s `result<_, cas-error>`, where `cas-error` is `store-error(error)` or `cas-failed(cas)`
    (an untagged variant in wasmtime-py: the payload's class picks the case), so `ResultEncoder` cannot build it."""

    tagged: bool  # the result
    cas_error_tagged: bool
    errors: ErrorEncoder

    @classmethod
    def from_wit(cls, result_type: ValType | None) -> CasSwapEncoder:
        if not isinstance(result_type, ResultType) or not isinstance(result_type.err, VariantType):
            raise TypeError("expected swap's result<_, cas-error>")
        store_error = dict(result_type.err.cases).get("store-error")
        if store_error is None:
            raise TypeError("expected swap's cas-error to have a store-error case")
        return cls(result_type._tagged(), result_type.err._tagged(), ErrorEncoder.from_wit(store_error))

    def ok(self) -> Any:
        return Variant("ok", None) if self.tagged else None

    def store_error(self, error: LlmError) -> Any:
        value = self.errors.encode(error)
        return self._err(Variant("store-error", value) if self.cas_error_tagged else value)

    def cas_failed(self, cas: ResourceHost) -> Any:
        return self._err(Variant("cas-failed", cas) if self.cas_error_tagged else cas)

    def _err(self, value: Any) -> Any:
        return Variant("err", value) if self.tagged else value


# -- HTTP (wit/http.wit): requests, responses and the response-writer handle -------------------------------------

HttpFields = list[tuple[str, str]]


def http_request_to_wit(method: str, path_with_query: str, headers: HttpFields, body: bytes) -> Record:
    """The WIT `http.request` record passed to `handler.handle`."""
    return _record(
        {
            "method": _string(method),
            "path-with-query": _string(path_with_query),
            "headers": http_fields_to_wit(headers),
            "body": bytes(body),
        }
    )


def http_fields_from_wit(value: Any) -> HttpFields:
    """`fields` (a list of string pairs) -> a list of `(name, value)` tuples."""
    return [(str(name), str(field_value)) for name, field_value in value]


def http_fields_to_wit(fields: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """`(name, value)` pairs -> WIT `fields` (`http` and `outbound-http` alike)."""
    return [(_string(name), _string(value)) for name, value in fields]


def http_response_from_wit(value: Any) -> tuple[int, HttpFields, bytes]:
    """The `http.response` record `handler.handle` returned -> (status, headers, body)."""
    return int(value.status), http_fields_from_wit(value.headers), bytes(value.body)


def borrow_resource(rep: int, type_id: int) -> ResourceHost:
    """A borrowed handle to a host resource, to pass to a guest export for the duration of one call."""
    return ResourceHost.borrow(rep, type_id)


# -- chat (wit/llm.wit, 0.2.0) ------------------------------------------------------------------------------------


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
        inferencing=params_from_wit(value.inferencing),
        tools=tools_from_wit(value.tools),
        tool_choice=ToolChoice(kind=tag, name=payload),
    )


def chat_message_to_wit(message: ChatMessage) -> Record:
    return _record(
        {
            "role": message.role.value,
            "content": None if message.content is None else _string(message.content),
            "tool-calls": [
                _record({"id": _string(c.id), "name": _string(c.name), "arguments": _string(c.arguments)})
                for c in message.tool_calls
            ],
            "tool-call-id": None if message.tool_call_id is None else _string(message.tool_call_id),
        }
    )


def chat_result_to_wit(result: ChatResult) -> Record:
    return _record(
        {
            "message": chat_message_to_wit(result.message),
            "finish-reason": result.finish_reason.value,
            "usage": usage_to_wit(result.usage),
            "logprobs": logprobs_to_wit(result.logprobs),
        }
    )


def chat_event_to_wit(event: ChatEvent | None) -> Variant | None:
    """`option<chat-event>`."""
    if event is None:
        return None
    if isinstance(event, ToolCallDelta):
        delta = _record(
            {
                "index": _u32(event.index, "index"),
                "id": None if event.id is None else _string(event.id),
                "name": None if event.name is None else _string(event.name),
                "arguments": _string(event.arguments),
            }
        )
        return Variant("tool-call", delta)
    wrapped = stream_event_to_wit(event)
    assert wrapped is not None
    return Variant("content", wrapped.payload) if wrapped.tag == "chunk" else wrapped


def beam_params_from_wit(value: Any) -> BeamParams:
    """Validated (`check_beam_params`): raises `InvalidInput` naming the field."""
    return BeamParams(
        width=int(value.width),
        max_tokens=int(getattr(value, "max-tokens")),
        stop=tuple(str(s) for s in value.stop),
        length_penalty=_shortest_f32(float(getattr(value, "length-penalty"))),
    )


def beam_to_wit(sequence: ResourceHost, score: float) -> Record:
    return _record({"sequence": sequence, "score": float(score)})


# -- outbound HTTP (wit/outbound-http.wit, 0.2.3): the request a guest sends, the response it gets -----------------


def outbound_request_from_wit(value: Any) -> OutboundRequest:
    """The WIT `outbound-http.request` record -> `OutboundRequest` (checked by `grants.outbound.policy`)."""
    timeout_ms = getattr(value, "timeout-ms")
    return OutboundRequest(
        method=str(value.method),
        url=str(value.url),
        headers=tuple(http_fields_from_wit(value.headers)),
        body=None if value.body is None else bytes(value.body),
        timeout_s=None if timeout_ms is None else int(timeout_ms) / 1000,
    )


def outbound_response_to_wit(response: OutboundResponse) -> Record:
    return _record(
        {
            "status": response.status,
            "headers": http_fields_to_wit(response.headers),
            "body": bytes(response.body),
        }
    )


def streamed_response_to_wit(response: OutboundResponse, body: ResourceHost) -> Record:
    """0.2.4's `streamed-response`: the status and headers, the body as an `incoming-body` handle."""
    return _record({"status": response.status, "headers": http_fields_to_wit(response.headers), "body": body})
