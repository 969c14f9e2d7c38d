"""Web pieces for `http-app` guests (wit/http.wit): server-sent events written through the response writer, and the
chat page of the chat examples (guest-examples/chat and chat-http), which reads such a stream.

    from llmhost_guest.web import chat_page, sse

    writer.start(200, [("content-type", "text/event-stream")])
    sse(writer, None, {"text": "Hello"})               # data: {"text": "Hello"}
    sse(writer, "done", {"finish_reason": "stop"})     # event: done, then its data

`chat_routes(request, writer, page, chat)` answers the page's own two routes (`GET /`: the page; `POST /chat`:
`chat(request, writer)`) and returns None for any other, which the guest answers itself.

`chat_page(conversations)` is the page's HTML: it POSTs `{"message"}` to `chat` (relative to the page) and shows
the streamed `data: {"text"}` chunks, then `event: done` `{"finish_reason", "usage"}` or `event: error`
`{"message"}`. With `conversations=True` it also sends back the id from `event: conversation` `{"id"}` as
`"conversation"`, shows a refused request's JSON `error`, and has a "New conversation" button (guest-examples/chat:
the same bytes as chat-js's page, which tests/e2e/test_chat_contract.py compares). Without, the reply element keeps
its timings for tests and benchmarks: `data-first-chunk-ms`, `data-chunks`, `data-done-ms` (guest-examples/chat-http).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["chat_page", "chat_routes", "sse"]


class Writer(Protocol):
    """The `response-writer` the host lends to `handle` (only `write` is used here)."""

    def write(self, chunk: bytes) -> None: ...


def sse(writer: Writer, event: str | None, data: Any) -> None:
    """Write one server-sent event: `event: NAME` (none for None: a plain message) and `data: JSON` (json.dumps'
    bytes). A failed write (the client went away) raises the bindings' `Err`, as `writer.write` does."""
    head = f"event: {event}\n" if event else ""
    writer.write(f"{head}data: {json.dumps(data)}\n\n".encode())


# The page, with a marker line (or inline marker) for each part that differs: _PARTS[marker] is (with conversations,
# without). Only these differ, so the two pages cannot drift apart elsewhere.
_PAGE = """<!doctype html>
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
@NEW_BUTTON@
</form>
<script>
const form = document.getElementById("form"), input = document.getElementById("message");
const log = document.getElementById("log");
@STATE@

function add(cls, text) {
  const p = document.createElement("p");
  p.className = cls;
  p.textContent = text;
  log.append(p);
  return p;
}

@ON_NEW@
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const message = input.value;
  input.value = "";
  add("user", message);
@START@
  const response = await fetch("chat", {
    method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(@BODY@),
  });
@REFUSED@
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
@ON_EVENT@
    }
  }
});
</script>
</body>
</html>
"""

_FINISH = "status.textContent = `finish: ${data.finish_reason}, tokens: ${data.usage.completion_tokens}`;"
_DONE_MS = "reply.dataset.doneMs = Math.round(performance.now() - started);"
_PARTS = {
    "@NEW_BUTTON@\n": ('  <button id="new" type="button">New conversation</button>\n', ""),
    "@STATE@\n": ("let conversation = null;  // the id the server gave this conversation (its first event)\n", ""),
    "@ON_NEW@\n": (
        'document.getElementById("new").addEventListener("click", () => '
        '{ conversation = null; log.textContent = ""; });\n\n',
        "",
    ),
    "@START@\n": (
        '  const reply = add("reply", ""), status = add("status", "...");\n'
        "  const body = conversation ? {message, conversation} : {message};\n",
        '  const reply = add("reply", "");\n'
        '  const status = add("status", "...");\n'
        "  const started = performance.now();\n"
        "  let chunks = 0;\n",
    ),
    "@BODY@": ("body", "{message}"),
    "@REFUSED@\n": (
        "  if (!response.ok) { status.textContent = `error: ${(await response.json()).error}`; return; }\n",
        "",
    ),
    "@ON_EVENT@\n": (
        '      if (name === "conversation") conversation = data.id;\n'
        '      else if (name === "done") {\n'
        f"        {_FINISH}\n"
        "      }\n"
        '      else if (name === "error") status.textContent = `error: ${data.message}`;\n'
        "      else reply.textContent += data.text;\n",
        '      if (name === "done") {\n'
        f"        {_FINISH}\n"
        f"        {_DONE_MS}\n"
        '      } else if (name === "error") {\n'
        "        status.textContent = `error: ${data.message}`;\n"
        f"        {_DONE_MS}\n"
        "      } else {\n"
        "        if (chunks === 0) reply.dataset.firstChunkMs = Math.round(performance.now() - started);\n"
        "        chunks += 1;\n"
        "        reply.dataset.chunks = chunks;\n"
        "        reply.textContent += data.text;\n"
        "      }\n",
    ),
}


def chat_page(conversations: bool) -> bytes:
    """The chat page's HTML (UTF-8), to serve with `content-type: text/html; charset=utf-8`. `conversations`: the
    page of a chat that remembers (the id from `event: conversation`, a "New conversation" button); else one
    message per exchange, with the reply's timings in its data attributes."""
    page = _PAGE
    for marker, (with_ids, without) in _PARTS.items():
        page = page.replace(marker, with_ids if conversations else without)
    return page.encode()


def chat_routes(request: Any, writer: Writer, page: bytes, chat: Callable[[Any, Writer], Any]) -> Any:
    """The response to the chat page's own routes: `GET /` the page (`chat_page`'s bytes), `POST /chat`
    `chat(request, writer)` (which streams the reply); None for any other request, left to the caller."""
    from wit_world.imports import http  # the http-app world's types: only its guests serve pages

    path = request.path_with_query.split("?", 1)[0]
    if request.method == "GET" and path == "/":
        return http.Response(status=200, headers=[("content-type", "text/html; charset=utf-8")], body=page)
    if request.method == "POST" and path == "/chat":
        return chat(request, writer)
    return None
