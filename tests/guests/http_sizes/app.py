"""A test guest of the `http-app` world for data sizes between host and guest (tests/e2e/test_data_sizes.py):

/body?bytes=N&how=H     a body of N bytes ("0123456789" repeated): H "inline" returns it in `response.body` as is,
                        "sdk" through the guest SDK's `http.respond` (the writer, in pieces, when it is large)
/embed?n=N&model=M&how=H   embed N texts ("text I"): H "sdk" through `llm.embed` (batched), "raw" in one
                        `generate-embeddings` call; JSON {"ok": {"count", "dim", "tokens"}} or {"err": {kind, message}}
/embed-tokens?n=N&len=L&model=M&how=H   the same with N token-id lists of L ids each (`llm.embed_tokens`)
/surrogate              SDK calls given a string with a lone surrogate: the errors they raise, by call
"""

import json
from urllib.parse import parse_qs, urlsplit

from componentize_py_types import Err
from llmhost_guest import LlmError, Sequence, llm
from llmhost_guest import http as web
from wit_world import exports
from wit_world.imports import http
from wit_world.imports import llm as wit

KINDS = {wit.Error_ModelNotSupported: "model-not-supported", wit.Error_RuntimeError: "runtime-error",
         wit.Error_InvalidInput: "invalid-input"}  # fmt: skip


def error_json(error):
    if isinstance(error, Err):
        return {"kind": KINDS.get(type(error.value), "?"), "message": getattr(error.value, "value", "") or ""}
    return {"kind": type(error).__name__, "message": str(error)}


def reply(value, status=200):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def op_body(q, writer):
    size, how = int(q["bytes"]), q.get("how", "sdk")
    body = (b"0123456789" * (size // 10 + 1))[:size]
    headers = [("content-type", "application/octet-stream")]
    if how == "inline":
        return http.Response(status=200, headers=headers, body=body)
    return web.respond(writer, 200, headers, body)


def op_embed(q, writer, tokens=False):
    n, model, how = int(q["n"]), q.get("model", "all-minilm-l6-v2"), q.get("how", "sdk")
    if tokens:
        length = int(q.get("len", "4"))
        inputs = [[100 + (i + j) % 100 for j in range(length)] for i in range(n)]  # small ints: shared objects
    else:
        inputs = [f"text {i}" for i in range(n)]
    try:
        if how == "raw":
            call = wit.generate_embeddings_for_tokens if tokens else wit.generate_embeddings
            result = call(model, inputs)
            vectors, used = result.embeddings, result.usage.prompt_token_count
        else:
            vectors = (llm.embed_tokens if tokens else llm.embed)(inputs, model)
            used = vectors.usage.prompt_tokens
    except (Err, LlmError) as error:
        return reply({"err": error_json(error)})
    return reply({"ok": {"count": len(vectors), "dim": len(vectors[0]), "tokens": used}})


def op_surrogate(q, writer):
    bad = "ok \ud800 then"
    calls = {
        "infer": lambda: llm.infer(bad, max_tokens=1),
        "infer-stop": lambda: llm.infer("ok", max_tokens=1, stop=["x", bad]),
        "chat": lambda: llm.chat([{"role": "user", "content": bad}], max_tokens=1),
        "embed": lambda: llm.embed(["fine", bad]),
        "tokenize": lambda: llm.tokenize(bad),
        "model": lambda: llm.model_info(bad),
        "sequence": lambda: Sequence("gemma-3-270m", bad),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = {"ok": True}
        except Exception as error:  # what the guest would see: an SDK error naming the argument, not a trap
            out[name] = error_json(error)
    return reply(out)


OPS = {"body": op_body, "embed": op_embed, "embed-tokens": lambda q, w: op_embed(q, w, tokens=True),
       "surrogate": op_surrogate}  # fmt: skip


class Handler(exports.Handler):
    def handle(self, request, writer):
        url = urlsplit(request.path_with_query)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        return OPS[url.path.rstrip("/").rsplit("/", 1)[-1]](q, writer)  # the last segment: served under any prefix
