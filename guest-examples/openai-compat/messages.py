"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on the host's `chat`.

A request is checked here (Anthropic's fields, named as Anthropic names them: `messages.1.content.0.type`), then
mapped onto the request /v1/chat/completions takes (`validate.chat_request`), so both routes answer a conversation
alike: the model's own chat template, tool calls constrained by the host, the same sampling keywords and token
counts. `tool_use` blocks are the chat's tool calls, `tool_result` blocks its `tool` messages. Errors have
Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`; streaming is in messages_stream.py.
"""

import json
import traceback
import uuid

from checks import BadRequest, array, boolean, number, obj, string
from common import api_error, json_response, read_json
from componentize_py_types import Err
from llmhost_guest import LlmError, llm
from messages_stream import Generation, error_json, stop_reason, stream_message
from validate import TOOL_NAME, chat_request

MESSAGES_ROUTES = ("/v1/messages", "/v1/messages/count_tokens")
MAX_STOP_SEQUENCES = 16  # matched in the guest (messages_stream.Generation), each over the whole text
# Anthropic fields this server cannot honour: refused by name, never dropped silently.
REFUSED = {
    "thinking": "extended thinking is not supported: this model does not reason",
    "container": "containers are not supported", "mcp_servers": "MCP servers are not supported",
    "context_management": "context management is not supported",
}  # fmt: skip
IGNORED = {"service_tier"}  # accepted without effect
BLOCK_EXTRAS = {"cache_control", "citations"}  # accepted on a block, without effect (no prompt cache, no citations)


def keys(value, param, allowed):
    """Anthropic refuses keys it does not know (`extra inputs are not permitted`); so does this server."""
    for key in obj(value, param):
        if key not in allowed and key not in BLOCK_EXTRAS:
            raise BadRequest(f"{param}.{key}: Extra inputs are not permitted", f"{param}.{key}")


def text_block(block, param):
    keys(block, param, ("type", "text"))
    return string(block.get("text"), f"{param}.text")


def text_blocks(value, param):
    """A string, or a list of `text` blocks (joined, as chat's text parts are)."""
    if isinstance(value, str):
        return value
    blocks = array(value, param, obj, "a string or an array of content blocks")
    for i, block in enumerate(blocks):
        if block.get("type") != "text":
            raise BadRequest(f"{param}.{i}.type: only text blocks are supported here; got {block.get('type')!r}")
    return "".join(text_block(block, f"{param}.{i}") for i, block in enumerate(blocks))


def tool_result(block, param):
    keys(block, param, ("type", "tool_use_id", "content", "is_error"))
    boolean()(block.get("is_error"), f"{param}.is_error")  # accepted: the result's text says what went wrong
    content = "" if block.get("content") is None else text_blocks(block["content"], f"{param}.content")
    return {
        "role": "tool",
        "tool_call_id": string(block.get("tool_use_id"), f"{param}.tool_use_id"),
        "content": content,
    }


def tool_use(block, param):
    keys(block, param, ("type", "id", "name", "input"))
    call_id, name = string(block.get("id"), f"{param}.id", False), string(block.get("name"), f"{param}.name", False)
    arguments = json.dumps(obj(block.get("input"), f"{param}.input"))
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def message(value, param, role, previous_ids):
    """One Anthropic message as chat messages: an assistant turn (text and tool calls), or a user turn's tool
    results (each a `tool` message, answering a `tool_use` of the turn before) and then its text."""
    keys(value, param, ("role", "content"))
    content = value.get("content")
    blocks = (
        [{"type": "text", "text": content}] if isinstance(content, str) else array(content, f"{param}.content", obj)
    )
    texts, calls, results = [], [], []
    for j, block in enumerate(blocks):
        where, kind = f"{param}.content.{j}", block.get("type")
        if kind == "text":
            texts.append(text_block(block, where))
        elif kind == "tool_use" and role == "assistant":
            calls.append(tool_use(block, where))
        elif kind == "tool_result" and role == "user":
            results.append(tool_result(block, where))
            if results[-1]["tool_call_id"] not in previous_ids:
                raise BadRequest(f"{where}.tool_use_id: no tool_use block with this id in the previous message")
        else:
            allowed = "text and tool_use" if role == "assistant" else "text and tool_result"
            raise BadRequest(f"{where}.type: {role} messages take {allowed} blocks here; got {kind!r}", where)
    if role == "assistant":
        return [{"role": "assistant", "content": "".join(texts) if texts or not calls else None, "tool_calls": calls}]
    return results + ([{"role": "user", "content": "".join(texts)}] if texts or not results else [])


def messages(value, param):
    """Roles alternate, user first, and the last turn is the user's (an assistant prefill cannot be continued
    through the chat template, which opens a new turn): as chat messages."""
    if not isinstance(value, list) or not value:
        raise BadRequest(f"{param}: must be a non-empty array of messages", param)
    out, previous_ids = [], set()
    for i, item in enumerate(value):
        where = f"{param}.{i}"
        role = obj(item, where).get("role")
        if role not in ("user", "assistant"):
            raise BadRequest(f"{where}.role: must be 'user' or 'assistant'; got {role!r}", f"{where}.role")
        if role != ("user", "assistant")[i % 2]:
            raise BadRequest(f"{param}: roles must alternate between 'user' and 'assistant', starting with 'user'")
        turn = message(item, where, role, previous_ids)
        previous_ids = {call["id"] for m in turn for call in m.get("tool_calls", ())}
        out += turn
    if value[-1]["role"] == "assistant":
        raise BadRequest(f"{param}: the last message must be the user's (a prefilled assistant turn is not supported)")
    return out


def system(value, param):
    return None if value is None else text_blocks(value, param)


def stop_sequences(value, param):
    values = [] if value is None else array(value, param, lambda s, p: string(s, p, allow_empty=False))
    if len(values) > MAX_STOP_SEQUENCES:
        raise BadRequest(f"{param}: at most {MAX_STOP_SEQUENCES} stop sequences; got {len(values)}", param)
    return values


def metadata(value, param):
    if value is not None:
        keys(value, param, ("user_id",))
        if value.get("user_id") is not None:
            string(value["user_id"], f"{param}.user_id")
    return value


def tool(value, param):
    """A client tool as chat's function tool; server tools (`web_search_...`, `bash_...`) are refused."""
    keys(value, param, ("type", "name", "description", "input_schema"))
    if value.get("type") not in (None, "custom"):
        raise BadRequest(f"{param}.type: only client tools (custom) are supported; got {value.get('type')!r}")
    name = string(value.get("name"), f"{param}.name")
    if not TOOL_NAME.match(name):
        raise BadRequest(f"{param}.name: must match {TOOL_NAME.pattern}; got {name!r}", f"{param}.name")
    function = {"name": name, "parameters": obj(value.get("input_schema"), f"{param}.input_schema")}
    if value.get("description") is not None:
        function["description"] = string(value["description"], f"{param}.description")
    return {"type": "function", "function": function}


def tool_choice(value, param):
    """(chat's `tool_choice`, chat's `parallel_tool_calls`)."""
    if value is None:
        return None, True
    keys(value, param, ("type", "name", "disable_parallel_tool_use"))
    kind = value.get("type")
    parallel = not boolean()(value.get("disable_parallel_tool_use"), f"{param}.disable_parallel_tool_use")
    if kind == "tool":
        return {"type": "function", "function": {"name": string(value.get("name"), f"{param}.name")}}, parallel
    choices = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in choices:
        raise BadRequest(f"{param}.type: must be auto, any, tool or none; got {kind!r}", f"{param}.type")
    return choices[kind], parallel


def required(check):
    def checked(value, param):
        if value is None:
            raise BadRequest(f"{param}: Field required", param)
        return check(value, param)

    return checked


COUNT_FIELDS = {
    "model": required(lambda value, param: string(value, param, allow_empty=False)),
    "messages": required(messages),
    "system": system,
    "tools": lambda value, param: [] if value is None else array(value, param, tool),
    "tool_choice": tool_choice,
}
MESSAGE_FIELDS = {
    **COUNT_FIELDS,
    "max_tokens": required(number(1, None, None, int)),
    "stop_sequences": stop_sequences,
    "temperature": number(0, 1, 1.0),
    "top_p": number(0, 1, 1.0, float, low_open=True),
    "top_k": number(0, None, 0, int),
    "metadata": metadata,
    "stream": boolean(),
}


def messages_request(body, fields):
    """Anthropic's request checked, as the chat request of /v1/chat/completions (with `stops` and `stream`)."""
    for name in body:
        if name in REFUSED:
            raise BadRequest(f"{name}: {REFUSED[name]}", name)
        if name not in fields and name not in IGNORED:
            raise BadRequest(f"{name}: Extra inputs are not permitted", name)
    got = {name: check(body.get(name), name) for name, check in fields.items()}
    chat = {key: got[key] for key in ("model", "max_tokens", "temperature", "top_p", "top_k") if key in got}
    chat["messages"] = ([{"role": "system", "content": got["system"]}] if got["system"] is not None else []) + got[
        "messages"
    ]
    choice, parallel = got["tool_choice"]
    if got["tools"]:
        chat.update(tools=got["tools"], parallel_tool_calls=parallel)
    if choice is not None and (got["tools"] or choice != "none"):
        chat["tool_choice"] = choice
    req = chat_request(chat)  # the same checks and sampling keywords as /v1/chat/completions
    req.stops, req.stream = got.get("stop_sequences", []), got.get("stream", False)
    return req


def message_json(req, blocks, reason, stop_sequence, usage):
    return {
        "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": req.model,
        "content": blocks, "stop_reason": reason, "stop_sequence": stop_sequence,
        "usage": {"input_tokens": usage.prompt_tokens, "output_tokens": usage.generated_tokens},
    }  # fmt: skip


def tool_input(arguments):
    try:
        value = json.loads(arguments)
    except ValueError:  # not expected: the host constrains calls to JSON
        return {}
    return value if isinstance(value, dict) else {}


def tool_options(req):
    return {"tools": req.tools if req.tool_choice != "none" else [], "tool_choice": req.tool_choice}


def create(req, writer):
    """A whole message: through `llm.chat` as /v1/chat/completions answers; with stop sequences, through the
    chat stream with the sequences matched here (the host does not say which one ended a generation)."""
    if req.stream:
        return stream_message(req, writer, tool_options(req), prompt_tokens(req))
    if req.stops:
        generation = Generation(req, tool_options(req))
        texts, calls = [], {}
        for event in generation:
            if isinstance(event, str):
                texts.append(event)
            elif event.index == 0 or req.parallel_tool_calls:
                call = calls.setdefault(event.index, {"id": event.id, "name": event.name, "arguments": ""})
                call["arguments"] += event.arguments
        content, calls = "".join(texts), list(calls.values())
        finish, matched, usage = generation.finish_reason, generation.stop_sequence, generation.usage
    else:
        out = llm.chat(req.messages, req.model, **tool_options(req), **req.params)
        content, finish, matched, usage = out.content or "", out.finish_reason, None, out.usage
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in out.tool_calls]
        calls = calls if req.parallel_tool_calls else calls[:1]
    blocks = [{"type": "text", "text": content}] if content or not calls else []
    blocks += [
        {"type": "tool_use", "id": c["id"], "name": c["name"], "input": tool_input(c["arguments"])} for c in calls
    ]
    return json_response(200, message_json(req, blocks, stop_reason(finish, calls, matched), matched, usage))


def prompt_tokens(req):
    """The prompt's tokens as the chat counts them: the chat template's text (with the tools it is offered),
    tokenized the way a prompt is (its beginning-of-sequence token included)."""
    prompt = llm.apply_chat_template(req.messages, req.model, tools=tool_options(req)["tools"])
    return len(llm.tokenize(prompt, req.model))


def handle_messages(path, request, writer):
    """Every answer of these routes, errors included, in Anthropic's shapes (nothing raised to app.py's handler
    but the writer's own refusal)."""
    model = None
    try:
        if request.method != "POST":
            raise BadRequest(f"{path} takes POST", status=405)
        count = path.endswith("/count_tokens")
        req = messages_request(read_json(request), COUNT_FIELDS if count else MESSAGE_FIELDS)
        model = req.model
        return json_response(200, {"input_tokens": prompt_tokens(req)}) if count else create(req, writer)
    except BadRequest as error:
        return json_response(error.status, error_json(error))
    except LlmError as error:
        error = api_error(error, model, writer, "messages")
        return json_response(error.status, error_json(error))
    except Err:  # the writer refused (the client left): app.py's handler ends the exchange
        raise
    except Exception:  # a bug here: a 500 in Anthropic's shape, not a trap
        traceback.print_exc()
        return json_response(500, error_json(BadRequest("internal error in openai-compat", None, 500)))
