"""A tiny OpenAI-compatible completions server for the remote backend's fault tests (run as a subprocess).

`python remote_test_server.py PORT [--busy N]`: streams one chunk (" tok") every 50 ms until `max_tokens`, then a
finish chunk and usage. The first N completion requests are answered 503 (with Retry-After: 0). GET /stats
reports {"requests", "active", "cancelled"}: a stream whose client went away counts as cancelled at once.
POST /v1/embeddings answers as llama-cpp-python's server does for a causal model: one vector per token (here one
token per character: [code, 1.0]); a text starting with "malformed:" picks a broken body instead (its rest: "no-data",
"strings", "ragged", "index").
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATS = {"requests": 0, "active": 0, "cancelled": 0, "busy": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        with LOCK:
            body = json.dumps(STATS).encode()
        self._send(200, body)

    def _send(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path.endswith("/embeddings"):
            self._embeddings(request["input"] if isinstance(request["input"], list) else [request["input"]])
            return
        with LOCK:
            STATS["requests"] += 1
            busy = STATS["busy"] > 0
            if busy:
                STATS["busy"] -= 1
        if busy:
            self._send(503, b'{"error": {"message": "busy"}}', {"retry-after": "0"})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        with LOCK:
            STATS["active"] += 1
        try:
            n = int(request.get("max_tokens") or 16)
            for i in range(n):
                finish = "length" if i == n - 1 else None
                self._event(
                    {
                        "id": "x",
                        "object": "text_completion",
                        "created": 0,
                        "model": "m",
                        "choices": [{"index": 0, "text": " tok", "finish_reason": finish}],
                    }
                )
                time.sleep(0.05)
            self._event(
                {
                    "id": "x",
                    "object": "text_completion",
                    "created": 0,
                    "model": "m",
                    "choices": [],
                    "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3},
                }
            )
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except OSError:
            with LOCK:
                STATS["cancelled"] += 1
        finally:
            with LOCK:
                STATS["active"] -= 1
            self.close_connection = True

    def _embeddings(self, texts: list[str]) -> None:
        if len(texts) > 2048:  # OpenAI's limit per request
            error = {"error": {"message": f"{len(texts)} inputs: at most 2048", "type": "invalid_request_error"}}
            self._send(400, json.dumps(error).encode())
            return
        data: object = [
            {"object": "embedding", "index": i, "embedding": [[float(ord(c)), 1.0] for c in text]}
            for i, text in enumerate(texts)
        ]
        broken = texts[0].removeprefix("malformed:") if texts and texts[0].startswith("malformed:") else None
        if broken == "no-data":
            data = None
        elif broken == "strings":
            data[0]["embedding"] = "not a vector"  # type: ignore[index]
        elif broken == "ragged":
            data[0]["embedding"] = [[1.0, 2.0], [3.0]]  # type: ignore[index]
        elif broken == "index":
            data[0]["index"] = 7  # type: ignore[index]
        body = {"object": "list", "model": "m", "data": data, "usage": {"prompt_tokens": sum(map(len, texts))}}
        self._send(200, json.dumps(body).encode())

    def _event(self, data: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        self.wfile.flush()


def main() -> None:
    port = int(sys.argv[1])
    if "--busy" in sys.argv:
        STATS["busy"] = int(sys.argv[sys.argv.index("--busy") + 1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
