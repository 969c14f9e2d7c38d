"""Golden renderings of chat templates: the default model's (Gemma 3) and a ChatML-with-tools one given through
the override key; the sandbox and the error messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmhost.chat.service import ChatService
from llmhost.chat.template import ChatTemplate
from llmhost.domain.errors import InvalidInput
from llmhost.domain.types import ChatMessage, ChatRole, Tool, ToolCall
from llmhost.engine.chat_template import GEMMA3_TEMPLATE, TemplateInfo, template_source
from llmhost.engine.registry import Registry

CHATML_TOOLS = (Path(__file__).parent / "chatml_tools.jinja").read_text()

WEATHER = Tool(
    name="get_weather",
    description="Current weather in a city",
    parameters=json.dumps(
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, separators=(",", ":")
    ),
)


class TemplateEngine:
    """Just enough engine for `ChatService.apply_template`."""

    def __init__(self, info: TemplateInfo) -> None:
        self.info = info

    def chat_template(self, model: str) -> TemplateInfo:
        return self.info

    def model_names(self) -> list[str]:
        return ["m"]


def service(source: str, bos: str = "<bos>", add_bos: bool = True) -> ChatService:
    info = TemplateInfo(source=source, origin="test", bos_token=bos, eos_token="<eos>", add_bos=add_bos)
    engine: Any = TemplateEngine(info)
    registry = Registry.of(engine)
    return ChatService(lambda: registry)


def msg(role: str, content: str | None = None, **kw: Any) -> ChatMessage:
    return ChatMessage(role=ChatRole(role), content=content, **kw)


CALL = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')
CONVERSATION = [
    msg("system", "Be brief."),
    msg("user", "Weather in Paris?"),
    msg("assistant", None, tool_calls=(CALL,)),
    msg("tool", "18 C, sunny", tool_call_id="call_1"),
]


def test_gemma_default_template_golden() -> None:
    chat = service(GEMMA3_TEMPLATE)
    text = chat.apply_template(
        "m", [msg("system", "Be brief."), msg("user", "Hi!"), msg("assistant", " Hello. ")], (), True
    )
    # The engine adds <bos> itself, so the prompt does not carry it twice; the system turn joins the first user one.
    assert text == (
        "<start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert chat.apply_template("m", [msg("user", "Hi!")], (), False) == "<start_of_turn>user\nHi!<end_of_turn>\n"


def test_gemma_keeps_bos_when_engine_does_not_add_it() -> None:
    text = service(GEMMA3_TEMPLATE, add_bos=False).apply_template("m", [msg("user", "Hi")], (), False)
    assert text == "<bos><start_of_turn>user\nHi<end_of_turn>\n"


def test_gemma_tools_and_calls_as_plain_turns() -> None:
    text = service(GEMMA3_TEMPLATE).apply_template("m", CONVERSATION, (WEATHER,), True)
    tool_line = json.dumps(
        {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }
    )
    assert text == (
        "<start_of_turn>user\nBe brief.\n\n"
        "You can call these tools (JSON Schema of each one's arguments):\n"
        f"{tool_line}\n"
        'To call a tool, reply with only a JSON object {"name": TOOL_NAME, "arguments": ARGUMENTS_OBJECT}. '
        "Otherwise reply in plain text.\n\nWeather in Paris?<end_of_turn>\n"
        '<start_of_turn>model\n{"name": "get_weather", "arguments": {"city": "Paris"}}<end_of_turn>\n'
        '<start_of_turn>user\n{"tool_response": {"name": "get_weather", "id": "call_1", "content": "18 C, sunny"}}'
        "<end_of_turn>\n<start_of_turn>model\n"
    )


def test_gemma_alternation_error_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="roles must alternate"):
        service(GEMMA3_TEMPLATE).apply_template("m", [msg("assistant", "Hi")], (), True)


def test_chatml_tools_template_golden() -> None:
    chat = service(CHATML_TOOLS, bos="", add_bos=False)
    text = chat.apply_template("m", CONVERSATION, (WEATHER,), True)
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    assert text == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{json.dumps(tool)}\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    compiled = ChatTemplate(TemplateInfo(source=CHATML_TOOLS, origin="test"))
    assert compiled.knows_tools and compiled.knows_tool_calls and compiled.hermes_tool_calls
    assert compiled.stops == ("<|im_end|>",)


def test_template_is_sandboxed() -> None:
    hostile = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(InvalidInput, match="chat template"):
        service(hostile).apply_template("m", [msg("user", "x")], (), True)
    mutating = "{% set _ = messages.append(1) %}{{ messages | length }}"
    with pytest.raises(InvalidInput, match="chat template"):
        service(mutating).apply_template("m", [msg("user", "x")], (), True)


def test_bad_jinja_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="not valid Jinja"):
        service("{% for %}").apply_template("m", [msg("user", "x")], (), True)


def test_template_source_precedence_and_missing(tmp_path: Path) -> None:
    file = tmp_path / "t.jinja"
    file.write_text("FILE")
    assert template_source("m", "INLINE", file, "GGUF")[0] == "INLINE"
    assert template_source("m", None, file, "GGUF")[0] == "FILE"
    assert template_source("m", None, None, "GGUF")[0] == "GGUF"
    assert template_source("m", None, None, None, "BUILTIN")[0] == "BUILTIN"
    with pytest.raises(InvalidInput, match=r"`models\.m\.chat-template`"):
        template_source("m", None, None, None)
    with pytest.raises(InvalidInput, match=r"`models\.m\.chat-template-file`"):
        template_source("m", None, tmp_path / "missing.jinja", None)


def test_bad_tool_call_arguments_name_the_field() -> None:
    bad = [msg("user", "x"), msg("assistant", None, tool_calls=(ToolCall(id="a", name="f", arguments="{x"),))]
    with pytest.raises(InvalidInput, match=r"messages\[1\]\.tool-calls\[0\]\.arguments"):
        service(GEMMA3_TEMPLATE).apply_template("m", bad, (), True)


def test_config_keys_and_relative_template_file(tmp_path: Path) -> None:
    from llmhost.config import load_config

    (tmp_path / "chatml.jinja").write_text(CHATML_TOOLS)
    config_file = tmp_path / "llmhost.toml"
    config_file.write_text(
        '[models.a]\npath = "a.gguf"\nchat-template-file = "chatml.jinja"\n'
        '[models.b]\npath = "b.gguf"\nchat-template = "{{ messages[0].content }}"\n'
    )
    config = load_config(config_file)
    assert config.models["a"].chat_template_file == tmp_path / "chatml.jinja"
    assert template_source("a", None, config.models["a"].chat_template_file, None)[0] == CHATML_TOOLS
    assert config.models["b"].chat_template == "{{ messages[0].content }}"
