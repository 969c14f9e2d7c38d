"""One-off calls of the WIT interface `llm`: `infer`, `stream`, `chat`, and the model facts.

from llmhost_guest import llm
print(llm.infer("The capital of France is", max_tokens=8, temperature=0.0))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidInput, call
from .params import DEFAULT_MODEL, Chunk, Completion, Done, TokenLogprob, Usage, build, reason_name, wit_llm

__all__ = [
    "ChatReply",
    "Stream",
    "ToolCall",
    "apply_chat_template",
    "chat",
    "embed",
    "infer",
    "list_models",
    "model_info",
    "stream",
    "tokenize",
]


def infer(prompt: str, model: str = DEFAULT_MODEL, **params: Any) -> Completion:
    """WIT `llm.infer`. Keywords: `max_tokens` (100; None: no budget), `stop`, `temperature` (0.8), `top_k`,
    `top_p`, `seed`, `repeat_penalty`, `frequency_penalty`, `presence_penalty`, `logit_bias` ({id: bias}),
    `logprobs`, and one of `json_schema` / `json_object` / `regex` / `grammar` / `choice`."""
    return Completion.from_wit(call(wit_llm().infer, model, prompt, build(params, model)))


class Stream:
    """WIT `llm.infer-stream`: iterate for `Chunk`s; afterwards `done` says how it ended and `text` holds the
    whole text. Leaving a `with` block (or `close()`) drops the stream, which cancels the generation."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.done: Done | None = None
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def __iter__(self) -> Iterator[Chunk]:
        llm = wit_llm()
        while self.done is None and self._handle is not None:
            event = call(self._handle.next)
            if event is None:
                break
            if isinstance(event, llm.StreamEvent_Done):
                self.done = Done(reason_name(event.value.finish_reason), Usage.from_wit(event.value.usage))
                break
            chunk = event.value
            self._parts.append(chunk.text)
            yield Chunk(
                chunk.text,
                list(chunk.token_ids),
                Usage.from_wit(chunk.usage),
                [TokenLogprob.from_wit(e) for e in chunk.logprobs],
            )

    def close(self) -> None:
        if self._handle is not None:
            self._handle.__exit__(None, None, None)
            self._handle = None

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def stream(prompt: str, model: str = DEFAULT_MODEL, **params: Any) -> Stream:
    """WIT `llm.infer-stream`, with the keywords of `infer`."""
    return Stream(call(wit_llm().infer_stream, model, prompt, build(params, model)))


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text

    @property
    def args(self) -> Any:
        return json.loads(self.arguments)


@dataclass(frozen=True)
class ChatReply:
    """WIT `chat-result`: the assistant's `content` (None when it only called tools) and its `tool_calls`."""

    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str
    usage: Usage
    logprobs: list[TokenLogprob] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.content or ""

    def __str__(self) -> str:
        return self.text


def _message(message: Any) -> Any:
    """A WIT `chat-message` from a {"role", "content", "tool_calls", "tool_call_id"} dict or a (role, content)
    pair (already built messages pass through)."""
    llm = wit_llm()
    if isinstance(message, tuple):
        message = {"role": message[0], "content": message[1]}
    if not isinstance(message, Mapping):
        return message
    role = str(message.get("role", "user"))
    try:
        wit_role = getattr(llm.ChatRole, role.upper())
    except AttributeError:
        raise InvalidInput(f"unknown chat role {role!r} (system, user, assistant, tool)") from None
    calls = [
        llm.ToolCall(id=str(c.get("id", "")), name=str(c["name"]), arguments=_json_text(c.get("arguments", {})))
        for c in message.get("tool_calls") or []
    ]
    return llm.ChatMessage(
        role=wit_role, content=message.get("content"), tool_calls=calls, tool_call_id=message.get("tool_call_id")
    )


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _tool(tool: Any) -> Any:
    """A WIT `tool` from {"name", "description", "parameters"} or OpenAI's {"type": "function", "function": ...}."""
    if not isinstance(tool, Mapping):
        return tool
    spec = tool.get("function", tool)
    return wit_llm().Tool(
        name=str(spec["name"]),
        description=spec.get("description"),
        parameters=_json_text(spec.get("parameters", {"type": "object"})),
    )


def _tool_choice(choice: str | None) -> Any:
    llm = wit_llm()
    if choice in (None, "auto"):
        return llm.ToolChoice_Auto()
    if choice == "none":
        # componentize-py names the case `None_` (`None` is a Python keyword).
        return (getattr(llm, "ToolChoice_None_", None) or llm.ToolChoice_None)()
    if choice == "required":
        return llm.ToolChoice_Required()
    return llm.ToolChoice_Named(str(choice))


def chat(
    messages: Iterable[Any],
    model: str = DEFAULT_MODEL,
    *,
    tools: Iterable[Any] = (),
    tool_choice: str | None = "auto",
    **params: Any,
) -> ChatReply:
    """WIT `llm.chat`: messages as dicts (or (role, content) pairs), tools as dicts; `tool_choice` "auto",
    "none", "required" or a tool's name; the other keywords as in `infer`."""
    llm = wit_llm()
    chat_params = llm.ChatParams(
        inferencing=build(params, model), tools=[_tool(t) for t in tools], tool_choice=_tool_choice(tool_choice)
    )
    result = call(llm.chat, model, [_message(m) for m in messages], chat_params)
    message = result.message
    return ChatReply(
        content=message.content,
        tool_calls=[ToolCall(c.id, c.name, c.arguments) for c in message.tool_calls],
        finish_reason=reason_name(result.finish_reason),
        usage=Usage.from_wit(result.usage),
        logprobs=[TokenLogprob.from_wit(e) for e in result.logprobs],
    )


def apply_chat_template(
    messages: Iterable[Any],
    model: str = DEFAULT_MODEL,
    *,
    tools: Iterable[Any] = (),
    add_generation_prompt: bool = True,
) -> str:
    """WIT `llm.apply-chat-template`: the prompt text the model's chat template makes of `messages`."""
    return call(
        wit_llm().apply_chat_template,
        model,
        [_message(m) for m in messages],
        [_tool(t) for t in tools],
        add_generation_prompt,
    )


def tokenize(text: str, model: str = DEFAULT_MODEL) -> list[int]:
    """WIT `llm.tokenize` (the beginning-of-sequence token included, as `infer` tokenizes a prompt)."""
    return list(call(wit_llm().tokenize, model, text))


def model_info(model: str = DEFAULT_MODEL) -> Any:
    """WIT `llm.get-model-info`: `.name`, `.context_length`, `.vocab_size`."""
    return call(wit_llm().get_model_info, model)


def list_models() -> list[Any]:
    """WIT `llm.list-models`."""
    return list(wit_llm().list_models())


def embed(texts: str | Iterable[str], model: str = DEFAULT_MODEL) -> list[list[float]]:
    """WIT `llm.generate-embeddings`: one vector per text."""
    batch = [texts] if isinstance(texts, str) else list(texts)
    return [list(v) for v in call(wit_llm().generate_embeddings, model, batch).embeddings]
