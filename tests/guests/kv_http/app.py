"""A test guest (not an example) of the `http-app` world for key-value state, through `llmhost_guest.kv`.

PUT  /kv/KEY?store=S      store the request body under KEY; 200 "ok" only once `set` has returned (durable)
GET  /kv/KEY?store=S      the value (200), or 404
POST /incr/KEY?store=S    increment KEY; the new value
GET  /keys?store=S        every key, as a JSON list
Store S defaults to "default". A failure is 500 with {"kind", "message"} (`kv.KvError`).
"""

import json
from urllib.parse import parse_qs, unquote, urlsplit

from llmhost_guest import kv
from wit_world import exports
from wit_world.imports import http


def reply(status, body, content_type="text/plain"):
    return http.Response(status=status, headers=[("content-type", content_type)], body=body)


class Handler(exports.Handler):
    def handle(self, request, writer):
        url = urlsplit(request.path_with_query)
        store_name = parse_qs(url.query).get("store", ["default"])[0]
        try:
            store = kv.open(store_name)
            if url.path.startswith("/kv/"):
                key = unquote(url.path[len("/kv/") :])
                if request.method == "PUT":
                    store.set(key, bytes(request.body))
                    return reply(200, b"ok")
                value = store.get(key)
                return reply(404, b"") if value is None else reply(200, value, "application/octet-stream")
            if url.path.startswith("/incr/"):
                return reply(200, str(store.increment(unquote(url.path[len("/incr/") :]))).encode())
            if url.path == "/keys":
                return reply(200, json.dumps(store.keys()).encode(), "application/json")
        except kv.KvError as error:
            return reply(500, json.dumps({"kind": error.kind, "message": error.message}).encode(), "application/json")
        return reply(404, b"no such route")
