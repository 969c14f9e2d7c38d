"""A component's exported functions as plain data, and JSON values to and from wasmtime-py's dynamic values.

`llmhost mcp` serves every exported function as a tool. What it needs of the component (names, parameter and
result types, doc comments) is read once from the component's type, without an instance, into JSON-able
descriptions (`WitType` trees) that are cached beside the compiled component. `lower` turns a JSON argument into
the value wasmtime-py expects, checking it against the type and naming the field that does not fit; `lift` turns a
returned value back into JSON. (interfaces/llm_values.py does the same for the `llmhost:llm` types, whose shapes
it knows.)

A `WitType` is a dict: `{"kind": "string"}`, `{"kind": "u32"}`, `{"kind": "list", "element": T}`,
`{"kind": "record", "fields": [[name, T], ...]}`, `{"kind": "tuple", "elements": [T, ...]}`,
`{"kind": "enum" | "flags", "names": [...]}`, `{"kind": "variant", "cases": [[name, T | None], ...]}`,
`{"kind": "option", "payload": T}`, `{"kind": "result", "ok": T | None, "err": T | None}`; the last three also
carry `tagged` (whether wasmtime-py wraps their values in `Variant`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from wasmtime import Engine
from wasmtime.component import (
    Bool,
    Char,
    Component,
    ComponentInstanceType,
    EnumType,
    FlagsType,
    FuncType,
    ListType,
    OptionType,
    Record,
    RecordType,
    ResultType,
    String,
    TupleType,
    ValType,
    Variant,
    VariantType,
)

from llmhost.runtime.numbers import NUMBER_TYPES

WitType = dict[str, Any]

INTEGER_RANGES = {
    "u8": (0, 2**8 - 1),
    "u16": (0, 2**16 - 1),
    "u32": (0, 2**32 - 1),
    "u64": (0, 2**64 - 1),
    "s8": (-(2**7), 2**7 - 1),
    "s16": (-(2**15), 2**15 - 1),
    "s32": (-(2**31), 2**31 - 1),
    "s64": (-(2**63), 2**63 - 1),
}
_SCALARS: dict[type, str] = {Bool: "bool", Char: "char", String: "string", **NUMBER_TYPES}


class UnsupportedType(Exception):
    """A type that has no JSON form (resources, futures, streams)."""


class ArgumentError(Exception):
    """A JSON value that does not fit its WIT type; `path` names the field (`opts.max-words`, `tags[2]`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def describe(t: ValType) -> WitType:
    """The `WitType` of a wasmtime-py type (raises `UnsupportedType` for resources, futures and streams)."""
    scalar = _SCALARS.get(type(t))
    if scalar is not None:
        return {"kind": scalar}
    if isinstance(t, ListType):
        return {"kind": "list", "element": describe(t.element)}
    if isinstance(t, RecordType):
        return {"kind": "record", "fields": [[name, describe(f)] for name, f in t.fields]}
    if isinstance(t, TupleType):
        return {"kind": "tuple", "elements": [describe(e) for e in t.elements]}
    if isinstance(t, EnumType):
        return {"kind": "enum", "names": list(t.names)}
    if isinstance(t, FlagsType):
        return {"kind": "flags", "names": list(t.names)}
    # `_tagged()` is wasmtime-py's own rule for wrapping values in `Variant` (see abi.ResultEncoder).
    if isinstance(t, OptionType):
        return {"kind": "option", "payload": describe(t.payload), "tagged": t._tagged()}
    if isinstance(t, ResultType):
        ok, err = t.ok, t.err
        return {
            "kind": "result",
            "ok": describe(ok) if ok is not None else None,
            "err": describe(err) if err is not None else None,
            "tagged": t._tagged(),
        }
    if isinstance(t, VariantType):
        cases = [[name, describe(p) if p is not None else None] for name, p in t.cases]
        return {"kind": "variant", "cases": cases, "tagged": t._tagged()}
    raise UnsupportedType(type(t).__name__)


@dataclass(frozen=True)
class ExportedFunction:
    """One exported function: `interface` is None for a function the world exports directly."""

    name: str
    interface: str | None
    params: list[tuple[str, WitType]]
    result: WitType | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "interface": self.interface, "params": self.params, "result": self.result}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExportedFunction:
        params = [(str(name), t) for name, t in data["params"]]
        return cls(str(data["name"]), data["interface"], params, data["result"])


def exported_functions(
    component: Component, engine: Engine, skip: frozenset[str] = frozenset()
) -> tuple[list[ExportedFunction], list[str]]:
    """The functions `component` exports (directly, or in exported interfaces), except the exports named in
    `skip`; and the names of those skipped because a type has no JSON form."""
    found: list[ExportedFunction] = []
    unsupported: list[str] = []

    def add(name: str, interface: str | None, ty: FuncType) -> None:
        try:
            params = [(param, describe(t)) for param, t in ty.params]
            result = ty.result
            found.append(ExportedFunction(name, interface, params, describe(result) if result is not None else None))
        except UnsupportedType:
            unsupported.append(f"{interface}#{name}" if interface else name)

    for name, item in component.type.exports(engine).items():
        if name in skip:
            continue
        ty = item.ty
        if isinstance(ty, FuncType):
            add(name, None, ty)
        elif isinstance(ty, ComponentInstanceType):
            for function, member in ty.exports(engine).items():
                if isinstance(member.ty, FuncType):
                    add(function, name, member.ty)
    return found, unsupported


def export_index(component: Component, function: ExportedFunction) -> Any:
    parent = component.get_export_index(function.interface) if function.interface else None
    index = component.get_export_index(function.name, parent)
    if index is None:
        raise LookupError(f"the component does not export {function.name}")
    return index


# --- JSON -> wasmtime-py values ------------------------------------------------------------------------------


def _where(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def lower(value: Any, t: WitType, path: str) -> Any:
    """`value` (parsed JSON) as wasmtime-py takes a value of type `t`; raises `ArgumentError` naming `path`."""
    kind = t["kind"]
    if kind in INTEGER_RANGES:
        low, high = INTEGER_RANGES[kind]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ArgumentError(path, f"expected an integer from {low} to {high} ({kind}), got {value!r}")
        return value
    if kind in ("f32", "f64"):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ArgumentError(path, f"expected a number, got {_type_name(value)}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ArgumentError(path, f"expected true or false, got {_type_name(value)}")
        return value
    if kind in ("string", "char"):
        if not isinstance(value, str) or (kind == "char" and len(value) != 1):
            expected = "a string" if kind == "string" else "a string of one character"
            raise ArgumentError(path, f"expected {expected}, got {value!r}")
        return value
    if kind == "list":
        if not isinstance(value, list):
            raise ArgumentError(path, f"expected an array, got {_type_name(value)}")
        items = [lower(item, t["element"], f"{path}[{i}]") for i, item in enumerate(value)]
        return bytes(items) if t["element"]["kind"] == "u8" else items
    if kind == "tuple":
        n = len(t["elements"])
        if not isinstance(value, list) or len(value) != n:
            raise ArgumentError(path, f"expected an array of {n} items")
        pairs = zip(value, t["elements"], strict=True)
        return tuple(lower(item, e, f"{path}[{i}]") for i, (item, e) in enumerate(pairs))
    if kind == "record":
        return _lower_record(value, t, path)
    if kind == "enum":
        if value not in t["names"]:
            raise ArgumentError(path, f"expected one of {', '.join(t['names'])}, got {value!r}")
        return value
    if kind == "flags":
        if not isinstance(value, list) or any(v not in t["names"] for v in value):
            raise ArgumentError(path, f"expected an array of flags from {', '.join(t['names'])}")
        return set(value)
    if kind == "option":
        if value is None:
            return Variant("none") if t["tagged"] else None
        inner = lower(value, t["payload"], path)
        return Variant("some", inner) if t["tagged"] else inner
    if kind == "variant":
        return _lower_variant(value, t, path)
    if kind == "result":
        cases = [["ok", t["ok"]], ["err", t["err"]]]
        if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ("ok", "err"):
            raise ArgumentError(path, 'expected {"ok": ...} or {"err": ...}')
        tag = next(iter(value))
        payload_type = dict(cases)[tag]
        payload = lower(value[tag], payload_type, _where(path, tag)) if payload_type is not None else None
        return Variant(tag, payload) if t["tagged"] else payload
    raise ArgumentError(path, f"values of type {kind} cannot be given")


def _lower_record(value: Any, t: WitType, path: str) -> Record:
    if not isinstance(value, dict):
        raise ArgumentError(path, f"expected an object, got {_type_name(value)}")
    names = {name for name, _ in t["fields"]}
    for key in value:
        if key not in names:
            raise ArgumentError(_where(path, key), f"unknown field (expected: {', '.join(sorted(names))})")
    record = Record()
    for name, field_type in t["fields"]:
        where = _where(path, name)
        if name not in value:
            if field_type["kind"] != "option":
                raise ArgumentError(where, "missing (required)")
            setattr(record, name, lower(None, field_type, where))
        else:
            setattr(record, name, lower(value[name], field_type, where))
    return record


def _lower_variant(value: Any, t: WitType, path: str) -> Any:
    cases = {name: payload for name, payload in t["cases"]}
    if not isinstance(value, dict) or value.get("tag") not in cases:
        raise ArgumentError(path, f'expected {{"tag": one of {", ".join(cases)}, "val": ...}}')
    tag, payload_type = value["tag"], cases[value["tag"]]
    extra = set(value) - {"tag", "val"}
    if extra:
        raise ArgumentError(_where(path, sorted(extra)[0]), "unknown field (expected: tag, val)")
    if payload_type is None:
        if "val" in value:
            raise ArgumentError(_where(path, "val"), f"case {tag} carries no value")
        return Variant(tag) if t["tagged"] else None
    if "val" not in value:
        raise ArgumentError(_where(path, "val"), f"missing (case {tag} carries a value)")
    payload = lower(value["val"], payload_type, _where(path, "val"))
    return Variant(tag, payload) if t["tagged"] else payload


# --- wasmtime-py values -> JSON ------------------------------------------------------------------------------


def lift(value: Any, t: WitType) -> Any:
    """A value wasmtime-py returned for type `t`, as JSON."""
    kind = t["kind"]
    if kind in ("f32", "f64"):
        return value if math.isfinite(value) else None  # JSON has no NaN or infinities
    if kind == "list":
        return [lift(item, t["element"]) for item in value]
    if kind == "tuple":
        return [lift(item, e) for item, e in zip(value, t["elements"], strict=True)]
    if kind == "record":
        return {name: lift(getattr(value, name), f) for name, f in t["fields"]}
    if kind == "flags":
        return sorted(value)
    if kind == "option":
        if t["tagged"]:
            return lift(value.payload, t["payload"]) if value.tag == "some" else None
        return None if value is None else lift(value, t["payload"])
    if kind in ("variant", "result"):
        tag, payload, payload_type = case_of(value, t)
        if kind == "result":
            return {tag: lift(payload, payload_type) if payload_type is not None else None}
        return {"tag": tag, "val": lift(payload, payload_type)} if payload_type is not None else {"tag": tag}
    return value


def case_of(value: Any, t: WitType) -> tuple[str, Any, WitType | None]:
    """(case name, payload, payload type) of a returned variant or result value."""
    cases: list[tuple[str, WitType | None]] = (
        [("ok", t["ok"]), ("err", t["err"])] if t["kind"] == "result" else [(n, p) for n, p in t["cases"]]
    )
    if t["tagged"]:
        payload_type = dict(cases)[value.tag]
        return value.tag, value.payload, payload_type
    # Untagged: wasmtime-py returned the bare payload, and each case's Python classes differ (its own rule).
    for name, payload_type in cases:
        if payload_type is None:
            if value is None:
                return name, None, None
        elif isinstance(value, _classes(payload_type)):
            return name, value, payload_type
    raise ValueError(f"no case of the type fits {value!r}")


def _classes(t: WitType) -> tuple[type, ...]:
    """The Python classes wasmtime-py lifts values of `t` to (its `add_classes`)."""
    kind = t["kind"]
    if kind in INTEGER_RANGES:
        return (int,)
    simple: dict[str, tuple[type, ...]] = {
        "bool": (bool,),
        "f32": (float,),
        "f64": (float,),
        "char": (str,),
        "string": (str,),
        "enum": (str,),
        "record": (Record,),
        "tuple": (tuple,),
        "flags": (set,),
        "list": (bytes,) if kind == "list" and t["element"]["kind"] == "u8" else (list,),
    }
    if kind in simple:
        return simple[kind]
    if t.get("tagged"):
        return (Variant,)
    payloads = [t["payload"]] if kind == "option" else [p for p in _payloads(t) if p is not None]
    classes: tuple[type, ...] = ()
    for payload in payloads:
        classes += _classes(payload)
    return classes


def _payloads(t: WitType) -> list[WitType | None]:
    return [t["ok"], t["err"]] if t["kind"] == "result" else [p for _, p in t["cases"]]
