"""The generation side of /v1/messages: the chat stream with Anthropic's `stop_sequences` matched in the guest,
and the streamed answer as Anthropic's named server-sent events.

Why stop sequences are matched here: the host ends a generation at a stop sequence with finish reason `stop`, the
same as at the end of the turn, and does not say which sequence matched; Anthropic's answer names it
(`stop_reason: "stop_sequence"`, `stop_sequence`). So the sequences go to the guest's `StopScanner` (the host's
rule: the earliest-starting match, text that could begin one held back) and the stream is dropped at the match,
which cancels the generation. Each chunk's tokens (their logprob entries carry their bytes) tell which token
completed the match, so `output_tokens` counts what the host would have counted had it matched the sequence.
"""

import codecs
import json
import uuid

from checks import BadRequest
from common import WIND_DOWN_MS, api_error
from llmhost_guest import LlmError, Usage, llm

# Anthropic's error type of each HTTP status (anything else: api_error from 500 on, else invalid_request_error).
ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 504: "timeout_error",
    529: "overloaded_error",
}  # fmt: skip


def error_json(error: BadRequest):
    kind = ERROR_TYPES.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": str(error)}}


def stop_reason(finish, called, stop_sequence):
    """Anthropic's `stop_reason` of a generation's finish reason (the WIT's)."""
    if called:
        return "tool_use"
    if stop_sequence is not None:
        return "stop_sequence"
    return "max_tokens" if finish == "length" else "end_turn"


class StopScanner:
    """The earliest-starting occurrence of any stop sequence in a growing text, as soon as it is certain (the
    host's `StopMatcher`): text that could begin a sequence is held until it cannot; `matched` names the one found."""

    def __init__(self, stops):
        self.stops = tuple(dict.fromkeys(stops))
        self.longest = max(len(s) for s in self.stops)
        self.held, self.matched = "", None

    def push(self, text):
        """The text now certain to be output (on a match: the text before it)."""
        buf = self.held + text
        match, partial = self.earliest(buf), self.partial(buf)
        if match is not None and (partial is None or match[0] <= partial):
            self.held, self.matched = "", match[1]
            return buf[: match[0]]
        keep = len(buf) if partial is None else partial
        self.held = buf[keep:]
        return buf[:keep]

    def finish(self):
        """No more text: held text is output, up to a sequence that it holds whole."""
        buf, self.held = self.held, ""
        match = self.earliest(buf) if self.matched is None else None
        if match is not None:
            self.matched = match[1]
            return buf[: match[0]]
        return buf

    def earliest(self, buf):
        found = [(i, s) for s in self.stops if (i := buf.find(s)) >= 0]
        return min(found, key=lambda f: f[0]) if found else None

    def partial(self, buf):
        """The earliest position whose suffix is a proper prefix of a stop sequence (a match still possible)."""
        for q in range(max(0, len(buf) - self.longest + 1), len(buf)):
            tail = buf[q:]
            if any(len(s) > len(tail) and s.startswith(tail) for s in self.stops):
                return q
        return None


class Generation:
    """A request's chat stream as text pieces and `ToolCallDelta`s; afterwards `finish_reason`, `stop_sequence`
    and `usage`. Opening it raises the host's input errors (before any response is started)."""

    def __init__(self, req, options):
        params = {**req.params, "logprobs": 0} if req.stops else req.params  # entries: each token's bytes
        self.events = llm.chat_stream(req.messages, req.model, **options, **params)
        self.scanner = StopScanner(req.stops) if req.stops else None
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.finish_reason, self.stop_sequence, self.usage = None, None, Usage(0, 0)

    def __iter__(self):
        with self.events as events:  # leaving it drops the stream: the host cancels the generation
            for event in events:
                if isinstance(event, llm.ToolCallDelta):
                    yield event
                    continue
                self.usage = event.usage
                text = event.text if self.scanner is None else self.scan(event)
                if text:
                    yield text
                if self.stop_sequence is not None:
                    self.finish_reason = "stop"
                    return
            if self.scanner is not None:
                tail = self.scanner.finish()
                self.stop_sequence = self.scanner.matched
                if tail:
                    yield tail
            if events.done is not None:
                self.usage = events.done.usage
                self.finish_reason = "stop" if self.stop_sequence is not None else events.done.finish_reason

    def scan(self, chunk):
        """The chunk's text through the scanner token by token; on a match, `usage` counts up to the token that
        completed it."""
        entries = chunk.logprobs
        if entries and len(entries) == len(chunk.token_ids):
            first, pieces, pos = chunk.usage.generated_tokens - len(entries), [], 0
            for k, entry in enumerate(entries):
                size = len(self.decoder.decode(entry.text))
                end = pos + size if k < len(entries) - 1 else len(chunk.text)
                pieces.append((chunk.text[pos:end], first + k + 1))
                pos = end
        else:  # no entry per token (not expected): the chunk as one piece
            pieces = [(chunk.text, chunk.usage.generated_tokens)]
        released = []
        for piece, count in pieces:
            released.append(self.scanner.push(piece))
            if self.scanner.matched is not None:
                self.stop_sequence = self.scanner.matched
                self.usage = Usage(chunk.usage.prompt_tokens, count)
                break
        return "".join(released)


class EventWriter:
    """Anthropic's named events of one streamed message, and its content blocks opened and closed in turn."""

    def __init__(self, writer):
        self.writer, self.index, self.block = writer, -1, None

    def send(self, kind, **data):
        self.writer.write(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode())

    def open(self, block, content_block):
        """Start block `block` (a key: "text", or a tool call's index) unless it is the one under way."""
        if self.block != block:
            self.close()
            self.index, self.block = self.index + 1, block
            self.send("content_block_start", index=self.index, content_block=content_block)

    def close(self):
        if self.block is not None:
            self.send("content_block_stop", index=self.index)
            self.block = None

    def delta(self, delta):
        self.send("content_block_delta", index=self.index, delta=delta)


def stream_message(req, writer, options, input_tokens):
    """message_start, each block (start, deltas, stop), message_delta (stop_reason, usage), message_stop; a failed
    generation ends with an `error` event instead. Near the request's hard cap it ends early with `max_tokens`."""
    generation = Generation(req, options)
    writer.start(200, [("content-type", "text/event-stream"), ("cache-control", "no-store")])
    out = EventWriter(writer)
    usage = {"input_tokens": input_tokens, "output_tokens": 0}
    message = {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": req.model}
    out.send("message_start", message={**message, "content": [], "stop_reason": None, "stop_sequence": None,
                                       "usage": usage})  # fmt: skip
    events, called, wound_down = iter(generation), False, False
    try:
        for event in events:
            if isinstance(event, str):
                out.open("text", {"type": "text", "text": ""})
                out.delta({"type": "text_delta", "text": event})
            elif event.index == 0 or req.parallel_tool_calls:
                called = True
                out.open(event.index, {"type": "tool_use", "id": event.id, "name": event.name, "input": {}})
                if event.arguments:
                    out.delta({"type": "input_json_delta", "partial_json": event.arguments})
            if writer.time_left_ms() < WIND_DOWN_MS:
                wound_down = True
                break
    except LlmError as error:  # the generation failed or was cancelled: an error event ends the stream
        out.send("error", error=error_json(api_error(error, req.model, writer))["error"])
        return
    finally:
        events.close()
    out.close()
    reason = "max_tokens" if wound_down else stop_reason(generation.finish_reason, called, generation.stop_sequence)
    final = {
        "input_tokens": generation.usage.prompt_tokens or input_tokens,
        "output_tokens": generation.usage.generated_tokens,
    }
    out.send("message_delta", delta={"stop_reason": reason, "stop_sequence": generation.stop_sequence}, usage=final)
    out.send("message_stop")
