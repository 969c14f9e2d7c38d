"""A test guest of the `http-app` world (not an example): the request path picks one operation.

/hello                      "hello" (a trivial handler, for load tests)
/echo                       the request as JSON: method, path, headers, body
/infer?model=M&prompt=P&max_tokens=N     llm.infer (greedy); JSON result, or {"err": {kind, message}}
/stream?model=M&prompt=P&max_tokens=N    llm.infer-stream as server-sent events: one `data:` per chunk, then
                                         `event: done`; stops when the writer reports the client gone
/drip?n=N&ms=MS             start, then N lines "tick I", one every MS milliseconds (no LLM)
/spin?s=S                   compute for S seconds, then answer (parallelism)
/loop                       spin forever (deadline)
/stall                      start, write "start", compute until writer.time-left-ms() is 0 (and 0.5 s more), then
                            write "told" and return "end" (a guest ending its response within the grace)
/trap                       raise an uncaught exception (500)
/alloc?mb=N                 allocate and touch N MB (memory limit)
/env  /read?path=P  /list?path=P  /connect?port=N     what the sandbox lets the guest see
/big?op=OP&bytes=N          call OP with a text of N bytes: none (only build it, and its UTF-8 copy), infer,
                            chat, tokenize, append, score, embed; JSON {"ok": size} or {"err": {kind, message}}
/say?text=T                 write T (percent-decoded) to stderr, then answer
/score?n=N&words=W          score N continuations of W words each on one sequence; JSON {"ok": N} or {"err": ...}
/bad-status                 return status 42 (500: not an HTTP status)
/write-before-start         call write() before start(); JSON of the error it got
"""

import json
import os
import socket
import sys
import time
from urllib.parse import parse_qs, urlsplit

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import http, llm, sequences

ERROR_KINDS = {
    llm.Error_ModelNotSupported: "model-not-supported",
    llm.Error_RuntimeError: "runtime-error",
    llm.Error_InvalidInput: "invalid-input",
    http.WriteError_Closed: "closed",
    http.WriteError_Invalid: "invalid",
}


def error_json(error):
    if isinstance(error, Err):
        return {"kind": ERROR_KINDS.get(type(error.value), "?"), "message": getattr(error.value, "value", "") or ""}
    return {"kind": type(error).__name__, "message": str(error)}


def reply(value, status=200):
    return http.Response(status=status, headers=[("content-type", "application/json")], body=json.dumps(value).encode())


def greedy(max_tokens):
    return llm.InferencingParams(
        max_tokens=max_tokens,
        repeat_penalty=1.0,
        repeat_penalty_last_n_token_count=0,
        stop=[],
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        seed=None,
        constraint=None,
        logprobs=None,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        logit_bias=[],
    )


def op_infer(q, writer):
    result = llm.infer(q.get("model", "gemma-3-270m"), q.get("prompt", "Hello"), greedy(int(q.get("max_tokens", "8"))))
    usage = result.usage
    return reply(
        {
            "ok": {
                "text": result.text,
                "finish-reason": result.finish_reason.name.lower(),
                "generated": usage.generated_token_count,
            }
        }
    )


def op_stream(q, writer):
    model, prompt = q.get("model", "gemma-3-270m"), q.get("prompt", "Hello")
    stream = llm.infer_stream(model, prompt, greedy(int(q.get("max_tokens", "8"))))
    writer.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-store")])
    with stream:
        while True:
            try:
                event = stream.next()
            except Err as error:
                writer.write(f"event: error\ndata: {json.dumps(error_json(error))}\n\n".encode())
                break
            if isinstance(event, llm.StreamEvent_Chunk):
                data = {"text": event.value.text, "generated": event.value.usage.generated_token_count}
                writer.write(f"data: {json.dumps(data)}\n\n".encode())
            else:
                done = {
                    "finish-reason": event.value.finish_reason.name.lower(),
                    "generated": event.value.usage.generated_token_count,
                }
                writer.write(f"event: done\ndata: {json.dumps(done)}\n\n".encode())
                break
    return http.Response(status=200, headers=[], body=b"")


def op_hold(q, writer):
    """Return while holding an unread stream and an open sequence (kept in a global): the request's scope must
    free both when the request ends."""
    stream = llm.infer_stream(q.get("model", "gemma-3-270m"), "Count: 1, 2, 3,", greedy(64))
    stream.next()
    seq = sequences.Sequence.open(q.get("model", "gemma-3-270m"))
    seq.append("Hello there")
    HELD.extend([stream, seq])
    return reply({"ok": len(HELD)})


HELD = []


def op_score(q, writer):
    seq = sequences.Sequence.open(q.get("model", "gemma-3-270m"))
    seq.append("Here is a long list of words:")
    words = " ".join(f"word{i}" for i in range(int(q.get("words", "300"))))
    try:
        scores = seq.score([f" {words} {j}" for j in range(int(q.get("n", "16")))])
    except Err as error:
        return reply({"err": error_json(error)}, 500)
    return reply({"ok": len(scores)})


def op_open_many(q, writer):
    opened = []
    for i in range(int(q.get("n", "10"))):
        try:
            opened.append(sequences.Sequence.open(q.get("model", "gemma-3-270m")))
        except Err as error:
            return reply({"opened": i, "err": error_json(error)})
    return reply({"opened": len(opened), "err": None})


def op_embed(q, writer):
    texts = [f"text number {i} about something" for i in range(int(q.get("n", "10")))]
    try:
        result = llm.generate_embeddings(q.get("model", "gemma-3-270m"), texts)
    except Err as error:
        return reply({"err": error_json(error)}, 500)
    return reply({"ok": len(result.embeddings)})


def op_noise(q, writer):
    """Write `bytes` bytes (in one write) to `to` (stdout or stderr), in lines of 100 characters."""
    size = int(q.get("bytes", "1000"))
    line = "x" * 99 + "\n"
    text = line * (size // 100) + "y" * (size % 100)
    stream = sys.stdout if q.get("to", "stderr") == "stdout" else sys.stderr
    stream.write(text)
    return reply({"ok": size})


def op_big(q, writer):
    model = q.get("model", "gemma-3-270m")
    size = int(q.get("bytes", "1000"))
    sentence = "The quick brown fox jumps over the lazy dog. "
    text = (sentence * (size // len(sentence) + 1))[:size]
    op = q.get("op", "none")
    try:
        if op == "none":  # what the guest itself spends: the text, and the UTF-8 copy a host call would make
            result = len(text.encode())
        elif op == "infer":
            result = llm.infer(model, text, greedy(1)).usage.generated_token_count
        elif op == "chat":
            message = llm.ChatMessage(role=llm.ChatRole.USER, content=text, tool_calls=[], tool_call_id=None)
            result = llm.chat(model, [message], None).usage.generated_token_count
        elif op == "tokenize":
            result = len(llm.tokenize(model, text))
        elif op == "append":
            seq = sequences.Sequence.open(model)
            seq.append(text)
            result = seq.len()
        elif op == "score":
            seq = sequences.Sequence.open(model)
            seq.append("Hello")
            result = seq.score([text])
        elif op == "embed":
            result = len(llm.generate_embeddings(model, ["short", text]).embeddings)
        else:
            return reply({"err": {"kind": "?", "message": f"no op {op}"}})
    except Err as error:
        return reply({"err": error_json(error)})
    return reply({"ok": result})


def op_say(q, writer):
    sys.stderr.write(q.get("text", "") + "\n")
    return reply({"ok": "said"})


def op_nocontent(q, writer):
    return http.Response(status=204, headers=[], body=b"this body must not be sent")


def op_drip(q, writer):
    writer.start(200, [("content-type", "text/plain")])
    for i in range(int(q.get("n", "10"))):
        writer.write(f"tick {i}\n".encode())
        time.sleep(int(q.get("ms", "10")) / 1000)
    return http.Response(status=200, headers=[], body=b"end\n")


def op_spin(q, writer):
    end = time.monotonic() + float(q.get("s", "0.5"))
    n = 0
    while time.monotonic() < end:
        n += 1
    return reply({"ok": n})


def op_loop(q, writer):
    n = 0
    while True:
        n += 1


def op_stall(q, writer):
    writer.start(200, [("content-type", "text/plain")])
    writer.write(b"start\n")
    while writer.time_left_ms() > 0:
        pass
    end = time.monotonic() + 0.5  # well past the deadline: the server has noticed, this is the grace
    while time.monotonic() < end:
        pass
    writer.write(b"told\n")
    return http.Response(status=200, headers=[], body=b"end\n")


def op_trap(q, writer):
    raise RuntimeError("http-probe: deliberate trap")


def op_alloc(q, writer):
    block = bytearray(int(q["mb"]) * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])
    if q.get("trap"):
        raise RuntimeError("http-probe: trap after allocating")
    return reply({"ok": len(block)})


def op_env(q, writer):
    return reply({"ok": dict(os.environ)})


def op_read(q, writer):
    with open(q["path"]) as f:
        return reply({"ok": f.read()})


def op_list(q, writer):
    return reply({"ok": sorted(os.listdir(q["path"]))})


def op_connect(q, writer):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.connect(("127.0.0.1", int(q["port"])))
    return reply({"ok": "connected"})


def op_bad_status(q, writer):
    return http.Response(status=42, headers=[], body=b"")


def op_write_before_start(q, writer):
    try:
        writer.write(b"too early")
    except Err as error:
        return reply({"err": error_json(error)})
    return reply({"ok": "written"})


OPERATIONS = {
    "/echo": None,
    "/infer": op_infer,
    "/stream": op_stream,
    "/drip": op_drip,
    "/hold": op_hold,
    "/open-many": op_open_many,
    "/noise": op_noise,
    "/nocontent": op_nocontent,
    "/big": op_big,
    "/say": op_say,
    "/embed": op_embed,
    "/spin": op_spin,
    "/loop": op_loop,
    "/stall": op_stall,
    "/score": op_score,
    "/trap": op_trap,
    "/alloc": op_alloc,
    "/env": op_env,
    "/read": op_read,
    "/list": op_list,
    "/connect": op_connect,
    "/bad-status": op_bad_status,
    "/write-before-start": op_write_before_start,
}


class Handler(exports.Handler):
    def handle(self, request, writer):
        url = urlsplit(request.path_with_query)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        path = url.path
        if path.endswith("/hello"):
            return http.Response(status=200, headers=[("content-type", "text/plain")], body=b"hello")
        if path.endswith("/echo"):
            return reply(
                {
                    "method": request.method,
                    "path": request.path_with_query,
                    "headers": [list(h) for h in request.headers],
                    "body": bytes(request.body).decode("utf-8", "replace"),
                }
            )
        name = "/" + path.rsplit("/", 1)[-1]
        operation = OPERATIONS.get(name)
        if operation is None:
            return http.Response(status=404, headers=[], body=f"http-probe: no operation {path}".encode())
        try:
            return operation(q, writer)
        except (Err, OSError) as error:
            return reply({"err": error_json(error)}, status=200)
