"""A local server speaking the Hugging Face Hub's download protocol (what huggingface_hub's `model_info` and
`hf_hub_download` use), for `llmhost pull` tests: point HF_ENDPOINT at it. Nothing reaches the internet.

Serves repos of real files: GET /api/models/OWNER/NAME/revision/REV (the files with their sizes and sha256) and
HEAD/GET /OWNER/NAME/resolve/REV/FILE (ranges, for resuming). Faults for tests: `cut_once` (a file whose first GET
is cut mid-body), `corrupt` (a file served with other bytes than its sha256 says), `gated` (repos refused 403).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

POLL_S = 0.05  # serve_forever's shutdown poll: its default (0.5 s) would end each test half a second late
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Hub:
    repos: dict[str, dict[str, Path]]  # repo -> file name -> the file served
    cut_once: set[str] = field(default_factory=set)  # file names
    corrupt: set[str] = field(default_factory=set)
    gated: set[str] = field(default_factory=set)  # repos
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range header)
    url: str = ""
    _digests: dict[Path, str] = field(default_factory=dict)

    def sha256(self, path: Path) -> str:
        if path not in self._digests:
            self._digests[path] = hashlib.sha256(path.read_bytes()).hexdigest()
        return self._digests[path]


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802
            self._serve(body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._serve(body=True)

        def _error(self, status: int, code: str) -> None:
            data = json.dumps({"error": code}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, body: bool) -> None:
            path = unquote(self.path.split("?", 1)[0])
            hub.requests.append((self.command, path, self.headers.get("Range")))
            api = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
            resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
            repo = (api or resolve).group(1) if (api or resolve) else None
            if repo is None or repo not in hub.repos:
                return self._error(404, "RepoNotFound")
            if repo in hub.gated:
                return self._error(403, "GatedRepo")
            if api:
                return self._info(repo)
            assert resolve is not None
            name = resolve.group(3)
            if name not in hub.repos[repo]:
                return self._error(404, "EntryNotFound")
            self._file(hub.repos[repo][name], name, body)

        def _info(self, repo: str) -> None:
            siblings = [
                {
                    "rfilename": n,
                    "size": p.stat().st_size,
                    "lfs": {"sha256": hub.sha256(p), "size": p.stat().st_size, "pointerSize": 134},
                }
                for n, p in hub.repos[repo].items()
            ]
            self._json({"id": repo, "modelId": repo, "sha": COMMIT, "siblings": siblings})

        def _json(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _file(self, path: Path, name: str, body: bool) -> None:
            size = path.stat().st_size
            start = 0
            ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if ranged:
                start = int(ranged.group(1))
            self.send_response(206 if ranged else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{hub.sha256(path)}"')
            self.send_header("X-Linked-Etag", f'"{hub.sha256(path)}"')
            self.send_header("X-Linked-Size", str(size))
            self.send_header("Content-Length", str(size - start))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.end_headers()
            if not body:
                return
            with path.open("rb") as file:
                file.seek(start)
                data = file.read()
            if name in hub.corrupt:
                data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]  # the header itself: not even GGUF
            if name in hub.cut_once and not ranged:
                hub.cut_once.discard(name)
                self.wfile.write(data[: len(data) // 2])  # then the connection drops mid-file
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(data)

    return Handler


@contextmanager
def hub_server(hub: Hub, handler: type[BaseHTTPRequestHandler] | None = None) -> Iterator[Hub]:
    """Serve `hub` on loopback (with `handler`, a subclass of `_handler(hub)`'s class, in its place)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler or _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
