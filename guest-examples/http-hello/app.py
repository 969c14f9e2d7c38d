"""http-hello: the smallest `http-app` guest. `GET /?prompt=...` answers with the model's completion as JSON.

llmhost serve . --listen 127.0.0.1:8080    # in this directory
curl -s 'http://127.0.0.1:8080/?prompt=The%20capital%20of%20France%20is'
"""

import json
from urllib.parse import parse_qs, urlsplit

from llmhost_guest import LlmError, llm
from wit_world import exports
from wit_world.imports import http

MODEL = "gemma-3-270m"


def reply(status, value):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


class Handler(exports.Handler):
    def handle(self, request, writer):
        query = parse_qs(urlsplit(request.path_with_query).query)
        prompt = query.get("prompt", ["The capital of France is"])[0]
        try:
            # greedy: the same answer every time; at most 16 tokens, cut at the first newline
            result = llm.infer(prompt, MODEL, max_tokens=16, stop="\n", temperature=0.0)
        except LlmError as error:
            return reply(500, {"error": f"{type(error).__name__}: {error.message}"})
        return reply(200, {"text": result.text, "finish_reason": result.finish_reason})
