"""Comparing streams across paths: how a stream's tokens are grouped into chunks depends on timing (a reader that
comes back late gets every ready token in one chunk, on any backend), so streams are compared with their runs of
chunks merged: the same text, token ids, logprobs and usage, and the same done event."""

from __future__ import annotations

from typing import Any


def merged_chunks(value: Any) -> Any:
    """`value` (a probe's JSON) with every run of stream chunks merged into one chunk."""
    if isinstance(value, dict):
        return {key: merged_chunks(item) for key, item in value.items()}
    if not isinstance(value, list):
        return value
    out: list[Any] = []
    for item in value:
        chunk = item.get("chunk") if isinstance(item, dict) else None
        last = out[-1].get("chunk") if out and isinstance(out[-1], dict) else None
        if chunk is not None and last is not None:
            last["text"] += chunk["text"]
            last["token-ids"] += chunk["token-ids"]
            last["usage"] = chunk["usage"]
            if "logprobs" in chunk:
                last["logprobs"] = last.get("logprobs", []) + chunk["logprobs"]
        elif chunk is not None:
            out.append({"chunk": {**chunk, "token-ids": list(chunk["token-ids"])}})
        else:
            out.append(merged_chunks(item))
    return out
