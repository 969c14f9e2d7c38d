"""One-off calls of the WIT interface `llm`: `infer`, `stream`, `chat`, and the model facts.

from llmhost_guest import llm
print(llm.infer("The capital of France is", max_tokens=8, temperature=0.0))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

from .errors import InvalidInput, call, check_text
from .params import (
    DEFAULT_CHAT_MODEL,
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_MODEL,
    MAX_CALL_ITEMS,
    Chunk,
    Completion,
    Done,
    TokenLogprob,
    Usage,
    build,
    reason_name,
    wit_llm,
)

__all__ = [
    "ChatReply",
    "ChatStream",
    "Embeddings",
    "Interleaved",
    "ModelStatus",
    "Stream",
    "ToolCall",
    "ToolCallDelta",
    "apply_chat_template",
    "chat",
    "chat_stream",
    "embed",
    "interleave",
    "infer",
    "list_model_status",
    "list_models",
    "model_info",
    "model_kind",
    "stream",
    "tokenize",
]


def infer(prompt: str, model: str = DEFAULT_MODEL, **params: Any) -> Completion:
    """WIT `llm.infer`. Keywords: `max_tokens` (100; None: no budget), `stop`, `temperature` (0.8), `top_k`,
    `top_p`, `seed`, `repeat_penalty`, `frequency_penalty`, `presence_penalty`, `logit_bias` ({id: bias}),
    `logprobs`, and one of `json_schema` / `json_object` / `regex` / `grammar` / `choice`."""
    return Completion.from_wit(call(wit_llm().infer, model, prompt, build(params, model)))


T = TypeVar("T")


def _chunk(chunk: Any) -> Chunk:
    return Chunk(
        chunk.text,
        list(chunk.token_ids),
        Usage.from_wit(chunk.usage),
        [TokenLogprob.from_wit(e) for e in chunk.logprobs],
    )


def _done(done: Any) -> Done:
    return Done(reason_name(done.finish_reason), Usage.from_wit(done.usage))


class _Owned:
    """Owns a WIT resource handle (`_handle`): `close()`, or leaving a `with` block, drops it now (freeing what the
    host holds for it) instead of whenever the garbage collector gets to it; the object is unusable afterwards."""

    _handle: Any

    def close(self) -> None:
        if self._handle is not None:
            self._handle.__exit__(None, None, None)
            self._handle = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Events(_Owned, Generic[T]):
    """A WIT stream resource read event by event; the `done` event ends the iteration and is kept in `done`."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.done: Done | None = None
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def _item(self, event: Any) -> T | Done:
        raise NotImplementedError

    def __iter__(self) -> Iterator[T]:
        while self.done is None and self._handle is not None:
            event = call(self._handle.next)
            if event is None:
                break
            item = self._item(event)
            if isinstance(item, Done):
                self.done = item
                break
            if isinstance(item, Chunk):
                self._parts.append(item.text)
            yield item


class Stream(_Events[Chunk]):
    """WIT `llm.infer-stream`: iterate for `Chunk`s; afterwards `done` says how it ended and `text` holds the
    whole text. Leaving a `with` block (or `close()`) drops the stream, which cancels the generation."""

    def _item(self, event: Any) -> Chunk | Done:
        if isinstance(event, wit_llm().StreamEvent_Done):
            return _done(event.value)
        return _chunk(event.value)


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
class ToolCallDelta:
    """A piece of a streamed tool call (WIT `tool-call-delta`): a call's first delta carries its `id` and `name`,
    later ones more `arguments` text (joined, they are the call's arguments)."""

    index: int
    id: str | None
    name: str | None
    arguments: str


class ChatStream(_Events[Chunk | ToolCallDelta]):
    """WIT `llm.chat-stream`: iterate for content `Chunk`s and `ToolCallDelta`s; `done`, `text` and `close()` as
    for `Stream`."""

    def _item(self, event: Any) -> Chunk | ToolCallDelta | Done:
        llm = wit_llm()
        if isinstance(event, llm.ChatEvent_ToolCall):
            d = event.value
            return ToolCallDelta(int(d.index), d.id, d.name, d.arguments)
        if isinstance(event, llm.ChatEvent_Done):
            return _done(event.value)
        return _chunk(event.value)


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


def _tool_choice(choice: str | Mapping[str, Any] | None) -> Any:
    """A tool choice: "auto", "none", "required", a tool's name, or {"name": NAME} (any name, "auto" included)."""
    llm = wit_llm()
    if isinstance(choice, Mapping):
        return llm.ToolChoice_Named(str(choice["name"]))
    if choice in (None, "auto"):
        return llm.ToolChoice_Auto()
    if choice == "none":
        # componentize-py names the case `None_` (`None` is a Python keyword).
        return (getattr(llm, "ToolChoice_None_", None) or llm.ToolChoice_None)()
    if choice == "required":
        return llm.ToolChoice_Required()
    return llm.ToolChoice_Named(str(choice))


def _chat_params(model: str, tools: Iterable[Any], tool_choice: Any, params: Mapping[str, Any]) -> Any:
    return wit_llm().ChatParams(
        inferencing=build(params, model), tools=[_tool(t) for t in tools], tool_choice=_tool_choice(tool_choice)
    )


def chat(
    messages: Iterable[Any],
    model: str = DEFAULT_CHAT_MODEL,
    *,
    tools: Iterable[Any] = (),
    tool_choice: str | Mapping[str, Any] | None = "auto",
    **params: Any,
) -> ChatReply:
    """WIT `llm.chat`: messages as dicts (or (role, content) pairs), tools as dicts; `tool_choice` "auto",
    "none", "required", a tool's name or {"name": NAME}; the other keywords as in `infer`."""
    chat_params = _chat_params(model, tools, tool_choice, params)
    result = call(wit_llm().chat, model, [_message(m) for m in messages], chat_params)
    message = result.message
    return ChatReply(
        content=message.content,
        tool_calls=[ToolCall(c.id, c.name, c.arguments) for c in message.tool_calls],
        finish_reason=reason_name(result.finish_reason),
        usage=Usage.from_wit(result.usage),
        logprobs=[TokenLogprob.from_wit(e) for e in result.logprobs],
    )


def chat_stream(messages: Iterable[Any], model: str = DEFAULT_CHAT_MODEL, **options: Any) -> ChatStream:
    """WIT `llm.chat-stream`, with the arguments of `chat` (`tools`, `tool_choice` and the keywords of `infer`).
    Invalid input is raised here, before any token."""
    tools, tool_choice = options.pop("tools", ()), options.pop("tool_choice", "auto")
    chat_params = _chat_params(model, tools, tool_choice, options)
    return ChatStream(call(wit_llm().chat_stream, model, [_message(m) for m in messages], chat_params))


def apply_chat_template(
    messages: Iterable[Any],
    model: str = DEFAULT_CHAT_MODEL,
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


def model_kind(model: str = DEFAULT_MODEL) -> str:
    """WIT `llm.get-model-kind` (0.2.4): "base", "instruct" or "embedding"."""
    return str(call(wit_llm().get_model_kind, model).name).lower()


def list_models() -> list[Any]:
    """WIT `llm.list-models`."""
    return list(wit_llm().list_models())


@dataclass(frozen=True)
class ModelStatus:
    """WIT `model-status` (0.2.5): a model's residency now. `state`: "unloaded", "loading", "loaded", "unloading",
    "remote" (served elsewhere), or "unknown" (a guest built against an earlier WIT, which has no such call)."""

    name: str
    state: str
    memory_bytes: int = 0  # held while loaded (its file plus KV cache, an estimate)
    in_use: int = 0  # generations, open sequences and calls holding it now
    idle_s: float | None = None  # since its last use, while loaded and not in use
    keep_alive_s: float | None = None  # how long it stays loaded once idle; None: for good (or remote)
    unload_in_s: float | None = None  # until it unloads if it stays idle

    @property
    def loaded(self) -> bool:
        return self.state == "loaded"


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def list_model_status() -> list[ModelStatus]:
    """WIT `llm.list-model-status` (0.2.5): each model this guest may use, loaded or not, its memory, its last use
    and when it unloads; loads none. Built against an earlier WIT: each model of `list_models()`, state "unknown"."""
    statuses = getattr(wit_llm(), "list_model_status", None)  # 0.2.5
    if statuses is None:
        return [ModelStatus(str(info.name), "unknown") for info in list_models()]
    return [
        ModelStatus(
            name=s.name,
            state=str(s.state.name).lower(),
            memory_bytes=int(s.memory_bytes),
            in_use=int(s.in_use),
            idle_s=_seconds(s.idle_ms),
            keep_alive_s=_seconds(s.keep_alive_ms),
            unload_in_s=_seconds(s.unload_in_ms),
        )
        for s in statuses()
    ]


class Embeddings(list[list[float]]):
    """One vector per text (a `list`), with `.usage` (`prompt_tokens`: the tokens of all the texts)."""

    usage: Usage


# `embed` and `embed_tokens` call the host in batches, so any number of inputs works: at most EMBED_BATCH inputs a
# call (the host takes 16,384), and at most EMBED_CALL_ITEMS of what wasmtime counts when it copies the arguments out
# of the guest (MAX_CALL_ITEMS a call, past which the guest traps: a token id is one item, a text one plus its
# bytes / 48). The vectors coming back are not counted.
EMBED_BATCH = 2048
EMBED_CALL_ITEMS = MAX_CALL_ITEMS // 2
_ITEM_BYTES = 48  # what wasmtime counts a list element as


def embed(texts: str | Iterable[str], model: str = DEFAULT_EMBEDDING_MODEL) -> Embeddings:
    """WIT `llm.generate-embeddings`: one vector per text (default model: all-minilm-l6-v2, made for retrieval),
    any number of texts (in batches). A text that is not valid Unicode is `InvalidInput` naming it (`text[3]`)."""
    batch = [texts] if isinstance(texts, str) else list(texts)
    function = wit_llm().generate_embeddings
    check_text(function, (model, batch))
    return _batched(function, model, batch, "text", _text_items)


def embed_tokens(inputs: Iterable[Iterable[int]], model: str = DEFAULT_MODEL) -> Embeddings:
    """WIT `llm.generate-embeddings-for-tokens` (0.2.2): one vector per token-id list, the ids as they are; any
    number of lists (in batches)."""
    return _batched(wit_llm().generate_embeddings_for_tokens, model, [list(i) for i in inputs], "inputs", len)


def _text_items(text: Any) -> int:
    if not isinstance(text, str):
        return 1  # not a text: the binding refuses it
    # Its UTF-8 size without encoding it: ASCII is a byte a character, anything else at most 4 (encoded only when that
    # bound is too big for a call).
    size = len(text) if text.isascii() else 4 * len(text)
    if size > EMBED_CALL_ITEMS * _ITEM_BYTES:
        size = len(text.encode("utf-8"))
    return 1 + size // _ITEM_BYTES


def _batched(function: Callable[..., Any], model: str, inputs: list[Any], name: str, items: Any) -> Embeddings:
    """The vectors of `inputs` from calls of `function` over batches of them, usage summed. The batches are made
    first, so an input too large for any call is refused before the host does any work."""
    vectors, tokens = Embeddings(), 0
    for batch in list(_batches(inputs, name, items)):
        result = call(function, model, batch)
        vectors.extend(list(v) for v in result.embeddings)
        tokens += int(result.usage.prompt_token_count)
    vectors.usage = Usage(tokens, 0)
    return vectors


def _batches(inputs: list[Any], name: str, items: Callable[[Any], int]) -> Iterator[list[Any]]:
    """Consecutive slices of `inputs`: at most EMBED_BATCH inputs and EMBED_CALL_ITEMS items each (one, empty, for
    no inputs)."""
    start = 0
    while True:
        end, used = start, 0
        while end < len(inputs) and end - start < EMBED_BATCH:
            cost = 1 + items(inputs[end])
            if cost > EMBED_CALL_ITEMS:
                raise InvalidInput(
                    f"{name}[{end}] is too large to pass to the host in one call: wasmtime copies at most "
                    f"{MAX_CALL_ITEMS} list items out of a guest per call (a token id is one, a text one plus its "
                    f"UTF-8 bytes / {_ITEM_BYTES}); split it"
                )
            if end > start and used + cost > EMBED_CALL_ITEMS:
                break
            used += cost
            end += 1
        yield inputs[start:end]
        if end >= len(inputs):
            return
        start = end


class Interleaved:
    """(index, event) pairs from several streams read in turn, so that their generations advance together: each
    stream's items (`Chunk`s; a `ChatStream`'s `ToolCallDelta`s too), then its `Done`.

    `openers[i]()` opens stream i. At most `window` are open at once: the first ones now (so their input errors
    are raised here, before anything is read), the next as soon as one ends. A generation beyond its model's free
    slots waits for one, and one that waits while its reader is blocked on another stream would wait for good
    (the running streams pause, a few events ahead, until they are read): keep `window` within the model's
    `slots`. `close()` (or leaving a `with` block) drops every open stream, which cancels their generations."""

    def __init__(self, openers: Iterable[Callable[[], _Events[Any]]], window: int = 4) -> None:
        self._openers = list(openers)
        self._opened = 0
        self._live: list[tuple[int, _Events[Any], Iterator[Any]]] = []
        self._turn = 0
        try:
            while self._opened < min(len(self._openers), max(1, window)):
                self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        index = self._opened
        self._opened += 1
        stream = self._openers[index]()
        self._live.append((index, stream, iter(stream)))

    def __iter__(self) -> Interleaved:
        return self

    def __next__(self) -> tuple[int, Any]:
        while self._live:
            self._turn %= len(self._live)
            index, stream, items = self._live[self._turn]
            item = next(items, None)
            if item is not None:
                self._turn += 1
                return index, item
            stream.close()
            self._live.pop(self._turn)
            if self._opened < len(self._openers):
                self._open()
            if stream.done is not None:
                return index, stream.done
        raise StopIteration

    def close(self) -> None:
        for _, stream, _ in self._live:
            stream.close()
        self._live = []
        self._opened = len(self._openers)

    def __enter__(self) -> Interleaved:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def interleave(openers: Iterable[Callable[[], _Events[Any]]], window: int = 4) -> Interleaved:
    """Read several streams in turn (see `Interleaved`): e.g. n choices, each `lambda: fork.stream(...)`."""
    return Interleaved(openers, window)
