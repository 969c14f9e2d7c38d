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
from wit_world import exports
from wit_world.imports import http

MODEL = "smollm2-135m"  # the built-in instruct model (Gemma 3 270M is pretrained only: it was never tuned to chat)
DEFAULT_MAX_TOKENS = 64
MAX_TOKENS = 256

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>llmhost chat</title>
<style>
  body { font-family: sans-serif; max-width: 40em; margin: 2em auto; }
  #log p { white-space: pre-wrap; } .user { font-weight: bold; } .status { color: #777; font-size: small; }
  #message { width: 30em; }
</style>
</head>
<body>
<h1>llmhost chat</h1>
<div id="log"></div>
<form id="form">
  <input id="message" autocomplete="off" placeholder="Say something"> <button id="send">Send</button>
</form>
<script>
const form = document.getElementById("form"), input = document.getElementById("message");
const log = document.getElementById("log");

function add(cls, text) {
  const p = document.createElement("p");
  p.className = cls;
  p.textContent = text;
  log.append(p);
  return p;
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const message = input.value;
  input.value = "";
  add("user", message);
  const reply = add("reply", "");
  const status = add("status", "...");
  const started = performance.now();
  let chunks = 0;
  const response = await fetch("chat", {
    method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify({message}),
  });
  const reader = response.body.getReader(), decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    let end;
    while ((end = buffer.indexOf("\\n\\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const name = (event.match(/^event: (.*)$/m) || [null, "message"])[1];
      const data = JSON.parse((event.match(/^data: (.*)$/m) || [null, "{}"])[1]);
      if (name === "done") {
        status.textContent = `finish: ${data.finish_reason}, tokens: ${data.usage.completion_tokens}`;
        reply.dataset.doneMs = Math.round(performance.now() - started);
      } else if (name === "error") {
        status.textContent = `error: ${data.message}`;
        reply.dataset.doneMs = Math.round(performance.now() - started);
      } else {
        if (chunks === 0) reply.dataset.firstChunkMs = Math.round(performance.now() - started);
        chunks += 1;
        reply.dataset.chunks = chunks;
        reply.textContent += data.text;
      }
    }
  }
});
</script>
</body>
</html>
"""


def sse(writer, event, data):
    head = f"event: {event}\n" if event else ""
    writer.write(f"{head}data: {json.dumps(data)}\n\n".encode())


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
        path = request.path_with_query.split("?", 1)[0]
        if request.method == "GET" and path == "/":
            return http.Response(status=200, headers=[("content-type", "text/html; charset=utf-8")], body=PAGE.encode())
        if request.method == "POST" and path == "/chat":
            return chat(request, writer)
        return http.Response(status=404, headers=[("content-type", "text/plain")], body=b"not found\n")
