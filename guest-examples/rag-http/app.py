"""rag-http: retrieval-augmented generation as an HTTP API. Passages are embedded with the built-in embedding model
when they are added and kept in the key-value store `default` (text and vector, one key each); a question is
embedded, the passages nearest to it are retrieved (cosine of unit vectors: a dot product), and the instruct model
answers from them alone. The answer reports the passages it was given, so a client can show its sources.

PUT    /passages/ID  the passage's text (the request body, UTF-8) -> {"id": ID, "tokens": N (embedded)}
GET    /passages     {"passages": [ID, ...]}
DELETE /passages/ID  remove it from the index
POST   /ask          {"question": "...", "top_k": K (default 2), "max_tokens": N (default 64)}
                     -> {"answer", "finish_reason", "passages": [{"id", "score", "text"}, ...] (best first),
                         "usage": {"prompt_tokens", "completion_tokens"}}

The store must be granted (llmhost.toml: `key-value-stores = ["default"]`); without it every route answers 503.
"""

import base64
import json
import re
from array import array
from urllib.parse import unquote

from llmhost_guest import LlmError, kv, llm
from wit_world import exports
from wit_world.imports import http

EMBEDDING_MODEL = "all-minilm-l6-v2"
MODEL = "smollm2-135m"  # the built-in instruct model
DEFAULT_TOP_K = 2
DEFAULT_MAX_TOKENS = 64
MAX_TOKENS = 256
STORE = "default"
PREFIX = "rag/passage/"  # one key per passage: adding passages at once never loses one (no shared index value)
PASSAGE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# The passages go in the system message; the model is told to answer from them alone.
SYSTEM = "Answer the question using only these passages. If they do not contain the answer, say so.\n\n{passages}"


def reply(status, value):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def grounded_messages(question, passages):
    """The chat the model answers: the retrieved passages (id and text, best first), then the question."""
    context = "\n".join(f"[{p['id']}] {p['text']}" for p in passages)
    return [{"role": "system", "content": SYSTEM.format(passages=context)}, {"role": "user", "content": question}]


def add(store, passage_id, text):
    vector = llm.embed(text, EMBEDDING_MODEL)
    # float32, as the host returns the vector: stored exactly, a quarter of its JSON size
    packed = base64.b64encode(array("f", vector[0]).tobytes()).decode()
    store.set(PREFIX + passage_id, json.dumps({"text": text, "vector": packed}))
    return reply(200, {"id": passage_id, "tokens": vector.usage.prompt_tokens})


def passage_ids(store):
    listed = store.keys()  # every key of the store, in key order
    return [key.removeprefix(PREFIX) for key in listed if key.startswith(PREFIX)]


def load_index(store):
    """Every passage: (id, text, vector). Read per question, so a passage added by any instance is found at once."""
    index = []
    for passage_id in passage_ids(store):
        data = store.get(PREFIX + passage_id)
        if data is not None:  # deleted meanwhile
            value = json.loads(data)
            vector = array("f")
            vector.frombytes(base64.b64decode(value["vector"]))
            index.append((passage_id, value["text"], vector))
    return index


def ask(request, store):
    try:
        body = json.loads(bytes(request.body) or b"{}")
        question = str(body["question"])
        top_k = max(1, int(body.get("top_k", DEFAULT_TOP_K)))
        max_tokens = min(int(body.get("max_tokens", DEFAULT_MAX_TOKENS)), MAX_TOKENS)
    except (ValueError, KeyError, TypeError, AttributeError):
        return reply(400, {"error": 'expected a JSON body {"question": "...", "top_k": K, "max_tokens": N}'})
    index = load_index(store)
    if not index:
        return reply(409, {"error": "the index is empty: add passages first (PUT /passages/ID, the text as body)"})
    query = llm.embed(question, EMBEDDING_MODEL)[0]
    scored = [(sum(a * b for a, b in zip(query, vector, strict=True)), pid, text) for pid, text, vector in index]
    scored.sort(key=lambda item: -item[0])
    used = [{"id": pid, "score": round(score, 4), "text": text} for score, pid, text in scored[:top_k]]
    # greedy: the same passages give the same answer
    answer = llm.chat(grounded_messages(question, used), MODEL, max_tokens=max_tokens, temperature=0.0)
    usage = {"prompt_tokens": answer.usage.prompt_tokens, "completion_tokens": answer.usage.generated_tokens}
    return reply(200, {"answer": answer.text, "finish_reason": answer.finish_reason, "passages": used, "usage": usage})


def route(request, store):
    path = request.path_with_query.split("?", 1)[0]
    if path == "/ask" and request.method == "POST":
        return ask(request, store)
    if path == "/passages" and request.method == "GET":
        return reply(200, {"passages": passage_ids(store)})
    passage_id = unquote(path.removeprefix("/passages/")) if path.startswith("/passages/") else None
    if passage_id is None:
        return reply(404, {"error": "not found (POST /ask, GET /passages, PUT or DELETE /passages/ID)"})
    if not PASSAGE_ID.fullmatch(passage_id):
        return reply(400, {"error": "a passage id is 1-64 letters, digits, `.`, `-` or `_`"})
    if request.method == "PUT":
        try:
            text = bytes(request.body).decode("utf-8").strip()
        except UnicodeDecodeError:
            text = ""
        if not text:
            return reply(400, {"error": "the body must be the passage's text (UTF-8, not empty)"})
        return add(store, passage_id, text)
    if request.method == "DELETE":
        if not store.exists(PREFIX + passage_id):
            return reply(404, {"error": f"no passage {passage_id}"})
        store.delete(PREFIX + passage_id)
        return http.Response(status=204, headers=[], body=b"")
    return reply(405, {"error": f"{request.method} /passages/ID: use PUT or DELETE"})


class Handler(exports.Handler):
    def handle(self, request, writer):
        try:
            return route(request, kv.open(STORE))
        except kv.KvError as error:
            fix = f'grant it: key-value-stores = ["{STORE}"] under [components.NAME] in the app config'
            return reply(503, {"error": f"the index store {STORE!r} is unavailable ({error.kind}): {fix}"})
        except LlmError as error:
            status = 400 if isinstance(error, ValueError) else 500  # InvalidInput (e.g. a text over the context)
            return reply(status, {"error": f"{type(error).__name__}: {error.message}"})
