"""The pure parts of `llmhost mcp`: JSON Schemas of WIT types, JSON arguments checked and lowered (errors name the
field), returned values lifted, tool names, and the doc comments a build stores in the component."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from wasmtime.component import Record, Variant

from llmhost.mcp.schema import json_schema, object_schema, output_schema, structured
from llmhost.mcp.tools import TOOLS_CACHE_FORMAT, ToolAnswer, answer, describe, lower_arguments, tool_names
from llmhost.runtime.exports import ArgumentError, ExportedFunction, lift, lower
from llmhost.toolchains.wit_docs import export_docs, read_docs, with_docs, world_names

U8: dict[str, Any] = {"kind": "u8"}
S16: dict[str, Any] = {"kind": "s16"}
STRING: dict[str, Any] = {"kind": "string"}
TONE: dict[str, Any] = {"kind": "enum", "names": ["plain", "formal"]}
TARGET: dict[str, Any] = {"kind": "variant", "cases": [["words", {"kind": "u32"}], ["whole", None]], "tagged": True}
NOTE: dict[str, Any] = {"kind": "option", "payload": STRING, "tagged": False}
OPTIONS: dict[str, Any] = {
    "kind": "record",
    "fields": [["tone", TONE], ["target", TARGET], ["tags", {"kind": "list", "element": STRING}], ["note", NOTE]],
}
RESULT: dict[str, Any] = {"kind": "result", "ok": OPTIONS, "err": STRING, "tagged": False}


def test_schemas_follow_the_wit_types() -> None:
    assert json_schema(U8) == {"type": "integer", "minimum": 0, "maximum": 255}
    assert json_schema(S16) == {"type": "integer", "minimum": -32768, "maximum": 32767}
    assert json_schema(TONE) == {"type": "string", "enum": ["plain", "formal"]}
    schema = json_schema(OPTIONS)
    assert schema["required"] == ["tone", "target", "tags"] and schema["additionalProperties"] is False
    assert schema["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    words, whole = schema["properties"]["target"]["oneOf"]
    assert words["required"] == ["tag", "val"] and whole["required"] == ["tag"]
    jsonschema.Draft202012Validator.check_schema(schema)


def test_output_schema_only_for_structured_answers() -> None:
    assert output_schema(STRING) is None and output_schema(None) is None
    assert output_schema(OPTIONS) == json_schema(OPTIONS)
    wrapped = output_schema({"kind": "list", "element": U8})
    assert wrapped is not None and wrapped["required"] == ["result"]
    assert structured({"kind": "list", "element": U8}, [1, 2]) == {"result": [1, 2]}


@st.composite
def options_values(draw: st.DrawFn) -> dict[str, Any]:
    target = draw(
        st.one_of(st.builds(lambda n: {"tag": "words", "val": n}, st.integers(0, 2**32 - 1)), st.just({"tag": "whole"}))
    )
    value = {"tone": draw(st.sampled_from(["plain", "formal"])), "target": target, "tags": draw(st.lists(st.text()))}
    note = draw(st.one_of(st.none(), st.text()))
    if note is not None or draw(st.booleans()):
        value["note"] = note
    return value


@given(options_values())
def test_what_the_schema_accepts_lowers_and_lifts_back(value: dict[str, Any]) -> None:
    jsonschema.validate(value, json_schema(OPTIONS))
    record = lower(value, OPTIONS, "options")
    assert isinstance(record, Record)
    assert lift(record, OPTIONS) == {"note": None, **value}


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        ({"tone": "loud", "target": {"tag": "whole"}, "tags": []}, "options.tone", "one of plain, formal"),
        ({"tone": "plain", "target": {"tag": "words"}, "tags": []}, "options.target.val", "missing"),
        ({"tone": "plain", "target": {"tag": "words", "val": -1}, "tags": []}, "options.target.val", "0 to 4294967295"),
        ({"tone": "plain", "target": {"tag": "whole"}, "tags": [1]}, "options.tags[0]", "a string"),
        ({"tone": "plain", "target": {"tag": "whole"}}, "options.tags", "missing"),
        ({"tone": "plain", "target": {"tag": "whole"}, "tags": [], "x": 1}, "options.x", "unknown field"),
        ([], "options", "an object"),
    ],
)
def test_arguments_that_do_not_fit_name_the_field(value: Any, path: str, message: str) -> None:
    with pytest.raises(ArgumentError) as raised:
        lower(value, OPTIONS, "options")
    assert raised.value.path == path and message in raised.value.message
    with pytest.raises(jsonschema.ValidationError):  # the schema the client was given refuses it too
        jsonschema.validate(value, json_schema(OPTIONS))


def test_parameters_are_checked_as_one_object() -> None:
    function = ExportedFunction("f", None, [("text", STRING), ("count", U8), ("note", NOTE)], None)
    assert lower_arguments(function, {"text": "a", "count": 3}) == ["a", 3, None]
    with pytest.raises(ArgumentError, match="count: expected an integer from 0 to 255"):
        lower_arguments(function, {"text": "a", "count": 256})
    with pytest.raises(ArgumentError, match="count: missing"):
        lower_arguments(function, {"text": "a"})
    assert object_schema(function.params)["required"] == ["text", "count"]


def test_results_answer_ok_or_a_tool_error() -> None:
    function = ExportedFunction("f", None, [], RESULT)
    record = lower({"tone": "plain", "target": {"tag": "whole"}, "tags": ["x"]}, OPTIONS, "")
    ok = answer(function, record)  # untagged: the bare payload, told apart by its Python class
    assert not ok.is_error and ok.structured == {
        "tone": "plain",
        "target": {"tag": "whole"},
        "tags": ["x"],
        "note": None,
    }
    assert answer(function, "it failed") == ToolAnswer("it failed", None, True)
    tagged = ExportedFunction("g", None, [], {"kind": "result", "ok": STRING, "err": STRING, "tagged": True})
    assert answer(tagged, Variant("ok", "fine")) == ToolAnswer("fine")
    assert answer(tagged, Variant("err", "bad")).is_error


def test_tool_names_are_qualified_only_where_they_clash() -> None:
    def f(name: str, interface: str | None = None) -> ExportedFunction:
        return ExportedFunction(name, interface, [], None)

    entries = [
        ("a", f("echo")),
        ("a", f("echo", "pkg:x/extra@0.1.0")),
        ("a", f("solo")),
        ("b", f("other")),
        ("b", f("solo")),
    ]
    assert tool_names(entries) == ["echo", "extra_echo", "a_solo", "other", "b_solo"]


WIT = """
package example:tools@0.1.0;

/// The world (not a tool).
world tools {
    import llmhost:llm/llm@0.2.2;
    record r {
        /// a field
        x: u32,
    }
    /// Summarize
    /// in two lines.
    export summarize: func(text: string) -> string;
    export undocumented: func();
    export text;
}

interface text {
    /// Count words.
    count: func(text: string) -> u32;
}
"""


def test_doc_comments_of_exported_functions() -> None:
    assert world_names([WIT]) == ["tools"]
    assert export_docs([WIT]) == {"summarize": "Summarize\nin two lines.", "text#count": "Count words."}


def test_docs_travel_in_a_custom_section() -> None:
    header = b"\x00asm\x0d\x00\x01\x00"  # a component's preamble
    module_section = b"\x01\x03abc"
    wasm = with_docs(header + module_section, {"summarize": "Sum ü" * 100})
    assert wasm.startswith(header + module_section)
    assert read_docs(wasm) == {"summarize": "Sum ü" * 100}
    assert read_docs(header + module_section) == {}
    assert read_docs(b"not wasm") == {}


def test_tools_are_described_from_the_cache_beside_the_compiled_component(tmp_path: Path) -> None:
    """Listing tools reads the descriptions cached with the compiled code: the component is not even looked at."""
    compiled = tmp_path / "abc.cwasm"
    cached = [ExportedFunction("summarize", None, [("text", STRING)], STRING)]
    payload = {"format": TOOLS_CACHE_FORMAT, "functions": [f.to_json() for f in cached], "docs": {"summarize": "S."}}
    (tmp_path / "abc.tools.json").write_text(json.dumps(payload))
    linked = SimpleNamespace(cache_file=compiled, component=None, engine=None)  # any use of these would fail
    functions, docs = describe(linked, tmp_path / "app.wasm")  # type: ignore[arg-type]
    assert functions == cached and docs == {"summarize": "S."}
