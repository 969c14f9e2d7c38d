"""Request validation for openai-compat, in plain Python (no pydantic in the guest).

Every check raises `BadRequest` naming the offending `param` the way OpenAI does (`messages[1].content`,
`tools[0].function.name`), so a malformed request — wrong types included — gets a 400 in OpenAI's error shape and
never reaches the model, let alone traps the guest. Fields OpenAI defines but this server cannot honour are
refused with 400, never dropped silently; unknown fields are refused as OpenAI refuses them.
"""

import json
import math
import re

MAX_N = 8  # choices per request: they decode together in one batch, one sequence slot each
MAX_STOP = 4  # OpenAI's limit
MAX_TOP_LOGPROBS = 20  # chat (the host's limit too)
MAX_COMPLETION_LOGPROBS = 5  # /v1/completions' legacy `logprobs`
MAX_LOGIT_BIAS = 1024  # the host's limit
# OpenAI's penalties count every earlier occurrence; the host applies them over a window of recent tokens
# (prompt included), this long.
PENALTY_WINDOW = 256
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROLES = ("system", "developer", "user", "assistant", "tool")

# Accepted, with no effect on the answer (metadata, routing hints of OpenAI's platform).
IGNORED = {"user", "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier"}
# Defined by OpenAI, refused here (with the reason in the message).
REFUSED = {
    "functions": "the deprecated `functions` are not supported: use `tools`",
    "function_call": "the deprecated `function_call` is not supported: use `tool_choice`",
    "audio": "audio output is not supported",
    "modalities": "only text output is supported",
    "prediction": "predicted outputs are not supported",
    "web_search_options": "web search is not supported",
    "reasoning_effort": "this model does not reason",
    "verbosity": "`verbosity` is not supported",
}

CHAT_FIELDS = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "stop",
    "seed", "stream", "stream_options", "logprobs", "top_logprobs", "frequency_penalty", "presence_penalty",
    "logit_bias", "response_format", "tools", "tool_choice", "parallel_tool_calls",
}  # fmt: skip
COMPLETION_FIELDS = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "stop", "seed", "stream",
    "stream_options", "logprobs", "frequency_penalty", "presence_penalty", "logit_bias", "echo", "best_of",
    "suffix",
}  # fmt: skip
EMBEDDING_FIELDS = {"model", "input", "encoding_format", "dimensions"}


class BadRequest(Exception):
    """An OpenAI error: `{"error": {"message", "type", "param", "code"}}` with an HTTP status."""

    def __init__(self, message, param=None, status=400, code=None, kind=None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")

    def json(self):
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


def _type_name(value):
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _wrong(param, expected, value):
    return BadRequest(f"Invalid type for '{param}': expected {expected}, but got {_type_name(value)}.", param)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(body, name, low, high, default, low_open=False):
    value = body.get(name)
    if value is None:
        return default
    if not is_number(value) or not math.isfinite(value):
        raise _wrong(name, "a number", value)
    if value < low or value > high or (low_open and value == low):
        bound = f"({low}" if low_open else f"[{low}"
        raise BadRequest(f"'{name}' must be in {bound}, {high}]; got {value}", name, code="invalid_value")
    return float(value)


def integer(body, name, low, high, default, param=None):
    value = body.get(name)
    param = param or name
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong(param, "an integer", value)
    if value < low or (high is not None and value > high):
        limit = f"at least {low}" if high is None else f"between {low} and {high}"
        raise BadRequest(f"'{param}' must be {limit}; got {value}", param, code="invalid_value")
    return value


def boolean(body, name, default=False):
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong(name, "a boolean", value)
    return value


def string(value, param, allow_empty=True):
    if not isinstance(value, str):
        raise _wrong(param, "a string", value)
    if not allow_empty and not value:
        raise BadRequest(f"'{param}' must not be empty", param, code="invalid_value")
    return value


def obj(value, param):
    if not isinstance(value, dict):
        raise _wrong(param, "an object", value)
    return value


def check_fields(body, allowed):
    for name in body:
        if name in REFUSED:
            raise BadRequest(REFUSED[name], name, code="unsupported_parameter")
        if name not in allowed and name not in IGNORED:
            raise BadRequest(f"Unrecognized request argument supplied: {name}", name, code="unknown_parameter")


class Sampling:
    """The fields `/v1/chat/completions` and `/v1/completions` share, checked."""

    def __init__(self, body, chat):
        self.model = body.get("model")
        if self.model is None:
            raise BadRequest("you must provide a model parameter", "model", code="missing_required_parameter")
        string(self.model, "model", allow_empty=False)
        default_max = None if chat else 16  # OpenAI's defaults: none for chat, 16 for completions
        max_tokens = integer(body, "max_tokens", 1, None, default_max)
        if chat:
            max_tokens = integer(body, "max_completion_tokens", 1, None, max_tokens)
        self.max_tokens = max_tokens
        self.temperature = number(body, "temperature", 0, 2, 1.0)
        self.top_p = number(body, "top_p", 0, 1, 1.0, low_open=True)
        self.top_k = integer(body, "top_k", 0, None, 0)  # an extension (llama.cpp's, vLLM's)
        self.n = integer(body, "n", 1, MAX_N, 1)
        self.seed = integer(body, "seed", -(2**63), 2**64 - 1, None)
        self.stop = self._stop(body.get("stop"))
        self.stream = boolean(body, "stream")
        self.include_usage = False
        options = body.get("stream_options")
        if options is not None:
            if not self.stream:
                raise BadRequest("'stream_options' is only allowed when 'stream' is true", "stream_options")
            obj(options, "stream_options")
            for key in options:
                if key != "include_usage":
                    raise BadRequest(f"Unrecognized stream option: {key}", f"stream_options.{key}")
            self.include_usage = boolean(options, "include_usage")
            if "include_usage" in options and not isinstance(options["include_usage"], bool):
                raise _wrong("stream_options.include_usage", "a boolean", options["include_usage"])
        self.frequency_penalty = number(body, "frequency_penalty", -2, 2, 0.0)
        self.presence_penalty = number(body, "presence_penalty", -2, 2, 0.0)
        self.logit_bias = self._logit_bias(body.get("logit_bias"))

    @staticmethod
    def _stop(stop):
        if stop is None:
            return []
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list):
            raise _wrong("stop", "a string or an array of strings", stop)
        if len(stop) > MAX_STOP:
            raise BadRequest(f"'stop' takes at most {MAX_STOP} sequences; got {len(stop)}", "stop")
        for i, s in enumerate(stop):
            string(s, f"stop[{i}]", allow_empty=False)
        return stop

    @staticmethod
    def _logit_bias(bias):
        if bias is None:
            return []
        obj(bias, "logit_bias")
        if len(bias) > MAX_LOGIT_BIAS:
            raise BadRequest(f"'logit_bias' takes at most {MAX_LOGIT_BIAS} entries", "logit_bias")
        entries = []
        for key, value in bias.items():
            if not (isinstance(key, str) and key.isdigit()):
                raise BadRequest(f"'logit_bias' keys are token ids (integers as strings); got {key!r}", "logit_bias")
            if not is_number(value) or not -100 <= value <= 100:
                raise BadRequest(f"'logit_bias[{key}]' must be a number in [-100, 100]", "logit_bias")
            entries.append((int(key), float(value)))
        return entries


def _text_content(content, param, allow_null=False):
    """A message's content: a string, or an array of text parts (joined)."""
    if content is None and allow_null:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            obj(part, f"{param}[{i}]")
            kind = part.get("type")
            if kind != "text":
                what = f"content parts of type {kind!r}" if isinstance(kind, str) else "content parts without a type"
                raise BadRequest(f"{what} are not supported (text only)", f"{param}[{i}].type")
            texts.append(string(part.get("text"), f"{param}[{i}].text"))
        return "".join(texts)
    raise _wrong(param, "a string or an array of content parts", content)


class Message:
    def __init__(self, role, content, tool_calls=(), tool_call_id=None):
        self.role, self.content, self.tool_calls, self.tool_call_id = role, content, list(tool_calls), tool_call_id


def messages(value):
    if not isinstance(value, list):
        raise _wrong("messages", "an array", value)
    if not value:
        raise BadRequest("'messages' must hold at least one message", "messages", code="empty_array")
    out = []
    for i, message in enumerate(value):
        param = f"messages[{i}]"
        obj(message, param)
        role = message.get("role")
        if role not in ROLES:
            raise BadRequest(f"'{param}.role' must be one of {', '.join(ROLES)}; got {role!r}", f"{param}.role")
        if "name" in message:
            string(message["name"], f"{param}.name")
        calls = []
        if role == "assistant":
            raw = message.get("tool_calls")
            if raw is not None:
                if not isinstance(raw, list):
                    raise _wrong(f"{param}.tool_calls", "an array", raw)
                for j, call in enumerate(raw):
                    cp = f"{param}.tool_calls[{j}]"
                    obj(call, cp)
                    if call.get("type", "function") != "function":
                        raise BadRequest(f"'{cp}.type' must be 'function'", f"{cp}.type")
                    function = obj(call.get("function"), f"{cp}.function")
                    calls.append(
                        (
                            string(call.get("id"), f"{cp}.id", allow_empty=False),
                            string(function.get("name"), f"{cp}.function.name", allow_empty=False),
                            string(function.get("arguments"), f"{cp}.function.arguments"),
                        )
                    )
            content = _text_content(message.get("content"), f"{param}.content", allow_null=bool(calls))
        else:
            content = _text_content(message.get("content"), f"{param}.content")
        call_id = None
        if role == "tool":
            call_id = string(message.get("tool_call_id"), f"{param}.tool_call_id", allow_empty=False)
        out.append(Message(role, content, calls, call_id))
    return out


class ToolSpec:
    def __init__(self, name, description, parameters):
        self.name, self.description, self.parameters = name, description, parameters


def tools(value):
    if value is None:
        return []
    if not isinstance(value, list):
        raise _wrong("tools", "an array", value)
    out, names = [], set()
    for i, tool in enumerate(value):
        param = f"tools[{i}]"
        obj(tool, param)
        if tool.get("type") != "function":
            raise BadRequest(f"'{param}.type' must be 'function'; got {tool.get('type')!r}", f"{param}.type")
        function = obj(tool.get("function"), f"{param}.function")
        name = string(function.get("name"), f"{param}.function.name")
        if not TOOL_NAME.match(name):
            raise BadRequest(
                f"'{param}.function.name' must match ^[a-zA-Z0-9_-]{{1,64}}$; got {name!r}", f"{param}.function.name"
            )
        if name in names:
            raise BadRequest(f"tool name {name!r} is defined twice", f"{param}.function.name")
        names.add(name)
        description = function.get("description")
        if description is not None:
            string(description, f"{param}.function.description")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        obj(parameters, f"{param}.function.parameters")
        if "strict" in function and not isinstance(function["strict"], bool):
            raise _wrong(f"{param}.function.strict", "a boolean", function["strict"])
        out.append(ToolSpec(name, description, json.dumps(parameters)))
    return out


def tool_choice(value, specs):
    """("none" | "auto" | "required" | "named", name or None)."""
    if value is None:
        return ("auto", None) if specs else ("none", None)
    if not specs:
        raise BadRequest("'tool_choice' is only allowed when 'tools' are specified", "tool_choice")
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise BadRequest(
                f"'tool_choice' must be none, auto, required or a named tool; got {value!r}", "tool_choice"
            )
        return value, None
    obj(value, "tool_choice")
    if value.get("type") != "function":
        raise BadRequest("'tool_choice.type' must be 'function'", "tool_choice.type")
    name = string(obj(value.get("function"), "tool_choice.function").get("name"), "tool_choice.function.name")
    if name not in [s.name for s in specs]:
        raise BadRequest(f"'tool_choice' names the tool {name!r}, which is not in 'tools'", "tool_choice.function.name")
    return "named", name


def response_format(value):
    """None, ("json_object", None) or ("json_schema", schema text)."""
    if value is None:
        return None
    obj(value, "response_format")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ("json_object", None)
    if kind == "json_schema":
        spec = obj(value.get("json_schema"), "response_format.json_schema")
        string(spec.get("name"), "response_format.json_schema.name", allow_empty=False)
        schema = obj(spec.get("schema", {}), "response_format.json_schema.schema")
        if "strict" in spec and spec["strict"] is not None and not isinstance(spec["strict"], bool):
            raise _wrong("response_format.json_schema.strict", "a boolean", spec["strict"])
        return ("json_schema", json.dumps(schema))
    raise BadRequest(
        f"'response_format.type' must be text, json_object or json_schema; got {kind!r}", "response_format.type"
    )


class ChatRequest(Sampling):
    def __init__(self, body):
        check_fields(body, CHAT_FIELDS)
        super().__init__(body, chat=True)
        self.messages = messages(body.get("messages"))
        self.logprobs = boolean(body, "logprobs")
        self.top_logprobs = integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, None)
        if self.top_logprobs is not None and not self.logprobs:
            raise BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
        self.tools = tools(body.get("tools"))
        self.tool_choice = tool_choice(body.get("tool_choice"), self.tools)
        self.parallel_tool_calls = boolean(body, "parallel_tool_calls", True)
        self.response_format = response_format(body.get("response_format"))
        if self.n > 1 and self.tools and self.tool_choice[0] != "none":
            raise BadRequest("'n' > 1 cannot be combined with tools (one choice per request then)", "n")


class CompletionRequest(Sampling):
    def __init__(self, body):
        check_fields(body, COMPLETION_FIELDS)
        super().__init__(body, chat=False)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompts = [prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompts = prompt
        elif isinstance(prompt, list) and prompt and all(is_number(p) or isinstance(p, list) for p in prompt):
            raise BadRequest("token-id prompts are not supported: send text", "prompt")
        else:
            raise _wrong("prompt", "a string or a non-empty array of strings", prompt)
        self.prompts = prompts
        self.logprobs = integer(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS, None)
        if boolean(body, "echo"):
            raise BadRequest("'echo' is not supported", "echo")
        if body.get("suffix") is not None:
            raise BadRequest("'suffix' (insertion) is not supported", "suffix")
        best_of = integer(body, "best_of", 1, MAX_N, None)
        if best_of is not None and best_of != self.n:
            raise BadRequest("'best_of' other than 'n' is not supported", "best_of")
        if len(prompts) * self.n > MAX_N:
            raise BadRequest(f"at most {MAX_N} choices per request (prompts × n)", "n")


class EmbeddingRequest:
    def __init__(self, body):
        check_fields(body, EMBEDDING_FIELDS)
        self.model = string(body.get("model"), "model", allow_empty=False)
        value = body.get("input")
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not texts:
            raise _wrong("input", "a string or a non-empty array of strings", value)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                if is_number(text) or isinstance(text, list):
                    raise BadRequest("token-id input is not supported: send text", "input")
                raise _wrong(f"input[{i}]", "a string", text)
            if not text:
                raise BadRequest(f"'input[{i}]' must not be empty", "input")
        self.texts = texts
        self.encoding = body.get("encoding_format") or "float"
        if self.encoding not in ("float", "base64"):
            raise BadRequest("'encoding_format' must be float or base64", "encoding_format")
        if body.get("dimensions") is not None:
            raise BadRequest("'dimensions' is not supported: vectors have the model's own size", "dimensions")
