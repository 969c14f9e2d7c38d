"""POST /v1/responses: OpenAI's Responses API (`client.responses.create`) on the host's `chat` (the model's own
template, tools, structured output). Supported: `input` (a string, or messages and function-call items),
`instructions`, `max_output_tokens`, `temperature`, `top_p`, `text.format` (`json_schema` or `json_object`,
constrained by the host), function `tools`, `tool_choice`, `parallel_tool_calls`, and `stream` with the documented
events. Responses are not stored: `previous_response_id` and the built-in tools are refused by name."""

import json
import time
import uuid

from checks import BadRequest, boolean, model, number, obj, refused, string
from llmhost_guest import LlmError, llm
from validate import message as chat_message
from validate import parse, response_format
from validate import tool as chat_tool
from validate import tool_choice as chat_tool_choice

PART_TYPES = ("input_text", "output_text", "text")


def text_parts(value, param):
    if isinstance(value, list):  # Responses parts are `input_text`/`output_text`: checked as chat's `text` parts
        for i, part in enumerate(value):
            if obj(part, f"{param}[{i}]").get("type") not in PART_TYPES:
                raise BadRequest(f"content parts of type {part.get('type')!r} are not supported", f"{param}[{i}].type")
        return [{"type": "text", "text": part.get("text")} for part in value]
    return value


def input_items(value, param):
    """`input` as the guest SDK's chat messages: a string is one user message; function calls and their outputs
    become an assistant message's `tool_calls` and `tool` messages."""
    if isinstance(value, str):
        return [chat_message({"role": "user", "content": value}, param)]
    if not isinstance(value, list) or not value:
        raise BadRequest(f"'{param}' must be a string or a non-empty array of input items", param)
    messages = []
    for i, item in enumerate(value):
        where, kind = f"{param}[{i}]", obj(item, f"{param}[{i}]").get("type", "message")
        if kind == "message":
            messages.append(chat_message({**item, "content": text_parts(item.get("content"), where)}, where))
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            message = chat_message({"role": "assistant", "content": None, "tool_calls": [call]}, where)
            if messages and messages[-1]["role"] == "assistant" and messages[-1]["tool_calls"]:
                messages[-1]["tool_calls"] += message["tool_calls"]  # parallel calls: one assistant turn
            else:
                messages.append(message)
        elif kind == "function_call_output":
            output = {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
            messages.append(chat_message(output, where))
        else:
            raise BadRequest(f"input items of type {kind!r} are not supported", f"{where}.type")
    return messages


def response_tools(value, param):
    """Function tools (flat in this API), as the guest SDK's tool dicts; built-in tools are refused by name."""
    specs = []
    for i, spec in enumerate([] if value is None else value if isinstance(value, list) else [value]):
        kind = obj(spec, f"{param}[{i}]").get("type")
        if kind != "function":
            raise BadRequest(
                f"built-in tools are not supported (got {kind!r}): define function tools", f"{param}[{i}].type"
            )
        specs.append(
            chat_tool({"type": "function", "function": {k: v for k, v in spec.items() if k != "type"}}, f"{param}[{i}]")
        )
    return specs


def text_format(value, param):
    fmt = obj(value, param).get("format") if value is not None else None
    if fmt is not None and obj(fmt, f"{param}.format").get("type") == "json_schema":
        fmt = {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    return response_format(fmt, f"{param}.format")


RESPONSES = {
    "model": model,
    "input": input_items,
    "instructions": lambda value, param: None if value is None else string(value, param),
    "max_output_tokens": number(1, None, None, int),
    "temperature": number(0, 2, 1.0),
    "top_p": number(0, 1, 1.0, float, low_open=True),
    "text": text_format,
    "tools": response_tools,
    "tool_choice": lambda value, param: value,  # checked against `tools` below
    "parallel_tool_calls": boolean(True),
    "stream": boolean(),
    "stream_options": lambda value, param: False,  # only `include_obfuscation` (no effect here)
    "previous_response_id": refused(
        "'previous_response_id' is not supported: responses are not stored (send the whole conversation in 'input')"
    ),  # fmt: skip
    "background": refused("'background' is not supported", (None, False)),
    "reasoning": refused("'reasoning' is not supported: this model does not reason"),
    "truncation": refused("'truncation' must be 'disabled'", (None, "disabled")),
    "include": refused("'include' is not supported", (None, [])),
}


def responses_request(body):
    req = parse(body, RESPONSES)
    if req.instructions is not None:
        req.input = [chat_message({"role": "system", "content": req.instructions}, "instructions"), *req.input]
    choice = req.tool_choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    req.tool_choice = chat_tool_choice(choice, req.tools)
    req.params = {
        "max_tokens": req.max_output_tokens, "temperature": req.temperature, "top_p": req.top_p,
        "repeat_penalty": 1.0, "repeat_penalty_last_n_token_count": 0, **req.text,  # OpenAI has no repeat penalty
    }  # fmt: skip
    return req


class Reply:
    """One response: its envelope, its output items, and (streamed) its events in order."""

    def __init__(self, req, writer):
        self.req, self.writer, self.sequence = req, writer, 0
        self.id, self.created = "resp_" + uuid.uuid4().hex[:24], int(time.time())
        self.output = []

    def response(self, status="in_progress", usage=None, reason=None):
        req = self.req
        choice = req.tool_choice if isinstance(req.tool_choice, str) else {"type": "function", **req.tool_choice}
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status, "model": req.model,
            "output": self.output, "usage": usage, "error": None, "instructions": req.instructions,
            "incomplete_details": {"reason": "max_output_tokens"} if reason == "length" else None,
            "max_output_tokens": req.max_output_tokens, "temperature": req.temperature, "top_p": req.top_p,
            "tools": [{"type": "function", "name": t["name"], "description": t["description"],
                       "parameters": json.loads(t["parameters"]), "strict": None} for t in req.tools],
            "tool_choice": choice,
            "parallel_tool_calls": req.parallel_tool_calls, "text": {"format": {"type": "text"}}, "metadata": {},
        }  # fmt: skip

    def finish(self, done):
        usage = {
            "input_tokens": done.usage.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": done.usage.generated_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": done.usage.prompt_tokens + done.usage.generated_tokens,
        }  # fmt: skip
        status = "incomplete" if done.finish_reason == "length" else "completed"
        return self.response(status, usage, done.finish_reason)

    def add(self, item):
        """A new output item, sent as added (its content follows in deltas); returns its output index."""
        self.output.append(item)
        self.event("response.output_item.added", output_index=len(self.output) - 1, item=item)
        return len(self.output) - 1

    def event(self, kind, **fields):
        self.sequence += 1
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.writer.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())

    def stream(self, events):
        """The documented event sequence: created, in_progress, each output item (added, its deltas, done), then
        completed; an error event if the generation fails."""
        self.writer.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-store")])
        self.event("response.created", response=self.response())
        self.event("response.in_progress", response=self.response())
        text, calls = None, {}  # the message item under way (its index), and each tool call's index
        try:
            with events:
                for event in events:
                    if isinstance(event, llm.ToolCallDelta):
                        if event.index > 0 and not self.req.parallel_tool_calls:
                            continue
                        text = self.end_text(text)
                        if event.index not in calls:
                            calls[event.index] = self.add(call_item(event.id, event.name, "", "in_progress"))
                        i = calls[event.index]
                        self.output[i]["arguments"] += event.arguments
                        item_id = self.output[i]["id"]
                        self.event("response.function_call_arguments.delta", item_id=item_id, output_index=i,
                                   delta=event.arguments)  # fmt: skip
                    elif event.text:
                        if text is None:
                            text = self.add(text_item("", "in_progress"))
                            self.event("response.content_part.added", item_id=self.output[text]["id"],
                                       output_index=text, content_index=0, part=text_part(""))  # fmt: skip
                        self.output[text]["content"][0]["text"] += event.text
                        self.event("response.output_text.delta", item_id=self.output[text]["id"], output_index=text,
                                   content_index=0, delta=event.text, logprobs=[])  # fmt: skip
                self.end_text(text)
                for i in calls.values():
                    item = self.output[i]
                    item["status"] = "completed"
                    self.event("response.function_call_arguments.done", item_id=item["id"], output_index=i,
                               arguments=item["arguments"])  # fmt: skip
                    self.event("response.output_item.done", output_index=i, item=item)
        except LlmError as error:  # the generation failed or was cancelled: an error event ends the stream
            self.event("error", code="server_error", message=error.message or "generation failed", param=None)
            return
        self.event("response.completed", response=self.finish(events.done))

    def end_text(self, index):
        """The done events of the message item under way, if any; returns None (no item under way)."""
        if index is not None:
            item = self.output[index]
            item["status"], part = "completed", item["content"][0]
            self.event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                       text=part["text"], logprobs=[])  # fmt: skip
            self.event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part)
            self.event("response.output_item.done", output_index=index, item=item)
        return None


def text_part(text):
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def text_item(text, status="completed"):
    item = {"type": "message", "id": "msg_" + uuid.uuid4().hex[:24], "status": status, "role": "assistant"}
    return {**item, "content": [text_part(text)]}


def call_item(call_id, name, arguments, status="completed"):
    item_id = "fc_" + uuid.uuid4().hex[:24]
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}  # fmt: skip


def handle_responses(req, writer, json_response):
    reply = Reply(req, writer)
    options = {"tools": req.tools if req.tool_choice != "none" else [], "tool_choice": req.tool_choice}
    if req.stream:
        return reply.stream(llm.chat_stream(req.input, req.model, **options, **req.params))
    out = llm.chat(req.input, req.model, **options, **req.params)
    if out.content:
        reply.output.append(text_item(out.content))
    for call in out.tool_calls if req.parallel_tool_calls else out.tool_calls[:1]:
        reply.output.append(call_item(call.id, call.name, call.arguments))
    return json_response(200, reply.finish(out))
