"""Benchmark guest of the `http-app` world: answers every request with "ok" (no LLM), to time the server."""

from wit_world import exports
from wit_world.imports import http


class Handler(exports.Handler):
    def handle(self, request, writer):
        return http.Response(status=200, headers=[("content-type", "text/plain")], body=b"ok")
