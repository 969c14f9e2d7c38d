"""chat-http: a chat web page served by the component itself, with the reply streamed token by token (SSE).

GET  /        the page (HTML + a little JavaScript)
POST /chat    {"message": "...", "max_tokens": N (default 64)} -> text/event-stream:
              `data: {"text": ...}` per chunk, then
              `event: done` with {"finish_reason": ..., "usage": {...}}
"""

import contextlib
import json

from componentize_py_types import Err
from llmhost_guest import LlmError, llm
from llmhost_guest.web import chat_page, chat_routes, sse
from wit_world import exports
from wit_world.imports import http

MODEL = "smollm2-135m"  # the built-in instruct model (Gemma 3 270M is pretrained only: it was never tuned to chat)
DEFAULT_MAX_TOKENS = 64
MAX_TOKENS = 256

PAGE = chat_page(conversations=False)


def chat(request, writer):
    try:
        body = json.loads(bytes(request.body) or b"{}")
        message = str(body["message"])
        max_tokens = min(int(body.get("max_tokens", DEFAULT_MAX_TOKENS)), MAX_TOKENS)
    except (ValueError, KeyError, TypeError):
        return http.Response(status=400, headers=[], body=b'expected a JSON body {"message": "...", "max_tokens": N}\n')
    writer.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-store")])
    try:
        # greedy: the same reply every time
        # The host renders the model's own chat template and stops at its end of turn.
        with llm.chat_stream([("user", message)], MODEL, max_tokens=max_tokens, temperature=0.0) as s:
            for chunk in s:
                sse(writer, None, {"text": chunk.text})
            if s.done is not None:
                tokens = s.done.usage
                usage = {"prompt_tokens": tokens.prompt_tokens, "completion_tokens": tokens.generated_tokens}
                sse(writer, "done", {"finish_reason": s.done.finish_reason, "usage": usage})
    except (LlmError, Err) as error:
        # The browser went away (`write` failed, and the host cancelled the stream, so `next` failed too), or
        # generation failed: tell the page if it is still there.
        message = error.message if isinstance(error, LlmError) else str(getattr(error.value, "value", "") or "")
        with contextlib.suppress(Err):
            sse(writer, "error", {"message": message or type(error).__name__})
    return http.Response(status=200, headers=[], body=b"")


class Handler(exports.Handler):
    def handle(self, request, writer):
        answer = chat_routes(request, writer, PAGE, chat)  # GET / (the page) and POST /chat
        if answer is None:
            answer = http.Response(status=404, headers=[("content-type", "text/plain")], body=b"not found\n")
        return answer
