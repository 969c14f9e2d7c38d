"""openai-compat: OpenAI's `/v1/completions` and `/v1/chat/completions` as a guest component on `llm`.

Supported request fields: model, prompt (completions; a string or a list of one string), messages (chat),
max_tokens (chat also max_completion_tokens), temperature, top_p, stop (a string or a list), seed, n (1 only),
stream, stream_options.include_usage. Responses carry finish_reason ("stop" or "length") and usage; with
`stream: true` they are server-sent events ending with `data: [DONE]`. Errors use OpenAI's
{"error": {"message", "type", "param", "code"}} shape. GET /v1/models lists the default model.
"""

import json
import time
import uuid

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import http, llm

DEFAULT_MODEL = "gemma-3-270m"
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


class BadRequest(Exception):
    def __init__(self, message, param=None, status=400, code=None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


def json_response(status, value):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def error_response(error):
    kind = "invalid_request_error" if error.status < 500 else "server_error"
    body = {"error": {"message": str(error), "type": kind, "param": error.param, "code": error.code}}
    return json_response(error.status, body)


def llm_error(error):
    """A WIT `error` from the host as an OpenAI error."""
    value = error.value
    if isinstance(value, llm.Error_ModelNotSupported):
        return BadRequest("the model does not exist or is not allowed", "model", 404, "model_not_found")
    if isinstance(value, llm.Error_InvalidInput):
        return BadRequest(value.value)
    return BadRequest(getattr(value, "value", "") or "generation failed", status=500)


def params_from(body, default_max_tokens):
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise BadRequest("stop must be a string or a list of strings", "stop")
    if body.get("n", 1) != 1:
        raise BadRequest("only n = 1 is supported", "n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", default_max_tokens))
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    return llm.InferencingParams(
        max_tokens=max_tokens,
        repeat_penalty=1.0,  # OpenAI has no multiplicative repeat penalty
        repeat_penalty_last_n_token_count=0,
        stop=stop,
        temperature=float(1.0 if temperature is None else temperature),
        top_k=0,
        top_p=float(1.0 if top_p is None else top_p),
        seed=body.get("seed"),
        constraint=None,
        logprobs=None,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        logit_bias=[],
    )


def chat_prompt(messages):
    """Gemma's chat template; system messages are folded into the next user turn (Gemma has no system role)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", "messages")
    turns, system = [], []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if not isinstance(content, str):
            raise BadRequest("each message needs string content", "messages")
        if role == "system" or role == "developer":
            system.append(content)
        elif role == "user":
            text = "\n\n".join([*system, content])
            system = []
            turns.append(f"<start_of_turn>user\n{text}<end_of_turn>\n")
        elif role == "assistant":
            turns.append(f"<start_of_turn>model\n{content}<end_of_turn>\n")
        else:
            raise BadRequest(f"unsupported role {role!r}", "messages")
    return "".join(turns) + "<start_of_turn>model\n"


def usage_json(usage):
    prompt, completion = usage.prompt_token_count, usage.generated_token_count
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def finish(reason):
    return reason.name.lower().replace("_", "-").replace("content-filter", "content_filter")


class Api:
    def __init__(self, kind, body):
        self.chat = kind == "chat"
        self.model = body.get("model") or DEFAULT_MODEL
        if not isinstance(self.model, str):
            raise BadRequest("model must be a string", "model")
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.object = "chat.completion" if self.chat else "text_completion"
        if self.chat:
            self.prompt = chat_prompt(body.get("messages"))
            self.params = params_from(body, None)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            if not isinstance(prompt, str):
                raise BadRequest("prompt must be a string (or a list of one string)", "prompt")
            self.prompt = prompt
            self.params = params_from(body, COMPLETIONS_DEFAULT_MAX_TOKENS)
        self.stream = bool(body.get("stream"))
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def envelope(self, choices, chunk=False, usage=None):
        value = {
            "id": self.id,
            "object": self.object + (".chunk" if chunk and self.chat else ""),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            value["usage"] = usage
        return value

    def choice(self, text, reason, chunk=False, first=False):
        if not self.chat:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        if chunk:
            delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": reason,
        }

    def complete(self):
        result = llm.infer(self.model, self.prompt, self.params)
        choice = self.choice(result.text, finish(result.finish_reason))
        return json_response(200, self.envelope([choice], usage=usage_json(result.usage)))

    def complete_streaming(self, writer):
        stream = llm.infer_stream(self.model, self.prompt, self.params)  # input errors are reported here
        writer.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-store")])

        def send(value):
            writer.write(f"data: {json.dumps(value)}\n\n".encode())

        first = True
        with stream:
            while True:
                event = stream.next()
                if isinstance(event, llm.StreamEvent_Chunk):
                    if event.value.text or first:
                        send(self.envelope([self.choice(event.value.text, None, True, first)], chunk=True))
                        first = False
                    continue
                done = event.value
                send(self.envelope([self.choice("", finish(done.finish_reason), True, first)], chunk=True))
                if self.include_usage:
                    send(self.envelope([], chunk=True, usage=usage_json(done.usage)))
                break
        writer.write(b"data: [DONE]\n\n")
        return http.Response(status=200, headers=[], body=b"")


def models():
    info = llm.get_model_info(DEFAULT_MODEL)
    return json_response(200, {"object": "list", "data": [{"id": info.name, "object": "model", "owned_by": "llmhost"}]})


class Handler(exports.Handler):
    def handle(self, request, writer):
        path = request.path_with_query.split("?", 1)[0].rstrip("/")
        try:
            if request.method == "GET" and path == "/v1/models":
                return models()
            kinds = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
            if path not in kinds:
                raise BadRequest(f"no route {request.method} {path}", status=404, code="not_found")
            if request.method != "POST":
                raise BadRequest(f"{path} takes POST", status=405)
            try:
                body = json.loads(bytes(request.body))
            except ValueError:
                raise BadRequest("the body must be JSON") from None
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            api = Api(kinds[path], body)
            return api.complete_streaming(writer) if api.stream else api.complete()
        except BadRequest as error:
            return error_response(error)
        except Err as error:
            if isinstance(error.value, (http.WriteError_Closed, http.WriteError_Invalid)):
                return http.Response(status=200, headers=[], body=b"")  # the client left mid-stream
            return error_response(llm_error(error))
