"""openai-compat: OpenAI's API as a guest component of the `http-app` world, served by `llmhost serve`.

POST /v1/chat/completions (on the host's `chat`: the model's own template, tools), POST /v1/completions,
POST /v1/embeddings, GET /v1/models and /v1/models/{id}. The fields supported, the extensions and what is refused
are listed in README.md; request checking is in validate.py, the model side in backend.py.

Guarantees: a malformed request gets a 400 in OpenAI's error shape naming the `param` (the guest never traps on
client input: any unexpected error is a 500 JSON error); a stream always ends with a finish_reason and
`data: [DONE]`, or with an error event (then `[DONE]`); a non-streamed answer that runs out of time is a JSON
error (504). Deadlines: the server stops a request `deadline-s` after its last byte (or its arrival) and after
`max-duration-s` in all; this app reads its time left after every event and ends a stream near the cap with
finish_reason "length", and when the server tells it of a deadline (its generation fails) it sends the error
event within the grace the server gives.
"""

import base64
import json
import struct
import time
import traceback
import uuid
from urllib.parse import unquote

from backend import CHAT, fork_sequences, round_robin
from componentize_py_types import Err
from validate import PENALTY_WINDOW, BadRequest, ChatRequest, CompletionRequest, EmbeddingRequest
from wit_world import exports
from wit_world.imports import http, llm

# A stream with less time than this left before its hard cap ends now, with finish_reason "length".
WIND_DOWN_MS = 1500
SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-store")]


def json_response(status, value):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def error_response(error):
    return json_response(error.status, error.json())


def _param_of(message, default):
    """The request field a host `invalid-input` message is about (its messages name the WIT field)."""
    for needle, param in (
        ("max-tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top-p", "top_p"),
        ("top-k", "top_k"),
        ("stop", "stop"),
        ("seed", "seed"),
        ("logit", "logit_bias"),
        ("frequency", "frequency_penalty"),
        ("presence", "presence_penalty"),
        ("logprobs", "top_logprobs"),
        ("schema", "response_format"),
        ("constraint", "response_format"),
        ("tool", "tools"),
    ):
        if needle in message:
            return param
    return default


def llm_error(error, model, writer, default_param=None):
    """A WIT error from the host as an OpenAI error."""
    value = error.value
    if isinstance(value, llm.Error_ModelNotSupported):
        return BadRequest(
            f"The model `{model}` does not exist or you do not have access to it.", "model", 404, "model_not_found"
        )
    message = getattr(value, "value", "") or "generation failed"
    if isinstance(value, llm.Error_InvalidInput):
        return BadRequest(message, _param_of(message, default_param))
    if writer.time_left_ms() == 0:  # the server told us our time is up (it cancelled the generation)
        return BadRequest(f"the request ran out of time: {message}", None, 504, "timeout", "timeout_error")
    return BadRequest(message, None, 500)


def finish_name(reason):
    return {
        llm.FinishReason.STOP: "stop",
        llm.FinishReason.LENGTH: "length",
        llm.FinishReason.CONTENT_FILTER: "content_filter",
    }.get(reason, "tool_calls")


def usage_json(prompt, completion):
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _token_text(raw):
    return bytes(raw).decode("utf-8", "replace")


def chat_logprobs(entries):
    return [
        {
            "token": _token_text(e.bytes),
            "logprob": e.logprob,
            "bytes": list(e.bytes),
            "top_logprobs": [
                {"token": _token_text(t.bytes), "logprob": t.logprob, "bytes": list(t.bytes)} for t in e.top
            ],
        }
        for e in entries
    ]


def completion_logprobs(entries, offset=0):
    tokens, logprobs, tops, offsets = [], [], [], []
    for e in entries:
        text = _token_text(e.bytes)
        tokens.append(text)
        logprobs.append(e.logprob)
        tops.append({_token_text(t.bytes): t.logprob for t in e.top})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}


def inferencing(req, logprobs, constraint=None, seed_offset=0):
    seed = None if req.seed is None else (req.seed + seed_offset) % 2**64
    penalised = req.frequency_penalty != 0 or req.presence_penalty != 0
    return llm.InferencingParams(
        max_tokens=req.max_tokens,
        repeat_penalty=1.0,  # OpenAI has no multiplicative repeat penalty
        repeat_penalty_last_n_token_count=PENALTY_WINDOW if penalised else 0,
        stop=req.stop,
        temperature=req.temperature,
        top_k=req.top_k,
        top_p=req.top_p,
        seed=seed,
        constraint=constraint,
        logprobs=logprobs,
        frequency_penalty=req.frequency_penalty,
        presence_penalty=req.presence_penalty,
        logit_bias=[llm.LogitBias(token_id=t, bias=b) for t, b in req.logit_bias],
    )


def check_logit_bias(req):
    """Token ids must be in the model's vocabulary (a 400 naming `logit_bias`, not a host error)."""
    if req.logit_bias:
        size = llm.get_model_info(req.model).vocab_size
        for token, _ in req.logit_bias:
            if token >= size:
                raise BadRequest(
                    f"'logit_bias' token id {token} is not in the vocabulary ({size} tokens)", "logit_bias"
                )


class Exchange:
    """One completion request: its id, its stream (when streamed) and its response envelope."""

    def __init__(self, req, writer, chat):
        self.req, self.writer, self.chat = req, writer, chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self.started = False

    def envelope(self, choices, usage=None, chunk=False):
        value = {
            "id": self.id,
            "object": self.object + (".chunk" if chunk and self.chat else ""),
            "created": self.created,
            "model": self.req.model,
            "choices": choices,
        }
        if usage is not None or (chunk and self.req.include_usage):
            value["usage"] = usage
        return value

    # -- streaming ---------------------------------------------------------------------------------------------

    def start(self):
        self.writer.start(200, SSE_HEADERS)
        self.started = True

    def send(self, value):
        self.writer.write(f"data: {json.dumps(value)}\n\n".encode())

    def winding_down(self):
        return self.writer.time_left_ms() < WIND_DOWN_MS

    def end_with_error(self, error):
        """A stream that cannot finish: an error event, then [DONE] (clients raise on the event)."""
        self.send(error.json())
        self.writer.write(b"data: [DONE]\n\n")

    def end(self, usage):
        if self.req.include_usage:
            self.send(self.envelope([], usage=usage, chunk=True))
        self.writer.write(b"data: [DONE]\n\n")


def chat_choice_delta(index, delta, reason=None, logprobs=None):
    return {
        "index": index,
        "delta": delta,
        "logprobs": {"content": logprobs, "refusal": None} if logprobs is not None else None,
        "finish_reason": reason,
    }


def chat_constraint(req):
    if req.response_format is None:
        return None
    kind, schema = req.response_format
    return llm.Constraint_JsonObject() if kind == "json_object" else llm.Constraint_JsonSchema(schema)


def chat_logprobs_param(req):
    if not req.logprobs:
        return None
    return req.top_logprobs or 0


def handle_chat(req, writer):
    check_logit_bias(req)
    ex = Exchange(req, writer, chat=True)
    logprobs = chat_logprobs_param(req)
    constraint = chat_constraint(req)
    if req.n > 1:
        prompt = CHAT.render(req.model, req.messages, [])
        return run_forks(ex, prompt, lambda i: inferencing(req, logprobs, chat_constraint(req), i))
    params = inferencing(req, logprobs, constraint)
    tools = req.tools if req.tool_choice[0] != "none" else []
    if not req.stream:
        out = CHAT.chat(req.model, req.messages, params, tools, req.tool_choice)
        calls = out.tool_calls if req.parallel_tool_calls else out.tool_calls[:1]
        message = {"role": "assistant", "content": out.content, "refusal": None}
        if calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
            ]
        choice = {
            "index": 0,
            "message": message,
            "logprobs": {"content": chat_logprobs(out.logprobs), "refusal": None} if logprobs is not None else None,
            "finish_reason": finish_name(out.finish_reason),
        }
        usage = out.usage
        return json_response(
            200, ex.envelope([choice], usage_json(usage.prompt_token_count, usage.generated_token_count))
        )
    events = CHAT.stream(req.model, req.messages, params, tools, req.tool_choice)  # input errors raise here
    ex.start()
    ex.send(ex.envelope([chat_choice_delta(0, {"role": "assistant", "content": ""})], chunk=True))
    prompt_tokens = generated = 0
    try:
        for event in events:
            if event[0] == "content":
                chunk = event[1]
                prompt_tokens, generated = chunk.usage.prompt_token_count, chunk.usage.generated_token_count
                lp = chat_logprobs(chunk.logprobs) if logprobs is not None else None
                if chunk.text or lp:
                    ex.send(ex.envelope([chat_choice_delta(0, {"content": chunk.text}, None, lp)], chunk=True))
            elif event[0] == "tool":
                _, index, call_id, name, arguments = event
                if index > 0 and not req.parallel_tool_calls:
                    continue
                call = {"index": index, "function": {"arguments": arguments}}
                if call_id is not None:
                    call["id"], call["type"] = call_id, "function"
                if name is not None:
                    call["function"]["name"] = name
                ex.send(ex.envelope([chat_choice_delta(0, {"tool_calls": [call]})], chunk=True))
            else:
                _, reason, usage = event
                ex.send(ex.envelope([chat_choice_delta(0, {}, finish_name(reason))], chunk=True))
                ex.end(usage_json(usage.prompt_token_count, usage.generated_token_count))
                return None
            if ex.winding_down():
                events.close()  # drops the stream: the host cancels the generation
                ex.send(ex.envelope([chat_choice_delta(0, {}, "length")], chunk=True))
                ex.end(usage_json(prompt_tokens, generated))
                return None
    except Err as error:
        if isinstance(error.value, (http.WriteError_Closed, http.WriteError_Invalid)):
            raise
        ex.end_with_error(llm_error(error, req.model, writer))
    return None


def handle_completions(req, writer):
    check_logit_bias(req)
    ex = Exchange(req, writer, chat=False)
    logprobs = req.logprobs
    if req.n > 1 or len(req.prompts) > 1:
        if len(req.prompts) == 1:
            return run_forks(ex, req.prompts[0], lambda i: inferencing(req, logprobs, None, i))
        return run_prompts(ex, req, logprobs)
    params = inferencing(req, logprobs)
    prompt = req.prompts[0]
    if not req.stream:
        result = llm.infer(req.model, prompt, params)
        choice = {
            "index": 0,
            "text": result.text,
            "logprobs": completion_logprobs(result.logprobs) if logprobs is not None else None,
            "finish_reason": finish_name(result.finish_reason),
        }
        u = result.usage
        return json_response(200, ex.envelope([choice], usage_json(u.prompt_token_count, u.generated_token_count)))
    events = round_robin(lambda _: llm.infer_stream(req.model, prompt, params), 1)  # input errors raise here
    ex.start()
    return stream_choices(ex, events, 1, logprobs)


def completion_choice(index, text, reason, logprobs=None):
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}


def run_forks(ex, prompt, params_for):
    """n choices of one prompt, as forks of one sequence that decode together."""
    req = ex.req
    seqs = fork_sequences(req.model, prompt, req.n)
    try:
        events = round_robin(lambda i: seqs[i].generate_stream(params_for(i)), req.n)
        if req.stream:
            ex.start()
            return stream_choices(ex, events, req.n, chat_logprobs_param(req) if ex.chat else req.logprobs)
        return collect_choices(ex, events, req.n)
    finally:
        for seq in seqs:
            seq.__exit__(None, None, None)


def run_prompts(ex, req, logprobs):
    """Several prompts (× n): one fork group per prompt, all decoding together."""
    groups = []
    try:
        for prompt in req.prompts:
            groups.extend(fork_sequences(req.model, prompt, req.n))
        count = len(groups)
        events = round_robin(lambda k: groups[k].generate_stream(inferencing(req, logprobs, None, k)), count)
        if req.stream:
            ex.start()
            return stream_choices(ex, events, count, logprobs, prompts=len(req.prompts))
        return collect_choices(ex, events, count, prompts=len(req.prompts))
    finally:
        for seq in groups:
            seq.__exit__(None, None, None)


def collect_choices(ex, events, count, prompts=1):
    texts = [[] for _ in range(count)]
    lps = [[] for _ in range(count)]
    reasons = [None] * count
    usages = [None] * count
    try:
        for i, event in events:
            if event[0] == "content":
                texts[i].append(event[1].text)
                lps[i].extend(event[1].logprobs)
            else:
                reasons[i], usages[i] = finish_name(event[1]), event[2]
    finally:
        events.close()  # on an error, the other choices' generations stop too
    choices = []
    want_logprobs = (ex.req.logprobs if not ex.chat else chat_logprobs_param(ex.req)) is not None
    for i in range(count):
        text = "".join(texts[i])
        if ex.chat:
            logprobs = {"content": chat_logprobs(lps[i]), "refusal": None} if want_logprobs else None
            message = {"role": "assistant", "content": text, "refusal": None}
            choices.append({"index": i, "message": message, "logprobs": logprobs, "finish_reason": reasons[i]})
        else:
            logprobs = completion_logprobs(lps[i]) if want_logprobs else None
            choices.append(completion_choice(i, text, reasons[i], logprobs))
    return json_response(200, ex.envelope(choices, total_usage(usages, count // prompts)))


def total_usage(usages, per_prompt):
    """Each prompt is counted once (its forks share it); every choice's generated tokens count."""
    prompt = sum(u.prompt_token_count for k, u in enumerate(usages) if u is not None and k % per_prompt == 0)
    return usage_json(prompt, sum(u.generated_token_count for u in usages if u is not None))


def stream_choices(ex, events, count, logprobs, prompts=1):
    """Streams read in turn, each event sent as a chunk of its choice; every choice ends with its finish_reason."""
    usages = [None] * count
    offsets = [0] * count
    if ex.chat:
        ex.send(
            ex.envelope([chat_choice_delta(i, {"role": "assistant", "content": ""}) for i in range(count)], chunk=True)
        )
    ended = set()
    try:
        for i, event in events:
            if event[0] == "content":
                chunk = event[1]
                usages[i] = chunk.usage
                if ex.chat:
                    lp = chat_logprobs(chunk.logprobs) if logprobs is not None else None
                    if chunk.text or lp:
                        ex.send(ex.envelope([chat_choice_delta(i, {"content": chunk.text}, None, lp)], chunk=True))
                elif chunk.text or chunk.logprobs:
                    lp = completion_logprobs(chunk.logprobs, offsets[i]) if logprobs is not None else None
                    offsets[i] += len(chunk.text)
                    ex.send(ex.envelope([completion_choice(i, chunk.text, None, lp)], chunk=True))
            else:
                usages[i] = event[2]
                ended.add(i)
                reason = finish_name(event[1])
                choice = chat_choice_delta(i, {}, reason) if ex.chat else completion_choice(i, "", reason)
                ex.send(ex.envelope([choice], chunk=True))
            if ex.winding_down():
                events.close()  # drops every stream still open: the host cancels their generations
                for k in range(count):
                    if k not in ended:
                        choice = chat_choice_delta(k, {}, "length") if ex.chat else completion_choice(k, "", "length")
                        ex.send(ex.envelope([choice], chunk=True))
                break
    except Err as error:
        if isinstance(error.value, (http.WriteError_Closed, http.WriteError_Invalid)):
            raise
        events.close()
        ex.end_with_error(llm_error(error, ex.req.model, ex.writer))
        return None
    ex.end(total_usage(usages, count // prompts))
    return None


def handle_embeddings(req):
    result = llm.generate_embeddings(req.model, req.texts)
    data = []
    for i, vector in enumerate(result.embeddings):
        if req.encoding == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": vector})
    tokens = result.usage.prompt_token_count
    return json_response(
        200,
        {
            "object": "list",
            "data": data,
            "model": req.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        },
    )


def model_json(info):
    return {"id": info.name, "object": "model", "created": 0, "owned_by": "llmhost"}


def handle_models(model_id=None):
    listed = llm.list_models()
    if model_id is None:
        return json_response(200, {"object": "list", "data": [model_json(m) for m in listed]})
    for info in listed:
        if info.name == model_id:
            return json_response(200, model_json(info))
    raise BadRequest(
        f"The model `{model_id}` does not exist or you do not have access to it.", "model", 404, "model_not_found"
    )


def read_json(request):
    try:
        body = json.loads(bytes(request.body))
    except ValueError:
        raise BadRequest(
            "We could not parse the JSON body of your request. The body must be a JSON object.", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object", code="invalid_json")
    return body


POST_ROUTES = {
    "/v1/chat/completions": (ChatRequest, handle_chat),
    "/v1/completions": (CompletionRequest, handle_completions),
    "/v1/embeddings": (EmbeddingRequest, None),
}


def route(request, writer):
    path = request.path_with_query.split("?", 1)[0].rstrip("/")
    # Served under a route prefix (e.g. "/team-a/v1"): the guest sees the full path; the API starts at /v1.
    prefix = path.find("/v1/")
    path = path[prefix:] if prefix > 0 else path
    if path == "/v1/models" or path.startswith("/v1/models/"):
        if request.method != "GET":
            raise BadRequest(f"{path} takes GET", status=405, code="method_not_allowed")
        model_id = unquote(path[len("/v1/models/") :]) if path != "/v1/models" else None
        return handle_models(model_id)
    if path not in POST_ROUTES:
        raise BadRequest(f"Invalid URL ({request.method} {path})", status=404, code="not_found")
    if request.method != "POST":
        raise BadRequest(f"{path} takes POST", status=405, code="method_not_allowed")
    parse, handle = POST_ROUTES[path]
    req = parse(read_json(request))
    try:
        if handle is None:
            return handle_embeddings(req)
        return handle(req, writer)
    except Err as error:
        if isinstance(error.value, (http.WriteError_Closed, http.WriteError_Invalid)):
            raise
        raise llm_error(error, req.model, writer, "messages" if isinstance(req, ChatRequest) else "prompt") from None


class Handler(exports.Handler):
    def handle(self, request, writer):
        try:
            response = route(request, writer)
            return response if response is not None else http.Response(status=200, headers=[], body=b"")
        except BadRequest as error:
            return error_response(error)
        except Err:  # the writer refused: the client left, or the grace after the deadline ran out
            return http.Response(status=200, headers=[], body=b"")
        except Exception:  # a bug here: answer 500 in OpenAI's shape instead of trapping
            traceback.print_exc()
            return error_response(BadRequest("internal error in openai-compat", None, 500))
