"""`llmhost mcp` over stdio: the SDK's transport, fed only the lines it can take.

The SDK drops a line it cannot parse without a word, so a client that sent garbage, a JSON-RPC batch or a string
that is not valid Unicode (an escaped lone surrogate) got no answer, and a request with an id waited forever. Here
each such line is answered with a JSON-RPC error (-32700 parse error, -32600 invalid request: a batch, or no
JSON-RPC message) through the SDK's own writer, and logged in one line (cut short), and the server goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import anyio

from llmhost.mcp.tools import clip
from llmhost.shell.watch import Watcher

_log = logging.getLogger("llmhost.mcp")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
BATCH = "batches are not supported: send one JSON-RPC message per line"
NOT_A_MESSAGE = "Invalid Request: not a JSON-RPC 2.0 request, notification or response"
NOT_UNICODE = "Parse error: a string is not valid Unicode (an unpaired surrogate escape such as \\ud800)"
LOGGED_CHARS = 200  # of a refused line, in its log line


def line_problem(line: str) -> tuple[int, str, str | int | None] | None:
    """Why the SDK cannot take this line of stdin (None: it can): (JSON-RPC error code, message, the id to answer
    with, None when there is none to read)."""
    import mcp_types as types
    import pydantic_core
    from pydantic import ValidationError

    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)  # what the SDK's reader does
        return None
    except ValidationError:
        pass
    try:
        data = pydantic_core.from_json(line)
    except ValueError as error:
        try:
            data = json.loads(line)  # Python's parser takes what is JSON but not Unicode: lone surrogates
        except ValueError:
            return PARSE_ERROR, f"Parse error: {clip(str(error), LOGGED_CHARS)}", None
        return PARSE_ERROR, NOT_UNICODE, _request_id(data)
    if isinstance(data, list):
        return INVALID_REQUEST, BATCH, None
    return INVALID_REQUEST, NOT_A_MESSAGE, _request_id(data)


def _request_id(data: Any) -> str | int | None:
    """The id of a request that could not be taken, when it has one (so that its client is answered)."""
    rid = data.get("id") if isinstance(data, dict) else None
    if isinstance(rid, str) and rid.isprintable() and len(rid) <= LOGGED_CHARS:
        return rid
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None


class CheckedLines:
    """stdin's lines for the SDK's reader, less those it cannot take: each of those is answered through `answers`
    (the SDK's write stream, set once the transport is open) and logged. Blank lines are skipped."""

    def __init__(self, source: AsyncIterable[str]) -> None:
        self._source = source
        self._answers: Any = None
        self._ready = anyio.Event()

    def answer_to(self, answers: Any) -> None:
        self._answers = answers
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        async for line in self._source:
            if not line.strip():
                continue
            problem = line_problem(line)
            if problem is None:
                yield line
                continue
            code, message, request_id = problem
            _log.warning("stdin: refused a line (%s): %s", message, clip(line.rstrip("\n"), LOGGED_CHARS))
            await self._answer(code, message, request_id)

    async def _answer(self, code: int, message: str, request_id: str | int | None) -> None:
        from mcp.shared.message import SessionMessage
        from mcp_types import ErrorData, JSONRPCError

        await self._ready.wait()
        error = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # closing: nobody reads it
            await self._answers.send(SessionMessage(error))


async def serve_stdio(server: Any, watcher: Watcher[Any] | None = None) -> None:
    """Run the SDK's low-level `server` over stdin and stdout, until the client closes stdin; `watcher` (`--watch`)
    watches meanwhile."""
    from mcp.server.stdio import stdio_server

    # Text over fd 0 that leaves it open (the SDK's own reader does the same: UTF-8, undecodable bytes replaced).
    stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115 (closed below)
    checked = CheckedLines(anyio.wrap_file(stdin))
    if watcher is not None:
        watcher.start()
    try:
        async with stdio_server(stdin=checked) as (read_stream, write_stream):  # type: ignore[arg-type]
            checked.answer_to(write_stream)
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        if watcher is not None:
            watcher.stop()
        stdin.close()
