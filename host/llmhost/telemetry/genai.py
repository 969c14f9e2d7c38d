"""Span names and attributes of host calls, after OpenTelemetry's GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/). No SDK here: plain values only.

A host call's arguments are the guest's WIT values (records read by their kebab-case field names); its result is
the domain value (`InferenceResult`, `ChatResult`, `EmbeddingsResult`) before it is lowered. Prompt and completion
text are only read with `capture_content`; headers, keys and config values never.
"""

from __future__ import annotations

import json
from typing import Any

OPERATION = "gen_ai.operation.name"
MODEL = "gen_ai.request.model"
MAX_TOKENS = "gen_ai.request.max_tokens"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_MESSAGES = "gen_ai.input.messages"  # with capture-content only
OUTPUT_MESSAGES = "gen_ai.output.messages"  # with capture-content only
SYSTEM = "gen_ai.provider.name"

TEXT_COMPLETION, CHAT, EMBEDDINGS = "text_completion", "chat", "embeddings"
# The `llm` interface's functions that are GenAI operations (their first argument is the model).
OPERATIONS = {
    "infer": TEXT_COMPLETION,
    "chat": CHAT,
    "generate-embeddings": EMBEDDINGS,
    "generate-embeddings-for-tokens": EMBEDDINGS,
    "sequence.generate": TEXT_COMPLETION,
}
# Functions whose first argument names a model (no GenAI operation of their own).
_MODEL_FIRST = frozenset({"tokenize", "get-model-info", "default-params", "get-model-kind", "apply-chat-template"})
# The most characters of a prompt or completion a span carries (with capture-content).
MAX_CONTENT_CHARS = 16_384


def span_name(interface: str, name: str) -> str:
    """`keyvalue.bucket.get` for `[method]bucket.get` of the key-value interface."""
    return f"{interface}.{short_name(name)}"


def short_name(name: str) -> str:
    return name.split("]", 1)[1] if name.startswith("[") else name


def request_attributes(name: str, args: tuple[Any, ...], capture_content: bool) -> dict[str, Any]:
    """A host call's request attributes from its WIT arguments (after the store)."""
    short = short_name(name)
    operation = OPERATIONS.get(short)
    attributes: dict[str, Any] = {}
    if operation is not None:
        attributes[OPERATION] = operation
    if (operation is not None or short in _MODEL_FIRST) and args and isinstance(args[0], str):
        attributes[MODEL] = args[0]
    if operation == TEXT_COMPLETION and short == "infer" and len(args) >= 3:
        attributes[MAX_TOKENS] = max_tokens_of(args[2])
        if capture_content and isinstance(args[1], str):
            attributes[INPUT_MESSAGES] = clip(json.dumps([{"role": "user", "content": args[1]}]))
    elif operation == TEXT_COMPLETION and len(args) >= 2:  # sequence.generate(this, params)
        attributes[MAX_TOKENS] = max_tokens_of(args[1])
    elif operation == CHAT and len(args) >= 3:
        attributes[MAX_TOKENS] = max_tokens_of(args[2])
        if capture_content:
            attributes[INPUT_MESSAGES] = clip(json.dumps(messages_of(args[1])))
    return {k: v for k, v in attributes.items() if v is not None}


def result_attributes(result: Any, capture_content: bool) -> dict[str, Any]:
    """A host call's result attributes: usage and finish reason of an inference, chat or embeddings result."""
    attributes: dict[str, Any] = {}
    usage = getattr(result, "usage", None)
    if usage is not None and hasattr(usage, "prompt_token_count"):
        attributes[INPUT_TOKENS] = usage.prompt_token_count
        attributes[OUTPUT_TOKENS] = usage.generated_token_count
    elif isinstance(getattr(result, "prompt_token_count", None), int):  # embeddings
        attributes[INPUT_TOKENS] = result.prompt_token_count
    reason = getattr(result, "finish_reason", None)
    if reason is not None:
        attributes[FINISH_REASONS] = (finish_reason(reason),)
    if capture_content:
        text = getattr(result, "text", None)
        message = getattr(result, "message", None)
        content = text if isinstance(text, str) else getattr(message, "content", None)
        if isinstance(content, str):
            attributes[OUTPUT_MESSAGES] = clip(json.dumps([{"role": "assistant", "content": content}]))
    return attributes


def finish_reason(reason: Any) -> str:
    """OpenAI's name of a `FinishReason` (`stop`, `length`, `tool_calls`), as the conventions use."""
    return str(getattr(reason, "openai", reason))


def max_tokens_of(params: Any) -> int | None:
    """`max-tokens` of WIT `inferencing-params`, or of `chat-params`' `inferencing` (None: unset)."""
    if params is None:
        return None
    inner = getattr(params, "inferencing", params)
    value = getattr(inner, "max-tokens", None) if inner is not None else None
    return value if isinstance(value, int) else None


def messages_of(messages: Any) -> list[dict[str, str]]:
    """WIT chat messages as `{role, content}` (content capture only)."""
    out = []
    for message in messages or ():
        role, content = getattr(message, "role", ""), getattr(message, "content", None)
        out.append({"role": str(getattr(role, "tag", role)), "content": content if isinstance(content, str) else ""})
    return out


def clip(text: str) -> str:
    return text if len(text) <= MAX_CONTENT_CHARS else text[:MAX_CONTENT_CHARS] + "..."
