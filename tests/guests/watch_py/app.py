"""A test guest (not an example) of the `http-app` world for `serve --watch` and `-c host.toml serve DIR`
(tests/e2e/test_serve_watch.py): the tests edit VERSION in a copy of it and see the new version answer.

GET /count?store=S   increment "count" in store S (default "default"): {"version", "count"} (a key-value error:
                     500 {"version", "error": KIND})
GET /infer           a 4-token greedy completion by smollm2-135m: {"version", "tokens"} (generated tokens)
GET /fetch?url=U     an outbound GET of U: {"version", "status", "text"} (refused: 500 {"version", "error": KIND})
"""

import json
from urllib.parse import parse_qs, urlsplit

from llmhost_guest import http as outbound
from llmhost_guest import kv, llm
from wit_world import exports
from wit_world.imports import http

VERSION = "v1"
MODEL = "smollm2-135m"


def reply(status, value):
    value = {"version": VERSION, **value}
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


class Handler(exports.Handler):
    def handle(self, request, writer):
        url = urlsplit(request.path_with_query)
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        if url.path == "/count":
            try:
                return reply(200, {"count": kv.open(query.get("store", "default")).increment("count")})
            except kv.KvError as error:
                return reply(500, {"error": error.kind})
        if url.path == "/infer":
            result = llm.infer("The capital of France is", MODEL, max_tokens=4, temperature=0.0)
            return reply(200, {"tokens": result.usage.generated_tokens})
        if url.path == "/fetch":
            try:
                got = outbound.request("GET", query["url"])
            except outbound.HttpError as error:
                return reply(500, {"error": error.kind})
            return reply(200, {"status": got.status, "text": got.text()})
        return reply(404, {"error": "no such route"})
