"""Running `llmhost serve` as a subprocess, the way a user does, for the serve tests of every suite.

The server listens on 127.0.0.1 port 0 (a free port it picks itself); the port is read from its
"listening on http://..." log line. Its log is collected on a thread, so tests can look for request lines. Every
server is stopped (SIGTERM) by its context manager, and a test can check that it exits 0.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LLMHOST = str(Path(sys.executable).with_name("llmhost"))
LISTENING = re.compile(r"listening on http://([\d.]+):(\d+)")
METRICS_LINE = re.compile(r"metrics on http://([\d.]+):(\d+)/metrics")  # a server with `metrics-listen`
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]  # (name, labels) -> value
START_TIMEOUT_S = 240.0  # the first start may compile a component (~25 s on 2 cores)
STOP_TIMEOUT_S = 30.0


class Server:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.host = ""
        self.port = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for_line(self, pattern: str, timeout: float, start: int = 0) -> re.Match[str]:
        """The first log line from index `start` on that matches `pattern` (waiting up to `timeout` s)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[start:]:
                    match = regex.search(line)
                    if match:
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    log = "\n".join(self.lines[-40:])
                    raise AssertionError(f"no log line matching {pattern!r} within {timeout} s; log:\n{log}")
                self._changed.wait(min(left, 0.2))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def connection(self, timeout: float = 30.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        connection = self.connection()
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def get_json(self, path: str) -> Any:
        status, body = self.request("GET", path)
        assert status == 200, (status, body)
        return json.loads(body)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("the server did not stop within 30 s of " + signal.Signals(sig).name) from None

    def rss_kb(self, field: str = "VmRSS") -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field}")

    def peak_growth_kb(self, path: str) -> tuple[int, bytes]:
        """GET `path`; returns how far the server's resident memory peaked above where it was before (the peak
        is reset first, through /proc/PID/clear_refs), and the response body."""
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")
        before = self.rss_kb()
        status, body = self.request("GET", path)
        assert status == 200, (status, body[:300])
        return self.rss_kb("VmHWM") - before, body


@contextmanager
def serving(
    args: Sequence[str],
    cache_dir: Path,
    cwd: Path | None = None,
    nofile: int | None = None,
    command: str = "serve",
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """Run `llmhost serve ARGS --listen 127.0.0.1:0` (or another `command`, e.g. `mcp`) until the block ends (then
    SIGTERM). `nofile`: the server's RLIMIT_NOFILE, soft and hard. `extra_env`: set in the server's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("LLMHOST_CONFIG", "LLMHOST_LISTEN")}
    env["LLMHOST_CACHE_DIR"] = str(cache_dir)
    env.update(extra_env or {})
    argv = [LLMHOST, command, *args, "--listen", "127.0.0.1:0"]

    def limit_descriptors() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    process = subprocess.Popen(
        argv,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=cwd,
        preexec_fn=limit_descriptors if nofile is not None else None,
    )
    server = Server(process)
    try:
        match = server.wait_for_line(LISTENING.pattern, START_TIMEOUT_S)
        server.host, server.port = match.group(1), int(match.group(2))
        yield server
    finally:
        if process.poll() is None:
            server.stop()


def metric_samples(text: str) -> Samples:
    """A Prometheus exposition (the text of GET /metrics) as its samples."""
    from prometheus_client.parser import text_string_to_metric_families

    families = text_string_to_metric_families(text)
    return {(s.name, frozenset(s.labels.items())): s.value for family in families for s in family.samples}


def scrape(host: str, port: int) -> Samples:
    """The samples of a metrics listener's GET /metrics."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200, response.status
        return metric_samples(response.read().decode())
    finally:
        connection.close()


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)
