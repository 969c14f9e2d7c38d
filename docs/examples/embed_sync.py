"""Embed the host in a Python program, synchronously: a completion, a chat that calls a tool, and a streamed reply.

Run: python docs/examples/embed_sync.py (the built-in models download on first use).
"""

from __future__ import annotations

import sys

from llmhost import ChatMessage, Host, InferencingParams, StreamChunk

MODEL = "smollm2-135m"  # the built-in instruct model
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def main(host: Host) -> None:
    completion = host.infer("gemma-3-270m", "The capital of France is", InferencingParams(max_tokens=8))
    print("completion:", completion.text)

    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = host.chat(MODEL, question, InferencingParams(max_tokens=64), tools=[WEATHER], tool_choice="required")
    call = reply.message.tool_calls[0]
    print("tool call:", call.name, call.parsed_arguments())  # `call.arguments` is the JSON text, as in OpenAI

    # Answer the call and go on: OpenAI-shaped dicts and the typed messages mix.
    history: list[ChatMessage | dict[str, str]] = [
        *question,
        reply.message,
        {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"},
    ]
    stream = host.chat_stream(MODEL, history, InferencingParams(max_tokens=32))
    try:
        for event in stream:
            if isinstance(event, StreamChunk):
                sys.stdout.write(event.text)
    finally:
        stream.close()  # a stream left early is cancelled: its slot frees at once
    print()


if __name__ == "__main__":
    with Host() as running:
        main(running)
