"""counter: an `http-app` that counts visits, per path, in the key-value store `default` with `increment`.

`GET /any/path` adds one to that path's count and answers `{"path": "/any/path", "visits": N}`. The increment is
atomic in the store (SQLite here; Redis when the operator declares `default` so), so concurrent requests, other
instances and other hosts sharing the store never lose a visit, and the count survives restarts.
"""

import json

from llmhost_guest import kv
from wit_world import exports
from wit_world.imports import http

STORE = "default"


def reply(status, value):
    body = (json.dumps(value) + "\n").encode()  # a line, for curl
    return http.Response(status=status, headers=[("content-type", "application/json")], body=body)


class Handler(exports.Handler):
    def handle(self, request, writer):
        path = request.path_with_query.split("?", 1)[0]
        try:
            visits = kv.open(STORE).increment(f"visits:{path}")
        except kv.KvError as error:  # e.g. the store is not granted: `access-denied`
            return reply(503, {"error": f"{error.kind}: {error.message}"})
        return reply(200, {"path": path, "visits": visits})
