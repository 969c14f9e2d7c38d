"""openai-compat: OpenAI's API as a guest component of the `http-app` world, served by `llmhost serve`, on the guest
SDK (`llmhost_guest`): POST /v1/chat/completions (the host's `chat`: the model's own template, tools), POST
/v1/completions (text or token-id prompts, `echo`), POST /v1/embeddings, POST /v1/responses (responses.py), GET
/v1/models and /v1/models/{id}, each with or without its /v1 prefix; Anthropic's POST /v1/messages (messages.py).
README.md lists the fields supported and refused; request checking is in validate.py. n choices of a prompt are
forks of one sequence (the prompt is evaluated once) whose generations decode together.

Guarantees: a malformed request is a 400 in OpenAI's shape naming the `param`, an unexpected error a 500 (the guest
never traps on client input); a stream ends with a finish_reason and `data: [DONE]`, or an error event and
`[DONE]`; near its `max-duration-s` cap a stream ends with finish_reason "length"; a generation the server cancels
at a deadline ends the stream with an error event, or a non-streamed answer with a 504 JSON error.
"""

import base64
import json
import struct
import time
import traceback
import uuid
from itertools import accumulate
from urllib.parse import unquote

from checks import BadRequest, model_not_found
from common import WIND_DOWN_MS, api_error, json_response, read_json
from componentize_py_types import Err
from llmhost_guest import DEFAULT_CHAT_MODEL, Done, LlmError, Sequence, Usage, interleave, llm
from llmhost_guest import http as web
from messages import MESSAGES_ROUTES, handle_messages
from responses import handle_responses, responses_request
from validate import chat_request, completion_request, embedding_request, tokenize_request
from wit_world import exports
from wit_world.imports import http


def usage_json(usages, per_prompt=1):
    """Each prompt is counted once (its forks share it); every choice's generated tokens count."""
    prompt = sum(u.prompt_tokens for k, u in enumerate(usages) if u is not None and k % per_prompt == 0)
    completion = sum(u.generated_tokens for u in usages if u is not None)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def finish_name(reason):
    return reason.replace("-", "_")  # the WIT's "tool-calls" is OpenAI's "tool_calls"


def token_json(token_bytes, logprob):
    return {"token": token_bytes.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(token_bytes)}


def chat_logprobs(entries):
    return [
        {**token_json(e.text, e.logprob), "top_logprobs": [token_json(b, lp) for _, b, lp in e.top]} for e in entries
    ]


def completion_logprobs(entries, offset=0, as_ids=False):
    """`as_ids` (vLLM's `return_tokens_as_token_ids`): tokens named "token_id:N", exact where text is lossy."""
    tokens = [e.text.decode("utf-8", "replace") for e in entries]

    def name(token_id, text):
        return f"token_id:{token_id}" if as_ids else text.decode("utf-8", "replace")

    return {
        "tokens": [name(e.token_id, e.text) for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{name(t, b): lp for t, b, lp in e.top} for e in entries],
        "text_offset": list(accumulate(map(len, tokens), initial=offset))[:-1],
    }


def check_token_ids(items, names, model):
    """Token-id prompts and inputs: every id in the model's vocabulary (a 400 naming the element, `input[1][3]`)."""
    size = None
    for item, name in zip(items, names, strict=True):
        if isinstance(item, str):
            continue
        size = size or llm.model_info(model).vocab_size
        bad = next((j for j, token in enumerate(item) if token >= size), None)
        if bad is not None:
            message = f"'{name}[{bad}]' is token id {item[bad]}, which is not in the vocabulary ({size} tokens)"
            raise BadRequest(message, f"{name}[{bad}]")


def echo_logprobs(echo):
    """The prompt's part of an echoed answer's `logprobs`: the first token has none (nothing predicts it)."""
    tokens, values, tops = [echo.first], [None], [None]
    for e in echo.entries[1:]:
        tokens.append(e.text.decode("utf-8", "replace"))
        values.append(e.logprob)
        tops.append({b.decode("utf-8", "replace"): lp for _, b, lp in e.top})
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": list(accumulate(map(len, tokens), initial=0))[:-1],
    }


def joined_logprobs(first, rest):
    return {key: first[key] + rest[key] for key in first}


class Echo:
    """A prompt echoed back (`echo: true`): its text and, with `logprobs`, each token's entry (the first None)."""

    def __init__(self, text, entries=None, first=""):
        self.text, self.entries, self.first = text, entries, first


class EchoOnly:
    """The events of choices that generate nothing (`echo` with `max_tokens` 0): each ends at once."""

    def __init__(self, usages):
        self.events = [(i, Done("length", usage)) for i, usage in enumerate(usages)]

    def __iter__(self):
        return iter(self.events)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()


def check_logit_bias(req):
    """Token ids must be in the model's vocabulary (a 400 naming `logit_bias`, not a host error)."""
    if req.logit_bias:
        size = llm.model_info(req.model).vocab_size
        if max(req.logit_bias) >= size:
            message = f"'logit_bias' token id {max(req.logit_bias)} is not in the vocabulary ({size} tokens)"
            raise BadRequest(message, "logit_bias")


class Exchange:
    """One completion request (chat or text): its id, its response envelope and choices, and its stream."""

    def __init__(self, req, writer, chat):
        self.req, self.writer, self.chat = req, writer, chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self.logprobs = req.params["logprobs"] is not None
        self.as_ids = getattr(req, "return_tokens_as_token_ids", False)
        self.echoes = []  # per choice, with `echo`: its prompt's `Echo`

    def params(self, k=0):
        """The SDK keywords of choice k: choice k uses seed + k (seeded choices differ, and repeat run to run)."""
        seed = self.req.seed
        return {**self.req.params, "seed": None if seed is None else (seed + k) % 2**64}

    def envelope(self, choices, usage=None, chunk=False):
        kind = self.object + (".chunk" if chunk and self.chat else "")
        value = {"id": self.id, "object": kind, "created": self.created, "model": self.req.model, "choices": choices}
        if usage is not None or (chunk and self.req.include_usage):
            value["usage"] = usage
        return value

    def choice(self, index, text, reason, logprobs, calls=()):
        """A whole choice of a non-streamed answer."""
        if not self.chat:
            echo = self.echoes[index] if self.echoes else Echo("")
            lp = completion_logprobs(logprobs, len(echo.text), self.as_ids) if self.logprobs else None
            if lp is not None and echo.entries is not None:
                lp = joined_logprobs(echo_logprobs(echo), lp)
            return {"index": index, "text": echo.text + text, "logprobs": lp, "finish_reason": reason}
        message = {"role": "assistant", "content": text, "refusal": None}
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
            ]
        lp = {"content": chat_logprobs(logprobs), "refusal": None} if self.logprobs else None
        return {"index": index, "message": message, "logprobs": lp, "finish_reason": reason}

    def delta(self, index, delta, reason=None):
        """A chunk's choice without text: the role, a tool call's piece, or the finish_reason."""
        if self.chat:
            return {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}
        return {"index": index, "text": "", "logprobs": None, "finish_reason": reason}

    def piece(self, index, chunk, offset):
        """A chunk's choice with the text of a `Chunk` (`offset`: where it starts in its choice's text)."""
        if self.chat:
            lp = {"content": chat_logprobs(chunk.logprobs), "refusal": None} if self.logprobs else None
            return {"index": index, "delta": {"content": chunk.text}, "logprobs": lp, "finish_reason": None}
        lp = completion_logprobs(chunk.logprobs, offset, self.as_ids) if self.logprobs else None
        return {"index": index, "text": chunk.text, "logprobs": lp, "finish_reason": None}

    def send(self, *choices, usage=None):
        value = self.envelope(list(choices), usage, chunk=True)
        self.writer.write(f"data: {json.dumps(value)}\n\n".encode())

    def stream(self, events, count, prompts=1):
        """Events of `count` choices (an `interleave`, already opened, so input errors were raised as JSON errors),
        each sent as a chunk of its choice; every choice ends with its finish_reason, the stream with [DONE]."""
        self.writer.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-store")])
        usages, offsets, ended = [None] * count, [0] * count, set()
        if self.chat:
            self.send(*(self.delta(i, {"role": "assistant", "content": ""}) for i in range(count)))
        for i, echo in enumerate(self.echoes):  # the prompt first, as its own chunk
            lp = echo_logprobs(echo) if self.logprobs else None
            self.send({"index": i, "text": echo.text, "logprobs": lp, "finish_reason": None})
            offsets[i] = len(echo.text)
        try:
            for i, event in events:
                if isinstance(event, Done):
                    usages[i] = event.usage
                    ended.add(i)
                    self.send(self.delta(i, {}, finish_name(event.finish_reason)))
                elif isinstance(event, llm.ToolCallDelta):
                    if event.index > 0 and not self.req.parallel_tool_calls:
                        continue
                    call = {"index": event.index, "function": {"arguments": event.arguments}}
                    if event.id is not None:
                        call["id"], call["type"] = event.id, "function"
                    if event.name is not None:
                        call["function"]["name"] = event.name
                    self.send(self.delta(i, {"tool_calls": [call]}))
                else:
                    usages[i] = event.usage
                    if event.text or event.logprobs:
                        self.send(self.piece(i, event, offsets[i]))
                        offsets[i] += len(event.text)
                if self.writer.time_left_ms() < WIND_DOWN_MS:
                    events.close()  # drops every stream still open: the host cancels their generations
                    self.send(*(self.delta(k, {}, "length") for k in range(count) if k not in ended))
                    break
        except LlmError as error:  # an error event, then [DONE] (clients raise on the event); not a writer's error
            error_json = api_error(error, self.req.model, self.writer).json()
            self.writer.write(f"data: {json.dumps(error_json)}\n\ndata: [DONE]\n\n".encode())
            return
        finally:
            events.close()
        if self.req.include_usage:
            self.send(usage=usage_json(usages, count // prompts))
        self.writer.write(b"data: [DONE]\n\n")

    def collect(self, events, count, prompts=1):
        """The non-streamed answer of `count` choices."""
        texts, logprobs, ends = [[] for _ in range(count)], [[] for _ in range(count)], [None] * count
        with events:  # on an error, the other choices' generations stop too
            for i, event in events:
                if isinstance(event, Done):
                    ends[i] = event
                else:
                    texts[i].append(event.text)
                    logprobs[i].extend(event.logprobs)
        choices = [
            self.choice(i, "".join(texts[i]), ends[i] and finish_name(ends[i].finish_reason), logprobs[i])
            for i in range(count)
        ]
        usage = usage_json([e and e.usage for e in ends], count // prompts)
        return json_response(200, self.envelope(choices, usage))

    def forks(self, prompts):
        """n choices of each prompt (a text or token ids): forks of one sequence per prompt, all decoding together.
        With `echo`, each choice starts with its prompt (and the prompt's logprobs, one decode per batch)."""
        seqs = []
        try:
            for prompt in prompts:
                root = Sequence(self.req.model)
                seqs.append(root)
                echo = self.prefill(root, prompt)
                seqs += [root.fork() for _ in range(self.req.n - 1)]
                self.echoes += [echo] * self.req.n if echo else []
            if self.req.max_tokens == 0:  # `echo` alone: nothing is generated
                events = EchoOnly([Usage(seq.token_count, 0) for seq in seqs])
                return (self.stream if self.req.stream else self.collect)(events, len(seqs), len(prompts))
            openers = [lambda k=k, seq=seq: seq.stream(**self.params(k)) for k, seq in enumerate(seqs)]
            events = interleave(openers)  # at most 4 (a model's default slots) generate at once
            return (self.stream if self.req.stream else self.collect)(events, len(seqs), len(prompts))
        finally:
            for seq in seqs:
                seq.close()

    def prefill(self, seq, prompt):
        """Put `prompt` into `seq`; with `echo`, the `Echo` of it (with `logprobs`: every token's entry)."""
        req = self.req
        if not getattr(req, "echo", False):  # chat has no `echo`
            seq.append(prompt) if isinstance(prompt, str) else seq.append_tokens(prompt)
            return None
        ids = llm.tokenize(prompt, req.model) if isinstance(prompt, str) else prompt
        if not self.logprobs:
            seq.append_tokens(ids)
            return Echo(prompt if isinstance(prompt, str) else seq.text)
        entries = seq.append_tokens_with_logprobs(ids, req.logprobs)
        with Sequence(req.model) as first:  # the first token's text (no entry carries it)
            first.append_tokens(ids[:1])
            first_text = first.text
        return Echo(prompt if isinstance(prompt, str) else seq.text, entries, first_text)


def handle_chat(req, writer):
    check_logit_bias(req)
    ex = Exchange(req, writer, chat=True)
    if req.n > 1:
        return ex.forks([llm.apply_chat_template(req.messages, req.model)])
    options = {"tools": req.tools if req.tool_choice != "none" else [], "tool_choice": req.tool_choice}
    if req.stream:
        return ex.stream(interleave([lambda: llm.chat_stream(req.messages, req.model, **options, **ex.params())]), 1)
    out = llm.chat(req.messages, req.model, **options, **ex.params())
    calls = out.tool_calls if req.parallel_tool_calls else out.tool_calls[:1]
    choice = ex.choice(0, out.content, finish_name(out.finish_reason), out.logprobs, calls)
    return json_response(200, ex.envelope([choice], usage_json([out.usage])))


def handle_completions(req, writer):
    check_logit_bias(req)
    check_token_ids(req.prompt, req.prompt_names, req.model)
    ex = Exchange(req, writer, chat=False)
    if req.n > 1 or len(req.prompt) > 1 or req.echo or not isinstance(req.prompt[0], str):
        return ex.forks(req.prompt)
    if req.stream:
        return ex.stream(interleave([lambda: llm.stream(req.prompt[0], req.model, **ex.params())]), 1)
    out = llm.infer(req.prompt[0], req.model, **ex.params())
    choice = ex.choice(0, out.text, finish_name(out.finish_reason), out.logprobs)
    return json_response(200, ex.envelope([choice], usage_json([out.usage])))


def handle_embeddings(req, writer):
    check_token_ids(req.input, req.input_names, req.model)
    texts = [item for item in req.input if isinstance(item, str)]
    ids = [item for item in req.input if not isinstance(item, str)]
    embedded = {
        True: llm.embed(texts, req.model) if texts else [],
        False: llm.embed_tokens(ids, req.model) if ids else [],
    }
    parts = {kind: iter(vectors) for kind, vectors in embedded.items()}
    data = []
    for i, vector in enumerate(next(parts[isinstance(item, str)]) for item in req.input):
        if req.encoding_format == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": vector})
    # Every token the model evaluated, a beginning-of-sequence token included (as llama-server and OpenAI count).
    tokens = sum(vectors.usage.prompt_tokens for vectors in embedded.values() if vectors)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return json_response(200, {"object": "list", "data": data, "model": req.model, "usage": usage})


def handle_tokenize(req, writer):
    # The beginning-of-sequence token included, as a prompt is counted: `llmhost run --connect` counts its prompts
    # here instead of loading the model's vocabulary itself.
    return json_response(200, {"model": req.model, "tokens": list(llm.tokenize(req.prompt, req.model))})


def model_kind(name):
    """ "base", "instruct" or "embedding" (the host's `get-model-kind`); None when the host cannot say."""
    try:
        return llm.model_kind(name)
    except LlmError:
        return None


def model_json(name, statuses=None):
    # Extra fields (OpenAI's clients keep fields they do not know): `kind`, which models can chat, and `status`.
    entry = {"id": name, "object": "model", "created": 0, "owned_by": "llmhost", "kind": model_kind(name)}
    status = (statuses or {}).get(name)
    if status is not None:
        entry["status"] = status_json(status)
    return entry


def status_json(s):
    """A model's residency, as llama-server's router (`value`) and Ollama's /api/ps (`expires_at`, Unix time) tell
    it: loaded or not, the memory it holds, seconds since its last use, when it unloads if it stays idle."""
    expires = None if s.unload_in_s is None else int(time.time() + s.unload_in_s)
    return {"value": s.state, "loaded": s.loaded, "memory_bytes": s.memory_bytes, "in_use": s.in_use,
            "idle_s": s.idle_s, "keep_alive_s": s.keep_alive_s, "expires_at": expires}  # fmt: skip


def default_model(path):
    """The model of a request that names none: on the chat routes the built-in instruct model when this component
    may use it, else its first instruct model; otherwise (and failing those) the first model it may use, as
    llama-server answers."""
    names = [m.name for m in llm.list_models()]
    if path in CHAT_ROUTES:
        if DEFAULT_CHAT_MODEL in names:
            return DEFAULT_CHAT_MODEL
        chat_models = [name for name in names if model_kind(name) == "instruct"]
        names = chat_models + names
    return names[0] if names else "(none: no model is allowed here)"


def handle_models(model_id=None):
    statuses = {s.name: s for s in llm.list_model_status()}  # loads no model
    models = [model_json(m.name, statuses) for m in llm.list_models()]
    if model_id is None:
        return json_response(200, {"object": "list", "data": models})
    found = next((model for model in models if model["id"] == model_id), None)
    if found is None:  # an alias the host config gives a model (`aliases`) is found under the name asked for
        try:
            name = llm.model_info(model_id).name
        except LlmError:
            raise model_not_found(model_id) from None
        found = {**model_json(name, statuses), "id": model_id}
    return json_response(200, found)


# path -> (checks the body, answers, the param a host's invalid-input message names when it names no field)
POST_ROUTES = {
    "/v1/chat/completions": (chat_request, handle_chat, "messages"),
    "/v1/completions": (completion_request, handle_completions, "prompt"),
    "/v1/embeddings": (embedding_request, handle_embeddings, "input"),
    "/v1/tokenize": (tokenize_request, handle_tokenize, "prompt"),
    "/v1/responses": (responses_request, lambda req, writer: handle_responses(req, writer, json_response), "input"),
}

CHAT_ROUTES = ("/v1/chat/completions", "/v1/responses")


def api_path(path):
    """The endpoint's path with its /v1 prefix. Served under a route prefix (e.g. "/team-a/v1"), the guest sees the
    full path: the API starts at /v1. Clients whose base URL lacks /v1 (`http://host:8080`) send /chat/completions:
    each endpoint is found by its own ending then (as llama-server serves both)."""
    prefix = path.find("/v1/")
    if prefix >= 0:
        return path[prefix:]
    for endpoint in POST_ROUTES:
        if path.endswith(endpoint[len("/v1") :]):
            return endpoint
    models = path.rfind("/models")
    if models >= 0 and path[models:].count("/") <= 2:  # /models or /models/{id}
        return "/v1" + path[models:]
    return path


def route(request, writer):
    path = api_path(request.path_with_query.split("?", 1)[0].rstrip("/"))
    if path == "/v1/models" or path.startswith("/v1/models/"):
        if request.method != "GET":
            raise BadRequest(f"{path} takes GET", status=405, code="method_not_allowed")
        return handle_models(unquote(path[len("/v1/models/") :]) if path != "/v1/models" else None)
    if path in MESSAGES_ROUTES:  # Anthropic's Messages API, answered in Anthropic's shapes (messages.py)
        return handle_messages(path, request, writer)
    if path not in POST_ROUTES:
        raise BadRequest(f"Invalid URL ({request.method} {path})", status=404, code="not_found")
    if request.method != "POST":
        raise BadRequest(f"{path} takes POST", status=405, code="method_not_allowed")
    check, handle, param = POST_ROUTES[path]
    req = check(read_json(request))
    try:
        req.model = req.model or default_model(path)
        return handle(req, writer)
    except LlmError as error:
        raise api_error(error, req.model, writer, param) from None


class Handler(exports.Handler):
    def handle(self, request, writer):
        try:
            response = route(request, writer)
            if response is None:  # streamed
                return http.Response(status=200, headers=[], body=b"")
            # A large body (thousands of vectors) goes through the writer in pieces: the host takes at most ~2.6 MiB
            # in the returned record.
            return web.respond(writer, response.status, response.headers, response.body)
        except Err:  # the writer refused: the client left, or the grace after the deadline ran out
            return http.Response(status=200, headers=[], body=b"")
        except Exception as error:  # not a BadRequest: a bug here, answered 500 in OpenAI's shape instead of a trap
            if not isinstance(error, BadRequest):
                traceback.print_exc()
                error = BadRequest("internal error in openai-compat", None, 500)
            return json_response(error.status, error.json())
