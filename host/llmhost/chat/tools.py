"""Tools in a chat: the messages a template sees, the constraint on the reply, and reading calls out of the reply.

Two call formats:

- `hermes`, for templates that render tools themselves and show calls as
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` (Hermes, Qwen 2.5/3, ChatML-with-tools templates).
- `json`, for every other template, including those with no tool support at all (Gemma 3): the reply is either
  plain text or exactly one JSON object `{"name": ..., "arguments": {...}}`, as llama.cpp's server does for
  templates without native tools. Templates that do not know tools get them described in the system turn, and
  past calls and tool results written as plain turns, so the model sees its own format in the history.

With tools offered (tool choice other than `none`), the reply is constrained by the structured-output engine:
a call's arguments always validate against the tool's schema; `required` and `named` admit only calls.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import ChatMessage, ChatRole, Constraint, Tool, ToolChoice

CallFormat = Literal["hermes", "json"]

HERMES_OPEN = "<tool_call>\n"
HERMES_CLOSE = "\n</tool_call>"
# Compact JSON as the structured-output engine writes it (and as json.dumps writes it by default), so streamed
# argument text and the final arguments agree byte for byte.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class ParsedTool:
    name: str
    description: str | None
    schema: dict[str, Any]


def parse_tools(tools: tuple[Tool, ...], choice: ToolChoice) -> list[ParsedTool]:
    """The offered tools with their schemas parsed; `invalid-input` naming the field for anything unusable."""
    parsed: list[ParsedTool] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not tool.name:
            raise InvalidInput(f"tools[{i}].name is empty")
        if tool.name in seen:
            raise InvalidInput(f"tools[{i}].name {tool.name!r} is offered twice; tool names must be unique")
        seen.add(tool.name)
        try:
            schema = json.loads(tool.parameters)
        except json.JSONDecodeError as error:
            raise InvalidInput(f"tools[{i}].parameters is not valid JSON: {error}") from None
        if not isinstance(schema, dict):
            raise InvalidInput(f"tools[{i}].parameters must be a JSON object (a JSON Schema)")
        parsed.append(ParsedTool(tool.name, tool.description, schema))
    if choice.kind == "required" and not parsed:
        raise InvalidInput("tool-choice is `required` but no tools are given")
    if choice.kind == "named" and choice.name not in seen:
        raise InvalidInput(f"tool-choice names {choice.name!r}, which is not among the tools")
    return parsed


def openai_tools(tools: list[ParsedTool]) -> list[dict[str, Any]]:
    """Tools as Hugging Face templates expect them (OpenAI function dicts)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                **({"description": t.description} if t.description else {}),
                "parameters": t.schema,
            },
        }
        for t in tools
    ]


def _arguments(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInput(f"{where} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be a JSON object")
    return value


def call_text(name: str, arguments: dict[str, Any], fmt: CallFormat) -> str:
    """A call written the way the model is constrained to write it."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return HERMES_OPEN + body + HERMES_CLOSE if fmt == "hermes" else body


def template_messages(
    messages: list[ChatMessage],
    tools: list[ParsedTool],
    *,
    knows_tools: bool,
    knows_tool_calls: bool,
    fmt: CallFormat,
) -> list[dict[str, Any]]:
    """Messages as Hugging Face dicts. For a template that does not render calls, past calls become assistant
    text in the reply format and tool results user turns; for one that does not render tools, the tools are
    described in the system turn. Adjacent turns of one role are then merged (templates like Gemma 3's insist on
    alternating roles)."""
    if not messages:
        raise InvalidInput("messages is empty; a conversation needs at least one message")
    call_names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        entry: dict[str, Any] = {"role": m.role.value, "content": m.content}
        if m.role is ChatRole.ASSISTANT and m.tool_calls:
            calls = []
            for j, call in enumerate(m.tool_calls):
                arguments = _arguments(call.arguments, f"messages[{i}].tool-calls[{j}].arguments")
                call_names[call.id] = call.name
                calls.append((call, arguments))
            if knows_tool_calls:
                entry["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": a}} for c, a in calls
                ]
            else:
                texts = [call_text(c.name, a, fmt) for c, a in calls]
                entry["content"] = "\n".join(([m.content] if m.content else []) + texts)
        elif m.role is ChatRole.TOOL:
            name = call_names.get(m.tool_call_id or "", "")
            if knows_tool_calls:
                entry.update(tool_call_id=m.tool_call_id, name=name)
            else:
                response = {"tool_response": {"name": name, "id": m.tool_call_id, "content": m.content or ""}}
                entry = {"role": "user", "content": json.dumps(response, ensure_ascii=False)}
        elif m.content is None:
            entry["content"] = ""
        out.append(entry)
    if tools and not knows_tools:
        prompt = tool_prompt(tools)
        if out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content'] or ''}\n\n{prompt}".lstrip()}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    if not knows_tool_calls:
        out = _merge_adjacent(out)
    return out


def _merge_adjacent(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    for m in messages:
        if merged and merged[-1]["role"] == m["role"] and set(m) == {"role", "content"}:
            previous = merged[-1]
            merged[-1] = {**previous, "content": "\n\n".join(filter(None, [previous["content"], m["content"]]))}
        else:
            merged.append(dict(m))
    return merged


def tool_prompt(tools: list[ParsedTool]) -> str:
    """The system-turn description of the tools for templates that have no place for them."""
    lines = ["You can call these tools (JSON Schema of each one's arguments):"]
    for t in tools:
        described = {"name": t.name, "description": t.description or "", "parameters": t.schema}
        lines.append(json.dumps(described, ensure_ascii=False))
    lines.append(
        'To call a tool, reply with only a JSON object {"name": TOOL_NAME, "arguments": ARGUMENTS_OBJECT}. '
        "Otherwise reply in plain text."
    )
    return "\n".join(lines)


def _call_schema(tool: ParsedTool) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": tool.schema},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def reply_constraint(tools: list[ParsedTool], choice: ToolChoice, fmt: CallFormat) -> Constraint | None:
    """The language of the reply: text or a call (`auto`), only calls (`required`), one tool's call (`named`).
    A Lark grammar for llguidance: `%json` embeds each call's JSON Schema, so arguments always validate."""
    if choice.kind == "none" or not tools:
        return None
    offered = [t for t in tools if choice.kind != "named" or t.name == choice.name]
    schemas = [_call_schema(t) for t in offered]
    schema: dict[str, Any] = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    schema = {**schema, "x-guidance": JSON_STYLE}
    call_rule = "call: %json " + json.dumps(schema)
    if fmt == "hermes":
        # Text may not start with "<" (that is how a call starts): the first character tells text from calls.
        # One call per reply: offered more, small models keep writing calls until the budget runs out.
        calls = 'calls: "<tool_call>\\n" call "\\n</tool_call>"'
        start = "start: calls" if choice.kind != "auto" else "start: TEXT | calls\nTEXT: /[^<](.|\\n)*/"
        return Constraint.grammar(f"%llguidance {{}}\n{start}\n{calls}\n{call_rule}\n")
    start = "start: call" if choice.kind != "auto" else "start: TEXT | call\nTEXT: /[^{](.|\\n)*/"
    return Constraint.grammar(f"%llguidance {{}}\n{start}\n{call_rule}\n")


def shortest_call(tools: list[ParsedTool], choice: ToolChoice, fmt: CallFormat) -> str:
    """About the shortest text a `required` / `named` reply can be: one call with only its required arguments, each
    at its shortest value (used to refuse a `max-tokens` that cannot hold any call, before generating)."""
    offered = [t for t in tools if choice.kind != "named" or t.name == choice.name]
    calls = [
        json.dumps({"name": t.name, "arguments": _shortest(t.schema)}, separators=(", ", ": "), ensure_ascii=False)
        for t in offered
    ]
    call = min(calls, key=len)
    return f"<tool_call>\n{call}\n</tool_call>" if fmt == "hermes" else call


def _shortest(schema: Any) -> Any:
    """A shortest JSON value of the schema, or shorter (never longer: the check must not refuse a feasible call)."""
    if not isinstance(schema, dict):
        return 0
    if "const" in schema:
        return schema["const"]
    options = schema.get("enum") or [_shortest(s) for s in schema.get("anyOf") or schema.get("oneOf") or []]
    if options:
        return min(options, key=lambda value: len(json.dumps(value)))
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "object" in kinds and len(kinds) == 1 or (kind is None and "properties" in schema):
        properties = schema.get("properties") or {}
        return {name: _shortest(properties.get(name)) for name in schema.get("required") or []}
    shortest: dict[Any, Any] = {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False, "null": None}
    return min((shortest.get(k, 0) for k in kinds), key=lambda value: len(json.dumps(value)))


# -- reading calls out of the reply ---------------------------------------------------------------------------


@dataclass
class CallSoFar:
    """A call as far as the reply has written it: its name once complete, and the arguments text so far."""

    name: str | None
    arguments: str
    complete: bool


def _scan_json_call(text: str, final: bool) -> CallSoFar | None:
    """`{"name": N, "arguments": A}` read as far as written: arguments text without the closing brace of the
    wrapper (held back until the end: until then the last `}` may still be the arguments')."""
    head = _CALL_HEAD.match(text)
    if head is None:
        return None
    name = json.loads('"' + head.group(1) + '"')
    rest = text[head.end() :]
    if final:
        body = rest.rstrip()
        if body.endswith("}"):
            arguments = body[:-1].rstrip()
            try:
                if isinstance(json.loads(arguments), dict):
                    return CallSoFar(name, arguments, True)
            except json.JSONDecodeError:
                pass
        return CallSoFar(name, rest, False)
    return CallSoFar(name, rest[:-1] if rest else rest, False)


def scan_calls(text: str, fmt: CallFormat, final: bool) -> list[CallSoFar] | None:
    """The calls in a reply (as far as written), or None when the reply is text. Called on every new piece of a
    streamed reply, and once with `final` at its end."""
    stripped = text.lstrip()
    if fmt == "json":
        if not stripped.startswith("{"):
            return None
        call = _scan_json_call(stripped, final)
        return [call] if call is not None else []
    if not stripped.startswith("<"):
        return None
    if not HERMES_OPEN.rstrip().startswith(stripped[: len(HERMES_OPEN.rstrip())]):
        return None  # starts with "<" but not a call
    calls: list[CallSoFar] = []
    for block in re.split(r"<tool_call>\s*", stripped)[1:]:
        end = block.find("</tool_call>")
        if end >= 0:
            call = _scan_json_call(block[:end].rstrip(), True)
        else:
            # Hold back what could be the start of the closing tag (and the wrapper's brace) until it is certain.
            held = block
            for k in range(min(len(block), len(HERMES_CLOSE)), 0, -1):
                if HERMES_CLOSE.startswith(block[-k:]):
                    held = block[:-k]
                    break
            call = _scan_json_call(held, final)
        if call is not None:
            calls.append(call)
    return calls
