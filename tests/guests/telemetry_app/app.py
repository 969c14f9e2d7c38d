"""A test guest (not an example) of the `http-app` world for OpenTelemetry traces (tests/integration/test_telemetry.py):
one request that makes a chat, a key-value get and an outbound request, and a streamed generation (bench/telemetry.py).

GET /work?url=U             llm.chat (4 tokens), kv get of "greeting" in the default store, then an outbound GET of U
                            (with the config value TOKEN in its x-api-key header);
                            JSON {"chat": generated tokens, "kv": the value or null, "status": U's status, "echo": its
                            body (the test server's /echo: the headers the request carried)}
GET /stream?max_tokens=N    llm.stream of N tokens; JSON {"chunks", "generated"}
"""

import json
from urllib.parse import parse_qs, urlsplit

from llmhost_guest import config, kv, llm
from llmhost_guest import http as outbound
from wit_world import exports
from wit_world.imports import http


def reply(value):
    return http.Response(status=200, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def op_work(q):
    chat = llm.chat([{"role": "user", "content": "Say hi"}], "gemma-3-270m", max_tokens=4, temperature=0.0)
    value = kv.open("default").get("greeting")
    got = outbound.request("GET", q["url"], headers={"x-api-key": config.get("TOKEN") or ""})
    return {
        "chat": chat.usage.generated_tokens,
        "kv": None if value is None else bytes(value).decode(),
        "status": got.status,
        "echo": got.text(),
    }


def op_stream(q):
    chunks, generated = 0, 0
    for chunk in llm.stream("Count:", "gemma-3-270m", max_tokens=int(q.get("max_tokens", "32")), temperature=0.0):
        chunks += 1
        generated = chunk.usage.generated_tokens
    return {"chunks": chunks, "generated": generated}


class Handler(exports.Handler):
    def handle(self, request, writer):
        url = urlsplit(request.path_with_query)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        op = {"work": op_work, "stream": op_stream}[url.path.rstrip("/").rsplit("/", 1)[-1]]
        return reply(op(q))
