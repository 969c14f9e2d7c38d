"""`ChatService`: the WIT `chat`, `chat-stream` and `apply-chat-template` on domain types, over any `Engine`.

A chat is a prompt rendered with the model's template (template.py), generated from like `infer` with the
template's end-of-turn texts added to the stop sequences and, when tools are offered, the reply constrained to
text or calls (tools.py). The streamed form is the one implementation; `chat` collects it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from llmhost.chat.template import ChatTemplate
from llmhost.chat.tools import (
    CallFormat,
    CallSoFar,
    ParsedTool,
    new_call_id,
    openai_tools,
    parse_tools,
    reply_constraint,
    scan_calls,
    shortest_call,
)
from llmhost.chat.tools import template_messages as to_template_messages
from llmhost.domain.errors import EngineError, InvalidInput
from llmhost.domain.kinds import ModelKind
from llmhost.domain.limits import MAX_BYTES_PER_TOKEN
from llmhost.domain.types import (
    ChatEvent,
    ChatMessage,
    ChatParams,
    ChatResult,
    ChatRole,
    FinishReason,
    InferencingParams,
    StreamChunk,
    StreamDone,
    StreamEvent,
    TokenLogprob,
    Tool,
    ToolCall,
    ToolCallDelta,
    Usage,
    check_text_length,
)
from llmhost.engine.base import Engine, Generation
from llmhost.engine.registry import Registry


class ChatGeneration(Protocol):
    """A chat answer in progress: iterate for `ChatEvent`s (content chunks, tool-call deltas, then one done)."""

    def __iter__(self) -> Iterator[ChatEvent]: ...

    def __next__(self) -> ChatEvent: ...

    def close(self) -> None: ...


StartGeneration = Callable[[str, str, InferencingParams], Generation]

_log = logging.getLogger(__name__)


class ChatService:
    def __init__(self, registry: Callable[[], Registry]) -> None:
        self._registry = registry
        self._templates: dict[tuple[str, str], ChatTemplate] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()  # base models a chat has been warned of (once each)

    def _engine(self, model: str) -> Engine:
        return self._registry().engine(model)

    def template(self, model: str) -> ChatTemplate:
        """The model's compiled template (compiled once per template text)."""
        info = self._engine(model).chat_template(model)
        key = (model, info.source)
        with self._lock:
            compiled = self._templates.get(key)
        if compiled is None:
            compiled = ChatTemplate(info)
            with self._lock:
                self._templates[key] = compiled
        return compiled

    def _prompt(
        self, model: str, messages: list[ChatMessage], params: ChatParams, add_generation_prompt: bool
    ) -> tuple[str, ChatTemplate, CallFormat, list[ParsedTool]]:
        template = self.template(model)
        offered = params.tools if params.tool_choice.kind != "none" else ()
        tools = parse_tools(offered, params.tool_choice)
        fmt: CallFormat = "hermes" if template.hermes_tool_calls else "json"
        hf_messages = to_template_messages(
            messages, tools, knows_tools=template.knows_tools, knows_tool_calls=template.knows_tool_calls, fmt=fmt
        )
        hf_tools = openai_tools(tools) if tools and template.knows_tools else None
        return template.prompt(hf_messages, hf_tools, add_generation_prompt), template, fmt, tools

    def _check_call_budget(self, model: str, call: str, max_tokens: int | None) -> None:
        """`required` and `named` promise a call: a budget too small for the shortest valid one is refused now,
        naming `max-tokens`, rather than cut off into an incomplete call."""
        if max_tokens is None:
            return
        engine = self._engine(model)
        bos = len(engine.tokenize(model, "a")) - 1  # tokenize counts a beginning-of-sequence token, if any
        needed = len(engine.tokenize(model, call)) - bos
        if max_tokens < needed:
            raise InvalidInput(
                f"max-tokens ({max_tokens}) is too small for the tool call the tool-choice requires: the shortest "
                f"valid call ({call}) takes {needed} tokens of this model; raise `max-tokens` to at least {needed}"
            )

    def _warn_if_base(self, model: str, template: ChatTemplate) -> None:
        """A chat on a base model still runs (some few-shot one on purpose) but is rarely what was meant: say so
        once per model, unless the config gives it a template (then the user chose the format)."""
        if model in self._warned:
            return
        registry = self._registry()
        config = registry.config(model)
        if registry.kind(model) != ModelKind.BASE or config.chat_template or config.chat_template_file:
            return
        with self._lock:
            if model in self._warned:
                return
            self._warned.add(model)
        _log.warning(
            "chat on model %r, a base (pretrained) model: its prompt uses %s, a format it was not trained to "
            "answer in, so replies may be unrelated text. Use an instruct model (e.g. smollm2-135m), or set "
            '`models.%s.chat-template` (or `kind = "instruct"` if it is one)',
            model,
            template.info.origin,
            model,
        )

    def apply_template(
        self, model: str, messages: list[ChatMessage], tools: tuple[Tool, ...], add_generation_prompt: bool
    ) -> str:
        params = ChatParams(tools=tools)
        prompt, _, _, _ = self._prompt(model, messages, params, add_generation_prompt)
        return prompt

    def chat(
        self, model: str, messages: list[ChatMessage], params: ChatParams, start: StartGeneration | None = None
    ) -> ChatResult:
        return collect_chat(self.chat_stream(model, messages, params, start))

    def chat_stream(
        self, model: str, messages: list[ChatMessage], params: ChatParams, start: StartGeneration | None = None
    ) -> ChatGeneration:
        """Start a chat. `start(model, prompt, params)` starts the generation (default: the engine's `stream`;
        the host passes its run-scoped `infer_stream`). Input errors are raised here, before any token."""
        # Messages too long to fit are refused before the template copies them into a prompt (and it is tokenized).
        length = sum(len(m.content or "") + sum(len(c.arguments) for c in m.tool_calls) for m in messages)
        context = self._engine(model).model_info(model).context_length
        check_text_length("the chat's messages", length, context, context, MAX_BYTES_PER_TOKEN)
        prompt, template, fmt, tools = self._prompt(model, messages, params, add_generation_prompt=True)
        self._warn_if_base(model, template)
        inferencing = params.inferencing
        constraint = reply_constraint(tools, params.tool_choice, fmt)
        if constraint is not None and inferencing.constraint is not None:
            raise InvalidInput(
                "inferencing.constraint cannot be combined with tools (the reply is already constrained to text or "
                "calls); pass tool-choice `none` to constrain a text reply"
            )
        if constraint is not None and params.tool_choice.kind in ("required", "named"):
            self._check_call_budget(model, shortest_call(tools, params.tool_choice, fmt), inferencing.max_tokens)
        stops = tuple(dict.fromkeys(inferencing.stop + template.stops))
        update: dict[str, object] = {"stop": stops}
        if constraint is not None:
            update["constraint"] = constraint
        generation = (start or self._engine(model).stream)(model, prompt, inferencing.model_copy(update=update))
        return ChatStream(generation, fmt if constraint is not None else None)


class ChatStream:
    """Turns an engine generation into chat events: content chunks while the reply is text, tool-call deltas once
    it is a call (the first character tells, as the constraint makes it), then done (`tool-calls` when it called).
    """

    def __init__(self, generation: Generation, fmt: CallFormat | None) -> None:
        self._generation = generation
        self._fmt = fmt
        self._text = ""
        self._mode: str | None = None if fmt is not None else "text"  # "text" | "calls", once known
        self._pending: list[ChatEvent] = []
        self._held: list[StreamChunk] = []  # chunks read before the mode was known
        self._ids: list[str] = []
        self._emitted: list[str] = []  # argument text sent so far, per call
        self._done = False
        self.logprobs: list[TokenLogprob] = []  # of every chunk, calls' included (they send no content chunks)

    def __iter__(self) -> Iterator[ChatEvent]:
        return self

    def __next__(self) -> ChatEvent:
        while not self._pending:
            if self._done:
                raise StopIteration
            self.feed(next(self._generation))
        return self._pending.pop(0)

    def feed(self, event: StreamEvent) -> None:
        """One event of the generation (read by the caller: asyncio polls it), turned into chat events (`take`)."""
        if isinstance(event, StreamChunk):
            self._on_chunk(event)
        else:
            self._on_done(event)

    def take(self) -> list[ChatEvent]:
        pending, self._pending = self._pending, []
        return pending

    @property
    def generation(self) -> Generation:
        return self._generation

    @property
    def done(self) -> bool:
        """The generation's done event was fed (what is left to `take` is the last)."""
        return self._done

    def _on_chunk(self, chunk: StreamChunk) -> None:
        self._text += chunk.text
        self.logprobs.extend(chunk.logprobs)
        if self._mode is None:
            if not self._text.strip():
                self._held.append(chunk)
                return
            assert self._fmt is not None
            self._mode = "text" if scan_calls(self._text, self._fmt, final=False) is None else "calls"
            if self._mode == "text":
                self._pending.extend(self._held)
                self._held = []
        if self._mode == "text":
            self._pending.append(chunk)
        else:
            self._emit_calls(final=False)

    def _emit_calls(self, final: bool) -> None:
        assert self._fmt is not None
        for index, call in enumerate(scan_calls(self._text, self._fmt, final) or []):
            self._emit_call(index, call)

    def _emit_call(self, index: int, call: CallSoFar) -> None:
        if call.name is None:
            return
        if index >= len(self._ids):
            self._ids.append(new_call_id())
            self._emitted.append("")
            self._pending.append(ToolCallDelta(index=index, id=self._ids[index], name=call.name))
        sent = self._emitted[index]
        if len(call.arguments) > len(sent) and call.arguments.startswith(sent):
            self._pending.append(ToolCallDelta(index=index, arguments=call.arguments[len(sent) :]))
            self._emitted[index] = call.arguments

    def _on_done(self, done: StreamDone) -> None:
        self._done = True
        finish = done.finish_reason
        if self._mode == "calls" or (self._mode is None and self._held):
            assert self._fmt is not None
            calls = scan_calls(self._text, self._fmt, final=True) or []
            if calls and all(c.complete and c.name is not None for c in calls):
                self._emit_calls(final=True)
                if finish is FinishReason.STOP:
                    finish = FinishReason.TOOL_CALLS
            elif self._mode is None:
                self._pending.extend(self._held)  # whitespace only: text after all
                self._mode = "text"
        self._pending.append(StreamDone(finish_reason=finish, usage=done.usage))

    @property
    def text(self) -> str:
        return self._text

    @property
    def in_call(self) -> bool:
        """The reply began a call (whether or not it finished one)."""
        return self._mode == "calls"

    def close(self) -> None:
        self._generation.close()


def collect_chat(stream: ChatGeneration) -> ChatResult:
    """Run a chat stream to its end and gather it into one result (what `chat` returns)."""
    try:
        return gather_chat(stream, stream if isinstance(stream, ChatStream) else None)
    finally:
        stream.close()


def gather_chat(events: Iterable[ChatEvent], chat: ChatStream | None) -> ChatResult:
    """A chat's events, read to the done event, as one result; `chat`: the stream they came from (asyncio reads
    the events itself), whose logprobs and text the result takes."""
    parts: list[str] = []
    logprobs: list[TokenLogprob] = []
    deltas: dict[int, dict[str, str]] = {}
    for event in events:
        if isinstance(event, StreamChunk):
            parts.append(event.text)
            logprobs.extend(event.logprobs)
        elif isinstance(event, ToolCallDelta):
            entry = deltas.setdefault(event.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] = event.id or entry["id"]
            entry["name"] = event.name or entry["name"]
            entry["arguments"] += event.arguments
        elif isinstance(event, StreamDone):
            return _result(parts, deltas, logprobs, event.finish_reason, event.usage, chat)
    raise EngineError("chat generation ended without a done event")


def _result(
    parts: list[str],
    deltas: dict[int, dict[str, str]],
    logprobs: list[TokenLogprob],
    finish: FinishReason,
    usage: Usage,
    stream: ChatStream | None,
) -> ChatResult:
    calls = tuple(ToolCall(**deltas[i]) for i in sorted(deltas)) if finish is FinishReason.TOOL_CALLS else ()
    text = "".join(parts)
    if stream is not None:
        logprobs = stream.logprobs
        if not calls and stream.in_call:
            # Never a text reply: its arguments would be no valid JSON (the WIT promise), so the caller gets why.
            raise InvalidInput(
                f"incomplete tool call: the reply began a call but ended (finish `{finish.value}`) after "
                f"{usage.generated_token_count} tokens, before the call was complete; raise `max-tokens`"
            )
    return ChatResult(
        message=ChatMessage(role=ChatRole.ASSISTANT, content=text if text or not calls else None, tool_calls=calls),
        finish_reason=finish,
        usage=usage,
        logprobs=tuple(logprobs),
    )
