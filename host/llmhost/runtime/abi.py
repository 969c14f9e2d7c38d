"""The only module that knows wasmtime-py's dynamic component values, generically.

WIT records are `wasmtime.component.Record` objects whose attributes are the WIT field names as written
(kebab-case: `getattr(rec, "max-tokens")`), enums are plain strings, options are `None` or the value, and
`result`/`variant` values are either the bare payload or `Variant(tag, payload)` depending on whether
wasmtime-py "tags" the type (see `ResultEncoder`).

Here: the generic lowering (records, strings, u32s, resources, HTTP fields), the result and error encoding, and
the registration of an interface's functions (`define_functions`, `guarded`). Each interface's own converters
(WIT values <-> `llmhost.domain.types` and the grants' messages) live beside it in `llmhost.interfaces`
(`llm_values.py`, `chat.py`, `sequences.py`, `keyvalue.py`, `outbound_http.py`), so `runtime` knows no domain
type and nothing of `grants`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
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
from llmhost.domain.errors import LlmError
from llmhost.domain.limits import U32_MAX
from llmhost.runtime import lists
from llmhost.runtime.host_funcs import add_func

_log = logging.getLogger(__name__)
# Lists of bytes and numbers cross between host and guest in milliseconds instead of a ctypes call per element.
FAST_LISTS = lists.install()


def record(fields: Mapping[str, Any]) -> Record:
    """A WIT record from its fields, named as the WIT writes them (kebab-case)."""
    value = Record()
    for name, field_value in fields.items():
        setattr(value, name, field_value)
    return value


def u32(value: int, what: str) -> int:
    # An out-of-range integer would fail inside wasmtime's lowering, after our error handling, and trap the
    # guest; checking here turns an engine bug into a `runtime-error` instead.
    if not 0 <= value <= U32_MAX:
        raise ValueError(f"{what} {value} does not fit in a u32")
    return value


def string_to_wit(value: str) -> str:
    # Lone surrogates cannot be lowered to a WIT string (same reason as `u32`); raises UnicodeEncodeError.
    value.encode("utf-8")
    return value


def _safe_string(value: str) -> str:
    """For error messages, which must always lower: replace what cannot be encoded instead of raising."""
    return value.encode("utf-8", "replace").decode("utf-8")


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


def borrow_resource(rep: int, type_id: int) -> ResourceHost:
    """A borrowed handle to a host resource, to pass to a guest export for the duration of one call."""
    return ResourceHost.borrow(rep, type_id)
