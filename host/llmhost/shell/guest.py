"""A guest's failures and output, as both servers (`serve`, `mcp`) report them: the kinds of failure the metrics
count, the failure a client is told, and the guest's stdout/stderr logged line by line under its own prefix."""

from __future__ import annotations

import logging

from llmhost.api import wasm_cause
from llmhost.domain.limits import MAX_REASON_CHARS
from llmhost.runtime.sandbox import CapturedOutput
from llmhost.shell.config import ComponentSettings

_guest_log = logging.getLogger("llmhost.serve.guest")  # the name the logs have always used

# C0 controls but tab, DEL, and C1 controls: shown as `\xNN` in log lines, so that what a guest writes cannot move
# a terminal's cursor or erase the prefix that names it (`ESC[2K ESC[G`), nor hide in NULs and backspaces.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F, *range(0x80, 0xA0))}


def escape_controls(text: str) -> str:
    r"""`text` with its control characters (see `_CONTROLS`) written as `\xNN`; every other character kept."""
    return text.translate(_CONTROLS)


def guest_lines(text: str) -> list[str]:
    """A guest's output as log lines: split at newlines only (a CRLF's CR goes with it), every other control
    character escaped, so each record is one line that begins with the prefix naming the guest."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [escape_controls(line.removesuffix("\r")) for line in lines]


# The kinds of guest failure the metrics count (`llmhost_guest_failures_total{kind}`).
TRAP, DEADLINE, MEMORY, LOG_DROPPED = "trap", "deadline", "memory", "log-dropped"
FAILURE_KINDS = (TRAP, DEADLINE, MEMORY, LOG_DROPPED)
# Logged as the status of a request whose client left before any response was sent (nginx's convention).
CLIENT_CLOSED_STATUS = 499


class GuestFailure(Exception):
    """The guest did not produce a response: `status` is 500 (trap, memory) or 504 (deadline); `kind` is one of
    `FAILURE_KINDS`, or None when the guest is not to blame (its client left, a host error)."""

    def __init__(self, status: int, reason: str, kind: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.kind = kind


class GuestOutput:
    """What one guest instance writes to stdout and stderr, captured (at most `max_log_bytes` of it kept), then
    logged, each line one record prefixed with the component and the request id (so that a guest cannot forge the
    server's own lines)."""

    def __init__(self, component: str, request_id: str, max_log_bytes: int) -> None:
        self.stdout, self.stderr = CapturedOutput(lambda _: None), CapturedOutput(lambda _: None)
        self._component, self._request_id, self._max = component, request_id, max_log_bytes
        self._read: dict[str, tuple[bytes, bytes, int]] = {}

    def _collect(self) -> dict[str, tuple[bytes, bytes, int]]:
        if not self._read:  # once: reading removes the files
            budget = self._max
            for name, output in (("stdout", self.stdout), ("stderr", self.stderr)):
                self._read[name] = output.read_capped(budget)
                budget -= len(self._read[name][0])
        return self._read

    def stderr_text(self) -> bytes:
        head, tail, size = self._collect()["stderr"]
        return head if size <= len(head) else head + b"\n...\n" + tail

    def log(self) -> bool:
        """Log what the guest wrote; returns whether some of it was dropped (past `max-log-bytes`)."""
        dropped = False
        for name, (head, _, size) in self._collect().items():
            for line in guest_lines(head.decode("utf-8", "replace")):
                _guest_log.info("%s [%s] %s: %s", self._component, self._request_id, name, line)
            if size > len(head):
                dropped = True
                _guest_log.warning(
                    "%s [%s] %s: %d more bytes not logged (limit `max-log-bytes`: %d per request)",
                    self._component,
                    self._request_id,
                    name,
                    size - len(head),
                    self._max,
                )
        return dropped


def guest_failure(settings: ComponentSettings, message: str, stderr: bytes) -> GuestFailure:
    """A guest's trap as the failure a client is told: past its deadline (504), out of memory, or the trap (500)."""
    cause, name = wasm_cause(message), settings.name
    if "wasm trap: interrupt" in cause:
        limit, key = settings.limits.deadline_s, settings.limit_key("deadline_s")
        return GuestFailure(504, f"{name} ran past its deadline of {limit} s ({key})", DEADLINE)
    text = stderr.decode("utf-8", "replace")
    if "MemoryError" in text:
        limit_mb, key = settings.limits.max_memory_mb, settings.limit_key("max_memory_mb")
        return GuestFailure(500, f"{name} ran out of memory (limit {limit_mb} MB, {key})", MEMORY)
    detail = _python_error(text) or cause
    return GuestFailure(500, f"{name} trapped: {detail}"[:MAX_REASON_CHARS], TRAP)


def _python_error(stderr: str) -> str:
    """A Python guest's uncaught exception, `Type: message`: the last line of its traceback, which
    componentize-py prints before its own panic message."""
    before_panic = stderr.split("\nthread '", 1)[0]
    lines = [line.strip() for line in before_panic.splitlines() if line.strip()]
    return lines[-1] if lines and "Traceback (most recent call last)" in before_panic else ""
