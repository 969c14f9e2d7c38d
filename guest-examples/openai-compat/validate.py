"""Request checking for openai-compat: one table of fields per route, in plain Python (no pydantic in the guest).

Every check raises `BadRequest` naming the offending `param` the way OpenAI does (`messages[1].content`), so a
malformed request (wrong types included) gets a 400 in OpenAI's error shape and never reaches the model. Fields
OpenAI defines but this server cannot honour are refused, never dropped silently, and so are unknown fields. A
checked request carries `params`: the keywords of the guest SDK's `llm.infer`, `llm.chat`, `Sequence.stream`.
"""

import json
import re
from types import SimpleNamespace

from checks import BadRequest, array, boolean, is_number, model, number, obj, refused, string, wrong

MAX_N = 8  # choices per request: they decode together in one batch, one sequence slot each
MAX_STOP = 4  # OpenAI's limit
MAX_LOGIT_BIAS = 1024  # the host's limit
MAX_INPUTS = 2048  # `input` items of one embeddings request: OpenAI's limit (the vectors of more would crowd the guest)
PENALTY_WINDOW = 256  # OpenAI's penalties count every earlier occurrence; the host's, this many recent tokens
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}

# Accepted, with no effect on the answer (metadata, routing hints of OpenAI's platform).
IGNORED = {"user", "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier"}
# Defined by OpenAI, refused here (with the reason in the message).
REFUSED = {
    "functions": "the deprecated `functions` are not supported: use `tools`",
    "function_call": "the deprecated `function_call` is not supported: use `tool_choice`",
    "audio": "audio output is not supported", "modalities": "only text output is supported",
    "prediction": "predicted outputs are not supported", "web_search_options": "web search is not supported",
    "reasoning_effort": "this model does not reason", "verbosity": "`verbosity` is not supported",
}  # fmt: skip


def stop(value, param):
    values = [] if value is None else [value] if isinstance(value, str) else value
    expected = "a string or an array of strings"
    if isinstance(values, list) and len(values) > MAX_STOP:
        raise BadRequest(f"'{param}' takes at most {MAX_STOP} sequences; got {len(values)}", param)
    return array(values, param, lambda s, p: string(s, p, allow_empty=False), expected)


def stream_options(value, param):
    if value is None:
        return False
    for key in obj(value, param):
        if key != "include_usage":
            raise BadRequest(f"Unrecognized stream option: {key}", f"{param}.{key}")
    return boolean()(value.get("include_usage"), f"{param}.include_usage")


def logit_bias(value, param):
    if value is None:
        return {}
    if len(obj(value, param)) > MAX_LOGIT_BIAS:
        raise BadRequest(f"'{param}' takes at most {MAX_LOGIT_BIAS} entries", param)
    for key, bias in value.items():
        if not key.isdigit():
            raise BadRequest(f"'{param}' keys are token ids (integers as strings); got {key!r}", param)
        if not is_number(bias) or not -100 <= bias <= 100:
            raise BadRequest(f"'{param}[{key}]' must be a number in [-100, 100]", param)
    return {int(key): float(bias) for key, bias in value.items()}


def text_part(part, param):
    kind = obj(part, param).get("type")
    if kind != "text":
        what = f"content parts of type {kind!r}" if isinstance(kind, str) else "content parts without a type"
        raise BadRequest(f"{what} are not supported (text only)", f"{param}.type")
    return string(part.get("text"), f"{param}.text")


def content(value, param, allow_null=False):
    """A message's content: a string, or an array of text parts (joined)."""
    if value is None and allow_null or isinstance(value, str):
        return value
    return "".join(array(value, param, text_part, "a string or an array of content parts"))


def tool_call(call, param):
    if obj(call, param).get("type", "function") != "function":
        raise BadRequest(f"'{param}.type' must be 'function'", f"{param}.type")
    function = obj(call.get("function"), f"{param}.function")
    return {
        "id": string(call.get("id"), f"{param}.id", allow_empty=False),
        "name": string(function.get("name"), f"{param}.function.name", allow_empty=False),
        "arguments": string(function.get("arguments"), f"{param}.function.arguments"),
    }


def message(value, param):
    """A message as the guest SDK's dict (`developer` as `system`)."""
    role = obj(value, param).get("role")
    if role not in ROLES:
        raise BadRequest(f"'{param}.role' must be one of {', '.join(ROLES)}; got {role!r}", f"{param}.role")
    if "name" in value:
        string(value["name"], f"{param}.name")
    calls = value.get("tool_calls") if role == "assistant" else None
    calls = [] if calls is None else array(calls, f"{param}.tool_calls", tool_call)
    call_id = string(value.get("tool_call_id"), f"{param}.tool_call_id", False) if role == "tool" else None
    text = content(value.get("content"), f"{param}.content", allow_null=bool(calls))
    return {"role": ROLES[role], "content": text, "tool_calls": calls, "tool_call_id": call_id}


def messages(value, param):
    if value == []:
        raise BadRequest(f"'{param}' must hold at least one message", param, code="empty_array")
    return array(value, param, message)


def tool(value, param):
    """A tool as the guest SDK's dict ({"name", "description", "parameters": JSON text})."""
    if obj(value, param).get("type") != "function":
        raise BadRequest(f"'{param}.type' must be 'function'; got {value.get('type')!r}", f"{param}.type")
    function = obj(value.get("function"), f"{param}.function")
    name = string(function.get("name"), f"{param}.function.name")
    if not TOOL_NAME.match(name):
        raise BadRequest(
            f"'{param}.function.name' must match {TOOL_NAME.pattern}; got {name!r}", f"{param}.function.name"
        )
    description = function.get("description")
    if description is not None:
        string(description, f"{param}.function.description")
    parameters = obj(function.get("parameters", {"type": "object", "properties": {}}), f"{param}.function.parameters")
    boolean()(function.get("strict"), f"{param}.function.strict")
    return {"name": name, "description": description, "parameters": json.dumps(parameters)}


def tools(value, param):
    specs = [] if value is None else array(value, param, tool)
    names = [spec["name"] for spec in specs]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise BadRequest(f"tool name {name!r} is defined twice", f"{param}[{i}].function.name")
    return specs


def tool_choice(value, specs):
    """The guest SDK's `tool_choice`: "none", "auto", "required" or {"name": NAME}."""
    if value is None:
        return "auto" if specs else "none"
    if not specs:
        raise BadRequest("'tool_choice' is only allowed when 'tools' are specified", "tool_choice")
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise BadRequest(
                f"'tool_choice' must be none, auto, required or a named tool; got {value!r}", "tool_choice"
            )
        return value
    if obj(value, "tool_choice").get("type") != "function":
        raise BadRequest("'tool_choice.type' must be 'function'", "tool_choice.type")
    name = string(obj(value.get("function"), "tool_choice.function").get("name"), "tool_choice.function.name")
    if name not in [s["name"] for s in specs]:
        raise BadRequest(f"'tool_choice' names the tool {name!r}, which is not in 'tools'", "tool_choice.function.name")
    return {"name": name}


def response_format(value, param):
    """The guest SDK's structured-output keyword: {}, {"json_object": True} or {"json_schema": schema text}."""
    kind = "text" if value is None else obj(value, param).get("type")
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        spec = obj(value.get("json_schema"), f"{param}.json_schema")
        string(spec.get("name"), f"{param}.json_schema.name", allow_empty=False)
        boolean()(spec.get("strict"), f"{param}.json_schema.strict")
        return {"json_schema": json.dumps(obj(spec.get("schema", {}), f"{param}.json_schema.schema"))}
    raise BadRequest(f"'{param}.type' must be text, json_object or json_schema; got {kind!r}", f"{param}.type")


def token_id(value, param):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"'{param}' must be a token id (an integer >= 0); got {json.dumps(value)}", param)
    return value


def texts(value, param, kind="prompts"):
    """The shapes OpenAI allows for `prompt` and `input`: a string, a list of strings, a list of token ids, or a
    list of lists of token ids. Returns a list of items (a string, or a list of ids), and for each the name of its
    elements' parent (`input[1]`, or `input` for one flat list), so a bad id is named `input[1][3]`."""
    expected = "a string, an array of strings, an array of token ids or an array of arrays of token ids"
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise wrong(param, expected, value)
    if not value:
        raise BadRequest(f"'{param}' must not be empty", param, code="empty_array")
    if all(is_number(v) for v in value):  # one prompt of token ids
        return [[token_id(v, f"{param}[{j}]") for j, v in enumerate(value)]], [param]
    items, names = [], []
    for i, item in enumerate(value):
        name = f"{param}[{i}]"
        if isinstance(item, list):
            if not item:
                raise BadRequest(f"'{name}' must hold at least one token id", name, code="empty_array")
            items.append([token_id(v, f"{name}[{j}]") for j, v in enumerate(item)])
        elif isinstance(item, str):
            if not item and kind == "input":
                raise BadRequest(f"'{name}' must not be empty", name)
            items.append(item)
        else:
            raise wrong(name, "a string or an array of token ids", item)
        names.append(name)
    return items, names


# -- the routes' fields, checked in this order ----------------------------------------------------------------------

SAMPLING = {
    "model": model,
    "max_tokens": number(1, None, None, int),  # OpenAI's defaults: none for chat, 16 for completions
    "temperature": number(0, 2, 1.0),
    "top_p": number(0, 1, 1.0, float, low_open=True),
    "top_k": number(0, None, 0, int),  # an extension (llama.cpp's, vLLM's)
    # Extensions (llama.cpp's server's names): the host's multiplicative repeat penalty and the window of recent
    # tokens every penalty looks at. `llmhost run --connect` sends them, so its runs equal local ones.
    "repeat_penalty": number(0, None, 1.0, low_open=True),
    "repeat_last_n": number(0, 2**32 - 1, None, int),
    "n": number(1, MAX_N, 1, int),
    "seed": number(-(2**63), 2**64 - 1, None, int),
    "stop": stop,
    "stream": boolean(),
    "stream_options": stream_options,  # -> include_usage
    "frequency_penalty": number(-2, 2, 0.0),
    "presence_penalty": number(-2, 2, 0.0),
    "logit_bias": logit_bias,
}
CHAT = {
    **SAMPLING,
    "max_completion_tokens": number(1, None, None, int),
    "messages": messages,
    "logprobs": boolean(),
    "top_logprobs": number(0, 20, None, int),
    "tools": tools,
    "tool_choice": lambda value, param: value,  # checked against `tools` below
    "parallel_tool_calls": boolean(True),
    "response_format": response_format,
}
COMPLETION = {
    **SAMPLING,
    "max_tokens": number(0, None, 16, int),  # 0: with `echo`, the prompt alone (how harnesses score a text)
    "prompt": texts,
    "logprobs": number(0, 20, None, int),  # the legacy `logprobs`: how many top tokens (OpenAI: 5; the host: 20)
    "echo": boolean(),
    "suffix": refused("'suffix' (insertion) is not supported"),
    "best_of": number(1, MAX_N, None, int),
    # Structured output, as chat's `response_format`; and extensions (`llmhost run --connect` sends them, so a
    # constrained run against this server equals a local one): the host's `regex`, `grammar` (GBNF or %llguidance)
    # and `choice` constraints, and vLLM's `return_tokens_as_token_ids` (logprobs' tokens as "token_id:N").
    "response_format": response_format,
    "regex": lambda value, param: None if value is None else string(value, param, allow_empty=False),
    "grammar": lambda value, param: None if value is None else string(value, param, allow_empty=False),
    "choice": lambda value, param: None if value is None else array(value, param, string),
    "return_tokens_as_token_ids": boolean(),
}
EMBEDDING = {
    "model": model,
    "input": lambda value, param: texts(value, param, "input"),
    "encoding_format": refused("'encoding_format' must be float or base64", (None, "", "float", "base64")),
    "dimensions": refused("'dimensions' is not supported: vectors have the model's own size"),
}
# The SDK keywords that take a field's value as it is.
PARAMS = ("max_tokens", "temperature", "top_p", "top_k", "stop", "frequency_penalty", "presence_penalty", "logit_bias")


def parse(body, fields):
    for name in body:
        if name in REFUSED:
            raise BadRequest(REFUSED[name], name, code="unsupported_parameter")
        if name not in fields and name not in IGNORED:
            raise BadRequest(f"Unrecognized request argument supplied: {name}", name, code="unknown_parameter")
    req = SimpleNamespace(**{name: check(body.get(name), name) for name, check in fields.items()})
    if "stream" in fields:
        if body.get("stream_options") is not None and not req.stream:
            raise BadRequest("'stream_options' is only allowed when 'stream' is true", "stream_options")
        req.include_usage = req.stream_options
    return req


def sampling_params(req, logprobs, **structured):
    penalised = req.frequency_penalty != 0 or req.presence_penalty != 0 or req.repeat_penalty != 1.0
    window = req.repeat_last_n if req.repeat_last_n is not None else PENALTY_WINDOW if penalised else 0
    req.params = {
        **{name: getattr(req, name) for name in PARAMS},
        "repeat_penalty": req.repeat_penalty,  # 1.0 unless asked for: OpenAI has no multiplicative repeat penalty
        "repeat_penalty_last_n_token_count": window,
        "logprobs": logprobs,
        **structured,
    }
    return req


def chat_request(body):
    req = parse(body, CHAT)
    if req.max_completion_tokens is not None:
        req.max_tokens = req.max_completion_tokens
    if req.top_logprobs is not None and not req.logprobs:
        raise BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    req.tool_choice = tool_choice(req.tool_choice, req.tools)
    if req.n > 1 and req.tools and req.tool_choice != "none":
        raise BadRequest("'n' > 1 cannot be combined with tools (one choice per request then)", "n")
    return sampling_params(req, (req.top_logprobs or 0) if req.logprobs else None, **req.response_format)


def completion_request(body):
    req = parse(body, COMPLETION)
    req.prompt, req.prompt_names = req.prompt
    if req.max_tokens == 0 and not req.echo:
        raise BadRequest("'max_tokens' 0 returns nothing without 'echo': ask for at least 1 token", "max_tokens")
    if req.best_of is not None and req.best_of != req.n:
        raise BadRequest("'best_of' other than 'n' is not supported", "best_of")
    if len(req.prompt) * req.n > MAX_N:
        raise BadRequest(f"at most {MAX_N} choices per request (prompts × n)", "n")
    extensions = {name: getattr(req, name) for name in ("regex", "grammar", "choice") if getattr(req, name) is not None}
    structured = {**req.response_format, **extensions}
    if len(structured) > 1:
        given = ", ".join(["response_format"] * bool(req.response_format) + list(extensions))
        raise BadRequest(f"give at most one of response_format, regex, grammar, choice (got {given})", None)
    if req.choice == []:
        raise BadRequest("'choice' must hold at least one option", "choice", code="empty_array")
    return sampling_params(req, req.logprobs, **structured)


def tokenize_request(body):
    """POST /v1/tokenize (an extension): `prompt`'s token ids as the host's `tokenize` gives them."""
    return parse(body, {"model": model, "prompt": string})


def embedding_request(body):
    req = parse(body, EMBEDDING)
    req.input, req.input_names = req.input
    if len(req.input) > MAX_INPUTS:
        message = f"'input' holds {len(req.input)} items; at most {MAX_INPUTS} per request (send the rest in another)"
        raise BadRequest(message, "input", code="invalid_value")
    return req


def invalid_text(value, param=""):
    """The param (`messages[1].content`) of the first string, key or value, of a parsed JSON body that is not valid
    Unicode, or None. JSON can carry a lone surrogate (`"\\ud800"`), which no UTF-8 string (a WIT `string`) can."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return param or "body"
    elif isinstance(value, dict):
        for key, item in value.items():
            name = f"{param}.{key}" if param else key
            if invalid_text(key) is not None:
                return (param + "." if param else "") + key.encode("utf-8", "backslashreplace").decode()
            found = invalid_text(item, name)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = invalid_text(item, f"{param}[{i}]")
            if found is not None:
                return found
    return None


def check_unicode(body):
    """A 400 naming the field when a string of `body` is not valid Unicode (one C-speed encode when none is)."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        param = invalid_text(body)
        raise BadRequest(
            f"'{param}' is not valid Unicode: it holds a lone surrogate (an unpaired \\ud800-\\udfff escape)",
            param,
            code="invalid_value",
        ) from None
