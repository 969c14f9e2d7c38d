"""Chat templates: rendering a model's template the way Hugging Face templates expect (which template a model
has is chosen in `engine.chat_template`).

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
from datetime import datetime
from typing import Any

from llmhost.domain.errors import InvalidInput
from llmhost.engine.chat_template import TemplateInfo

# Texts that end an assistant turn in the common template families; the ones a template's source mentions become
# stop strings (a model whose turn marker is not a single end-of-generation token would otherwise run on).
END_OF_TURN_MARKERS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "</s>")


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
