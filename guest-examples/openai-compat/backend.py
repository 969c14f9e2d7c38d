"""The model side of openai-compat: chat through the host's `llm.chat` / `llm.chat-stream` (the model's own chat
template and tool calling, so any configured model works), plain text through `infer` / `infer-stream`, and n
choices as forks of one sequence that decode together.

A host without `chat` (a WIT older than chat's) still gets an answer: the conversation is rendered with Gemma's
template here and tools are called through a JSON-schema constraint (`LocalChat`).

Events are uniform whichever path produced them: ("content", stream-chunk), ("tool", index, id, name, arguments),
("done", finish-reason, usage).
"""

import json
import uuid

from wit_world.imports import llm, sequences

HAS_CHAT = hasattr(llm, "chat")
# `finish-reason::tool-calls` came with chat; without it the local path reports tool calls with this stand-in
# (app.finish_name maps any reason it does not know to "tool_calls").
TOOL_CALLS = getattr(llm.FinishReason, "TOOL_CALLS", "tool_calls")


class ChatOut:
    def __init__(self, content, tool_calls, finish_reason, usage, logprobs):
        self.content, self.tool_calls = content, tool_calls  # tool_calls: [(id, name, arguments)]
        self.finish_reason, self.usage, self.logprobs = finish_reason, usage, logprobs


# -- the host's chat -----------------------------------------------------------------------------------------

_ROLES = {}
if HAS_CHAT:
    _ROLES = {
        "system": llm.ChatRole.SYSTEM,
        "developer": llm.ChatRole.SYSTEM,
        "user": llm.ChatRole.USER,
        "assistant": llm.ChatRole.ASSISTANT,
        "tool": llm.ChatRole.TOOL,
    }


def _wit_messages(messages):
    return [
        llm.ChatMessage(
            role=_ROLES[m.role],
            content=m.content,
            tool_calls=[llm.ToolCall(id=i, name=n, arguments=a) for i, n, a in m.tool_calls],
            tool_call_id=m.tool_call_id,
        )
        for m in messages
    ]


def _wit_tools(tools):
    return [llm.Tool(name=t.name, description=t.description, parameters=t.parameters) for t in tools]


def _wit_choice(choice):
    kind, name = choice
    if kind == "auto":
        return llm.ToolChoice_Auto()
    if kind == "required":
        return llm.ToolChoice_Required()
    if kind == "named":
        return llm.ToolChoice_Named(name)
    return llm.ToolChoice_None_()


class HostChat:
    def chat(self, model, messages, params, tools, choice):
        result = llm.chat(model, _wit_messages(messages), self._params(params, tools, choice))
        message = result.message
        calls = [(c.id, c.name, c.arguments) for c in message.tool_calls]
        return ChatOut(message.content, calls, result.finish_reason, result.usage, result.logprobs)

    def stream(self, model, messages, params, tools, choice):
        """Opens the stream now (input errors are raised here), then yields its events."""
        stream = llm.chat_stream(model, _wit_messages(messages), self._params(params, tools, choice))
        return _host_events(stream)

    def render(self, model, messages, tools):
        return llm.apply_chat_template(model, _wit_messages(messages), _wit_tools(tools), True)

    @staticmethod
    def _params(params, tools, choice):
        return llm.ChatParams(inferencing=params, tools=_wit_tools(tools), tool_choice=_wit_choice(choice))


def _host_events(stream):
    with stream:
        while True:
            event = stream.next()
            if event is None:
                return
            if isinstance(event, llm.ChatEvent_Content):
                yield ("content", event.value)
            elif isinstance(event, llm.ChatEvent_ToolCall):
                d = event.value
                yield ("tool", d.index, d.id, d.name, d.arguments)
            else:
                yield ("done", event.value.finish_reason, event.value.usage)
                return


# -- a host without chat: Gemma's template and tools through a constraint -----------------------------------------


def _call_schema(tool):
    arguments = json.loads(tool.parameters)
    if isinstance(arguments, dict) and arguments.get("type") == "object":
        # Closed, as OpenAI's strict mode makes it: a small model otherwise pads the call with made-up keys.
        arguments.setdefault("additionalProperties", False)
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": arguments},
        "required": ["name", "arguments"],
    }


class LocalChat:
    """Gemma's chat template (system folded into the next user turn); tools are described in the first user turn
    and called by answering one JSON object {"name", "arguments"}, enforced by a JSON-schema constraint when a
    call is required."""

    def render(self, model, messages, tools, choice=("auto", None)):
        turns, system = [], []
        if tools and choice[0] != "none":
            listed = "\n".join(
                json.dumps({"name": t.name, "description": t.description, "parameters": json.loads(t.parameters)})
                for t in tools
            )
            system.append(
                "You can call these tools. To call one, answer with only a JSON object "
                '{"name": TOOL, "arguments": {...}} and nothing else.\n' + listed
            )
        for m in messages:
            if m.role in ("system", "developer"):
                system.append(m.content or "")
            elif m.role in ("user", "tool"):
                text = m.content or ""
                if m.role == "tool":
                    text = f"Result of tool call {m.tool_call_id}: {text}"
                turns.append("<start_of_turn>user\n" + "\n\n".join([*system, text]) + "<end_of_turn>\n")
                system = []
            else:
                parts = [m.content or ""] + [_call_text(n, a) for _, n, a in m.tool_calls]
                turns.append("<start_of_turn>model\n" + "\n".join(p for p in parts if p) + "<end_of_turn>\n")
        if system:
            turns.append("<start_of_turn>user\n" + "\n\n".join(system) + "<end_of_turn>\n")
        return "".join(turns) + "<start_of_turn>model\n"

    def _prepare(self, messages, params, tools, choice):
        kind, name = choice
        if tools and kind in ("required", "named"):
            chosen = [t for t in tools if kind == "required" or t.name == name]
            schema = {"anyOf": [_call_schema(t) for t in chosen]} if len(chosen) > 1 else _call_schema(chosen[0])
            params.constraint = llm.Constraint_JsonSchema(json.dumps(schema))
        return self.render(None, messages, tools, choice)

    def chat(self, model, messages, params, tools, choice):
        prompt = self._prepare(messages, params, tools, choice)
        result = llm.infer(model, prompt, params)
        call = _parse_call(result.text, tools) if tools and choice[0] != "none" else None
        if call is not None:
            return ChatOut(None, [call], TOOL_CALLS, result.usage, result.logprobs)
        return ChatOut(result.text, [], result.finish_reason, result.usage, result.logprobs)

    def stream(self, model, messages, params, tools, choice):
        prompt = self._prepare(messages, params, tools, choice)
        stream = llm.infer_stream(model, prompt, params)
        if tools and choice[0] != "none":
            return _local_tool_events(stream, tools)
        return _text_events(stream)


def _call_text(name, arguments):
    """An earlier call as the model would have written it (arguments the client sent that are not JSON: as text)."""
    try:
        return json.dumps({"name": name, "arguments": json.loads(arguments or "{}")})
    except ValueError:
        return json.dumps({"name": name, "arguments": arguments})


def _parse_call(text, tools):
    try:
        value = json.loads(text.strip().removeprefix("```json").removesuffix("```").strip())
    except ValueError:
        return None
    names = [t.name for t in tools]
    if not isinstance(value, dict) or value.get("name") not in names or not isinstance(value.get("arguments"), dict):
        return None
    return ("call_" + uuid.uuid4().hex[:24], value["name"], json.dumps(value["arguments"]))


def _text_events(stream):
    with stream:
        while True:
            event = stream.next()
            if event is None:
                return
            if isinstance(event, llm.StreamEvent_Chunk):
                yield ("content", event.value)
            else:
                yield ("done", event.value.finish_reason, event.value.usage)
                return


def _local_tool_events(stream, tools):
    """The whole answer is needed to tell a call from text: collect it, then emit either."""
    chunks = []
    for event in _text_events(stream):
        if event[0] == "content":
            chunks.append(event[1])
            continue
        call = _parse_call("".join(c.text for c in chunks), tools)
        if call is None:
            yield from (("content", c) for c in chunks)
            yield event
        else:
            yield ("tool", 0, call[0], call[1], call[2])
            yield ("done", TOOL_CALLS, event[2])
        return


CHAT = HostChat() if HAS_CHAT else LocalChat()


# -- n choices: forks of one sequence, decoding together ------------------------------------------------------------


# Choices generating at once. The host's default is 4 slots per model; a generation beyond its model's slots waits
# for one, and one that waits while its reader is blocked on another choice would wait for good (the running
# choices pause, a few events ahead, until they are read). So at most this many run at once; the next starts as
# soon as one ends.
WINDOW = 4


def fork_sequences(model, prompt, n):
    """n sequences holding `prompt`, sharing its KV cache: the prompt is evaluated once, then forked n - 1 times
    (a fork copies no cells). Their generations decode together: the host batches them into one step."""
    root = sequences.Sequence.open(model)
    root.append(prompt)
    return [root] + [root.fork() for _ in range(n - 1)]


class round_robin:
    """(choice index, event) from n generations read in turn, so they advance together; text events as
    ("content", chunk) and the last as ("done", finish-reason, usage). `start(i)` opens choice i's stream: at most
    `window` are open at once (see WINDOW), the first ones now (so input errors are raised here). `close()` drops
    every stream still open."""

    def __init__(self, start, n, window=WINDOW):
        self._start, self._n, self._opened = start, n, 0
        self._live = []
        self._turn = 0
        while self._opened < min(n, window):
            self._open()

    def _open(self):
        i = self._opened
        self._opened += 1
        self._live.append((i, _text_events(self._start(i))))

    def __iter__(self):
        return self

    def __next__(self):
        while self._live:
            self._turn %= len(self._live)
            i, events = self._live[self._turn]
            event = next(events, None)
            if event is None or event[0] == "done":
                self._live.pop(self._turn)
                if self._opened < self._n:
                    self._open()
            else:
                self._turn += 1
            if event is not None:
                return i, event
        raise StopIteration

    def close(self):
        for _, events in self._live:
            events.close()
        self._live = []
        self._opened = self._n
