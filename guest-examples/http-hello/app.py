"""http-hello: the smallest `http-app` guest. `GET /?prompt=...` answers with the model's completion as JSON.

llmhost serve guest-examples/http-hello --listen 127.0.0.1:8080
curl -s 'http://127.0.0.1:8080/?prompt=The%20capital%20of%20France%20is'
"""

import json
from urllib.parse import parse_qs, urlsplit

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import http, llm

MODEL = "gemma-3-270m"


def reply(status, value):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


class Handler(exports.Handler):
    def handle(self, request, writer):
        query = parse_qs(urlsplit(request.path_with_query).query)
        prompt = query.get("prompt", ["The capital of France is"])[0]
        params = llm.InferencingParams(
            max_tokens=16,
            repeat_penalty=1.1,
            repeat_penalty_last_n_token_count=64,
            stop=["\n"],
            temperature=0.0,  # greedy: the same answer every time
            top_k=40,
            top_p=0.9,
            seed=None,
            constraint=None,
            logprobs=None,
            frequency_penalty=0.0,
            presence_penalty=0.0,
            logit_bias=[],
        )
        try:
            result = llm.infer(MODEL, prompt, params)
        except Err as error:
            return reply(500, {"error": f"{type(error.value).__name__}: {getattr(error.value, 'value', '')}"})
        return reply(200, {"text": result.text, "finish_reason": result.finish_reason.name.lower()})
