"""chat: a chat that remembers. The conversation (its messages) is kept in the key-value store `default`, under
`chat/<id>`, so every turn sends the model the whole conversation so far, whichever instance or server answers it;
the reply is streamed token by token as server-sent events.

GET    /                  the chat page (HTML + a little JavaScript)
POST   /chat              {"message": "...", "conversation": ID, "max_tokens": N (default 64)}
                          -> text/event-stream: `event: conversation` {"id": ID, "history": N (earlier messages
                          sent)}, `data: {"text": ...}` per chunk, then `event: done` {"finish_reason", "usage"}.
                          Without `conversation` a new one gets a random id; an id not seen before starts one.
GET    /conversations/ID  the conversation as kept: {"id": ID, "messages": [{"role", "content"}, ...]}
DELETE /conversations/ID  forget it

The store must be granted (llmhost.toml: `key-value-stores = ["default"]`); without it POST /chat answers 503.
The JavaScript chat template (chat-js) is this app, byte for byte (tests/e2e/test_chat_contract.py).
"""

import contextlib
import json
import math
import re
import secrets

from componentize_py_types import Err
from llmhost_guest import LlmError, kv, llm
from llmhost_guest.web import chat_page, chat_routes, sse
from wit_world import exports
from wit_world.imports import http

MODEL = "smollm2-135m"  # the built-in instruct model (Gemma 3 270M is pretrained only: it was never tuned to chat)
DEFAULT_MAX_TOKENS = 64
MAX_TOKENS = 256
MAX_MESSAGES = 16  # the last 8 turns are kept (and sent): a small model's context is short, and so is a kv value
STORE = "default"
# An id is the conversation's only key: `new_id` makes unguessable ones (64 random bits).
CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

PAGE = chat_page(conversations=True)


def reply(status, value):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def key(conversation):
    return f"chat/{conversation}"


def load(store, conversation):
    """The conversation's messages, or None when the store has no such conversation."""
    data = store.get(key(conversation))
    return None if data is None else json.loads(data)


def new_id(store):
    """A fresh random id (64 bits from the host's random source; a collision is checked anyway)."""
    while True:
        conversation = secrets.token_hex(8)
        if not store.exists(key(conversation)):
            return conversation


def whole(value):
    """A JSON number that is a whole number >= 1 (1 and 1.0 alike, as JavaScript reads them), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if value >= 1 and value == int(value) else None


def chat(request, writer):
    try:
        body = json.loads(bytes(request.body) or b"{}")
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), or nested too deep
        body = None
    body = body if isinstance(body, dict) else {}
    message, conversation = body.get("message"), body.get("conversation")
    max_tokens = whole(body.get("max_tokens", DEFAULT_MAX_TOKENS))
    if not isinstance(message, str) or max_tokens is None:
        return reply(400, {"error": 'expected a JSON body {"message": "...", "conversation": ID, "max_tokens": N}'})
    if conversation is not None and not (isinstance(conversation, str) and CONVERSATION_ID.fullmatch(conversation)):
        return reply(400, {"error": "`conversation` must be 1-64 letters, digits, `-` or `_`"})
    max_tokens = min(max_tokens, MAX_TOKENS)
    try:
        store = kv.open(STORE)
        if conversation is None:
            conversation, messages = new_id(store), []
        else:
            messages = load(store, conversation) or []
    except kv.KvError as error:
        # Without the grant every turn would forget the ones before: refuse, naming the fix.
        fix = f'grant it: key-value-stores = ["{STORE}"] under [components.NAME] in the app config'
        return reply(503, {"error": f"the conversation store {STORE!r} is unavailable ({error.kind}): {fix}"})
    messages = [*messages, {"role": "user", "content": message}][-MAX_MESSAGES:]
    writer.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-store")])
    try:
        sse(writer, "conversation", {"id": conversation, "history": len(messages) - 1})
        # greedy: the same reply to the same conversation. The host renders the model's own chat template over
        # the whole conversation and stops at its end of turn.
        with llm.chat_stream(messages, MODEL, max_tokens=max_tokens, temperature=0.0) as s:
            for chunk in s:
                sse(writer, None, {"text": chunk.text})
        if s.done is None:  # not ended (cannot happen once the loop has ended without an error): keep nothing
            return http.Response(status=200, headers=[], body=b"")
        # The turn is kept only once it is whole (a client that left mid-reply leaves the conversation as it was).
        store.set(key(conversation), json.dumps([*messages, {"role": "assistant", "content": s.text}][-MAX_MESSAGES:]))
        usage = {"prompt_tokens": s.done.usage.prompt_tokens, "completion_tokens": s.done.usage.generated_tokens}
        sse(writer, "done", {"finish_reason": s.done.finish_reason, "usage": usage})
    except (LlmError, kv.KvError, Err) as error:
        # The browser went away (`write` failed, and the host cancelled the stream, so `next` failed too), or
        # generation or the store failed: tell the page if it is still there.
        text = getattr(error, "message", "") or str(getattr(getattr(error, "value", None), "value", "") or "")
        with contextlib.suppress(Err):
            sse(writer, "error", {"message": text or type(error).__name__})
    return http.Response(status=200, headers=[], body=b"")


def conversation_resource(request, conversation):
    if not CONVERSATION_ID.fullmatch(conversation):
        return reply(404, {"error": f"no conversation {conversation}"})
    try:
        store = kv.open(STORE)
        messages = load(store, conversation)
        if messages is None:
            return reply(404, {"error": f"no conversation {conversation}"})
        if request.method == "DELETE":
            store.delete(key(conversation))
            return http.Response(status=204, headers=[], body=b"")
    except kv.KvError as error:
        return reply(503, {"error": f"the conversation store {STORE!r} is unavailable ({error.kind})"})
    return reply(200, {"id": conversation, "messages": messages})


class Handler(exports.Handler):
    def handle(self, request, writer):
        answer = chat_routes(request, writer, PAGE, chat)  # GET / (the page) and POST /chat
        if answer is not None:
            return answer
        path = request.path_with_query.split("?", 1)[0]
        if request.method in ("GET", "DELETE") and path.startswith("/conversations/"):
            return conversation_resource(request, path.removeprefix("/conversations/"))
        return reply(404, {"error": "not found"})
