"""JSON Schemas of WIT types (pure: `WitType` descriptions in, dicts out), and how a tool's result is answered.

- records are objects with every field required, except `option<T>` fields, which may be left out (or null);
- lists are arrays; tuples fixed-length arrays; flags arrays of their names;
- enums are string enums;
- variants are `oneOf`, one `{"tag": CASE, "val": PAYLOAD}` object per case (`val` only where the case has one),
  as jco writes them in JavaScript;
- integers carry their range; `char` is a one-character string.
"""

from __future__ import annotations

from typing import Any

from llmhost.runtime.exports import INTEGER_RANGES, WitType

RESULT_KEY = "result"  # a structured result that is not an object is answered as {"result": value}


def json_schema(t: WitType) -> dict[str, Any]:
    kind = t["kind"]
    if kind in INTEGER_RANGES:
        low, high = INTEGER_RANGES[kind]
        return {"type": "integer", "minimum": low, "maximum": high}
    if kind in ("f32", "f64"):
        return {"type": "number"}
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "string":
        return {"type": "string"}
    if kind == "char":
        return {"type": "string", "minLength": 1, "maxLength": 1}
    if kind == "list":
        return {"type": "array", "items": json_schema(t["element"])}
    if kind == "tuple":
        n = len(t["elements"])
        return {"type": "array", "prefixItems": [json_schema(e) for e in t["elements"]], "minItems": n, "maxItems": n}
    if kind == "record":
        return object_schema(t["fields"])
    if kind == "enum":
        return {"type": "string", "enum": list(t["names"])}
    if kind == "flags":
        return {"type": "array", "items": {"type": "string", "enum": list(t["names"])}, "uniqueItems": True}
    if kind == "option":
        return {"anyOf": [json_schema(t["payload"]), {"type": "null"}]}
    if kind == "variant":
        return {"oneOf": [_case(name, payload) for name, payload in t["cases"]]}
    if kind == "result":
        cases = [("ok", t["ok"]), ("err", t["err"])]
        return {"oneOf": [_one_key(name, json_schema(p) if p is not None else {"type": "null"}) for name, p in cases]}
    raise ValueError(f"no JSON Schema for {kind}")


def _case(name: str, payload: WitType | None) -> dict[str, Any]:
    properties: dict[str, Any] = {"tag": {"const": name}}
    if payload is not None:
        properties["val"] = json_schema(payload)
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _one_key(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {name: schema}, "required": [name], "additionalProperties": False}


def object_schema(fields: list[tuple[str, WitType]] | list[list[Any]]) -> dict[str, Any]:
    """A record's (or a parameter list's) schema: every field required but `option<T>` ones."""
    properties = {str(name): json_schema(t) for name, t in fields}
    required = [str(name) for name, t in fields if t["kind"] != "option"]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def answer_type(result: WitType | None) -> tuple[WitType | None, bool]:
    """(the type of a successful answer, whether the function returns a `result`, whose `err` is a tool error)."""
    if result is not None and result["kind"] == "result":
        return result["ok"], True
    return result, False


def output_schema(ok: WitType | None) -> dict[str, Any] | None:
    """The tool's `outputSchema`: for a structured answer (anything but a string or nothing); an object's own
    schema, any other value wrapped as {"result": value}."""
    if ok is None or ok["kind"] in ("string", "char"):
        return None
    if ok["kind"] == "record":
        return json_schema(ok)
    return object_schema([(RESULT_KEY, ok)])


def structured(ok: WitType | None, value: Any) -> dict[str, Any] | None:
    """`structuredContent` for an answer of type `ok` (None where `output_schema` is None)."""
    if output_schema(ok) is None:
        return None
    return value if ok is not None and ok["kind"] == "record" else {RESULT_KEY: value}
