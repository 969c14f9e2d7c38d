"""`ChatService`: the WIT `chat`, `chat-stream` and `apply-chat-template` on domain types, over any `Engine`.

A chat is a prompt rendered with the model's template (template.py), generated from like `infer` with the
template's end-of-turn texts added to the stop sequences and, when tools are offered, the reply constrained to
text or calls (tools.py). The streamed form is the one implementation; `chat` collects it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
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
)
from llmhost.chat.tools import template_messages as to_template_messages
from llmhost.domain.errors import EngineError, InvalidInput
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


class ChatService:
    def __init__(self, registry: Callable[[], Registry]) -> None:
        self._registry = registry
        self._templates: dict[tuple[str, str], ChatTemplate] = {}
        self._lock = threading.Lock()

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
        inferencing = params.inferencing
        constraint = reply_constraint(tools, params.tool_choice, fmt)
        if constraint is not None and inferencing.constraint is not None:
            raise InvalidInput(
                "inferencing.constraint cannot be combined with tools (the reply is already constrained to text or "
                "calls); pass tool-choice `none` to constrain a text reply"
            )
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
            event = next(self._generation)
            if isinstance(event, StreamChunk):
                self._on_chunk(event)
            else:
                self._on_done(event)
        return self._pending.pop(0)

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
    parts: list[str] = []
    logprobs: list[TokenLogprob] = []
    deltas: dict[int, dict[str, str]] = {}
    try:
        for event in stream:
            if isinstance(event, StreamChunk):
                parts.append(event.text)
                logprobs.extend(event.logprobs)
            elif isinstance(event, ToolCallDelta):
                entry = deltas.setdefault(event.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] = event.id or entry["id"]
                entry["name"] = event.name or entry["name"]
                entry["arguments"] += event.arguments
            elif isinstance(event, StreamDone):
                return _result(parts, deltas, logprobs, event.finish_reason, event.usage, stream)
    finally:
        stream.close()
    raise EngineError("chat generation ended without a done event")


def _result(
    parts: list[str],
    deltas: dict[int, dict[str, str]],
    logprobs: list[TokenLogprob],
    finish: FinishReason,
    usage: Usage,
    stream: ChatGeneration,
) -> ChatResult:
    calls = tuple(ToolCall(**deltas[i]) for i in sorted(deltas)) if finish is FinishReason.TOOL_CALLS else ()
    text = "".join(parts)
    if isinstance(stream, ChatStream):
        logprobs = stream.logprobs
        if not calls and stream.in_call:
            text = stream.text  # an unfinished call (the budget ran out): its text is all there is
    return ChatResult(
        message=ChatMessage(role=ChatRole.ASSISTANT, content=text if text or not calls else None, tool_calls=calls),
        finish_reason=finish,
        usage=usage,
        logprobs=tuple(logprobs),
    )
